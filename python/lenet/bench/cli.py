"""`python -m lenet.bench`: plan the runs, start one fresh worker process per backend x device
x variant (interleaved over repeats), keep each result in <out>/raw/ as it comes, then write the
report from there (the same step as `python -m lenet.bench.report <out>`). One run at a time
writes an --out directory (rundir.py); runner.py starts the workers and the floors."""
from __future__ import annotations

import argparse
import signal
import sys
from dataclasses import replace

from .. import backends, data, weights
from .._cli import Parser, guarded, number
from .._files import atomic_write, writable_outputs
from ..errors import InputError, UnavailableError
from . import loc, meta, raw, report, require_tools, rundir
from .results import Meta, Plan, Row, Split
from .runner import measure_all, measure_floors, on_signal, stop_if_signalled
from .worker import Budget, Config

MODES = ("latency", "throughput", "train", "loc", "layers")
DEFAULT_BATCHES = (1, 8, 64, 256)
QUICK_BATCHES = (1, 64)
MAX_BATCH = 4096          # images per throughput call; activations alone are ~50 KB an image
MAX_EPOCHS = 100
MAX_REPEATS = 100
MAX_TIMEOUT = 86400       # seconds: a day per worker


def parser() -> argparse.ArgumentParser:
    p = Parser(prog="python -m lenet.bench",
               description="Benchmark LeNet backends: correctness against the NumPy reference first, then "
                           "single-image latency (p50/p90/p99), batch throughput, training, lines of code; "
                           "writes results.json, results.md and PNG plots.",
               epilog="Each backend x device x variant runs in a fresh process; --backend all interleaves "
                      "them over --repeats. Exit status: 0 ok, 1 a backend failed its check or crashed, "
                      "2 bad arguments.")
    p.add_argument("--list", action="store_true", help="list every backend and device with ok or why it cannot run")
    p.add_argument("--backend", default="all",
                   help="a backend name, several joined by commas (each run like 'all' runs it), or 'all' (default: all); "
                        "backend/variant names one variant (cupy/3,torch/graph)")
    p.add_argument("--device", default="auto", choices=("cpu", "gpu", "auto"),
                   help="auto: every device that works here with --backend all, else the GPU when it works, else the CPU")
    p.add_argument("--variant", default=None, help="variant label, or 'all' for every variant (default: each backend's default)")
    p.add_argument("--mode", default=",".join(MODES), help=f"comma-separated subset of {','.join(MODES)} (default: all)")
    p.add_argument("--batch-sizes", default=None,
                   help=f"throughput batch sizes, each 1..{MAX_BATCH} (default: 1,8,64,256; --quick: 1,64)")
    p.add_argument("--epochs", type=number(int, 1, MAX_EPOCHS), default=None,
                   help=f"training epochs, 1..{MAX_EPOCHS} (default: 2; --quick: 1 on 256 images)")
    p.add_argument("--dataset", choices=data.DATASETS, default=None,
                   help="training data (default: --data/LENET_DATA if given, else the embedded digits); "
                        "correctness and accuracy always use the embedded test digits")
    p.add_argument("--data", metavar="DIR", default=None, help="directory with the four MNIST-format IDX files")
    p.add_argument("--weights", metavar="FILE", default=None, help="weights to check and time (default: the shipped ones)")
    p.add_argument("--quick", action="store_true", help="few samples, small batches, one short epoch (well under a minute)")
    p.add_argument("--repeats", type=number(int, 1, MAX_REPEATS), default=None,
                   help=f"runs of each backend, interleaved, 1..{MAX_REPEATS} (default: 3; --quick: 1)")
    p.add_argument("--timeout", type=number(float, 0, MAX_TIMEOUT, above=True), default=None,
                   help=f"seconds per worker before it counts as failed, in (0, {MAX_TIMEOUT}] "
                        "(default: 1800; --quick: 300)")
    p.add_argument("--json", metavar="FILE", default=None, help="also write the JSON here ('-' for stdout)")
    p.add_argument("--out", metavar="DIR", default="bench-out",
                   help="write results.json, results.md, *.png here (default: bench-out); an earlier run's "
                        "results there move to DIR/previous/<its run id>/")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    return p


def parse_list(text: str, what: str, known=None) -> tuple:
    items = tuple(t.strip() for t in text.split(",") if t.strip())
    if not items:
        raise InputError(f"{what}: empty list")
    for item in items:
        if known is not None and item not in known:
            raise InputError(f"unknown {what} {item!r} (known: {', '.join(known)})")
    return items


def parse_batches(text: str) -> tuple:
    try:
        sizes = tuple(int(t) for t in parse_list(text, "batch size"))
    except ValueError:
        raise InputError(f"bad batch sizes {text!r}: expected comma-separated positive integers") from None
    if any(not 1 <= b <= MAX_BATCH for b in sizes):
        raise InputError(f"bad batch sizes {text!r}: each must lie in 1..{MAX_BATCH}")
    return tuple(dict.fromkeys(sizes))


def list_backends() -> None:
    rows = [("backend", "device", "variants", "status")]
    for name in backends.names():
        for device in backends.module(name).DEVICES:
            default = backends.default_variant(name, device)      # each device's default first
            variants = ",".join(sorted(backends.variants(name, device), key=lambda v: v != default)) or "-"
            status = backends.unavailable(name, device) or ("ok, inference only" if backends.training_unavailable(name) else "ok")
            rows.append((name, device, variants, status))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[3])


def plan(args, modes) -> tuple[list[Config], list[Row]]:
    """(configs to run, rows of those that cannot run here). An item of --backend may name its variant
    (backend/variant, e.g. cupy/3 or keras/jax/call); the others take --variant."""
    items = backends.names() if args.backend == "all" else args.backend.split(",")
    several = args.backend == "all" or len(items) > 1
    if len(set(items)) < len(items):
        raise InputError(f"--backend {args.backend}: a backend named twice")
    asked = [tuple(item.split("/", 1)) if "/" in item else (item, args.variant) for item in items]
    for name, _ in asked:
        backends.module(name)                    # an unknown name: InputError, before any other check
    if several and args.variant not in (None, "all"):
        raise InputError(f"with --backend {args.backend}, --variant must be 'all' or left out "
                         "(name a backend's variant as backend/variant)")
    runs, skipped = [], []
    for name, wanted in asked:
        mod = backends.module(name)
        if wanted not in (None, "all") and wanted not in backends.variants(name):
            raise InputError(f"{name}: unknown variant {wanted!r} (known: {', '.join(backends.variants(name))})")
        devices = mod.DEVICES if args.device == "auto" else [args.device]
        reasons = {d: backends.unavailable(name, d) for d in devices}
        if wanted not in (None, "all"):          # a variant of some devices only: the others say why
            reasons = {d: r or backends.variant_unavailable(name, wanted, d) for d, r in reasons.items()}
        if not several:
            if args.device == "auto":             # one backend: the GPU when it works, else the CPU
                working = [d for d in ("gpu", "cpu") if d in devices and not reasons[d]]
                if not working:
                    raise UnavailableError(f"{name}: " + "; ".join(f"{d}: {r}" for d, r in reasons.items()))
                devices = working[:1]
            elif reasons[args.device]:
                raise UnavailableError(f"{name} on {args.device}: {reasons[args.device]}")
        for device in devices:
            if reasons[device]:
                skipped.append(Row(backend=name, device=device, variant=None if wanted in (None, "all") else wanted,
                                   status="unavailable", reason=reasons[device]))
                continue
            if wanted == "all":
                variants = list(backends.variants(name, device)) or [None]
            else:                                  # the one asked for, or each device's default
                variants = [wanted or backends.default_variant(name, device)]
            for variant in variants:
                runs.append(Config(name, device, variant, modes=tuple(m for m in modes if m != "loc")))
    if len({(c.backend, c.device, c.variant) for c in runs}) < len(runs):
        raise InputError(f"--backend {args.backend}: a variant named twice")
    return runs, skipped


def defaults(args) -> tuple:
    """(batches, epochs, repeats, timeout) from the arguments (in range: parser()) and --quick."""
    batches = parse_batches(args.batch_sizes) if args.batch_sizes is not None else (QUICK_BATCHES if args.quick else DEFAULT_BATCHES)
    epochs = args.epochs if args.epochs is not None else (1 if args.quick else 2)
    repeats = args.repeats if args.repeats is not None else (1 if args.quick else 3)
    timeout = args.timeout if args.timeout is not None else (300.0 if args.quick else 1800.0)
    return batches, epochs, repeats, timeout


def count_lines(names) -> tuple[dict, dict]:
    """({backend: Loc}, {backend: why not}) for each backend in `names`, counted now."""
    counts, reasons = {}, {}
    for name in dict.fromkeys(names):
        counts[name], reasons[name] = loc.backend_loc(name)
    return ({k: v for k, v in counts.items() if v}, {k: v for k, v in reasons.items() if v})


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser().parse_args(argv)
    if args.list:
        list_backends()
        return 0
    require_tools()
    modes = parse_list(args.mode, "mode", MODES)
    batches, epochs, repeats, timeout = defaults(args)
    runs, skipped = plan(args, modes)
    # data named on the command line is checked even where no run trains, LENET_DATA only where one does
    data_dir = data.directory_in_effect(args.data)
    weights.load(args.weights)                                             # fail early, one line
    if args.data is not None or args.dataset not in (None, "embedded") or ("train" in modes and data_dir is not None):
        data.load(args.dataset, data_dir)
    # made and taken only once the inputs are good; a refused --out leaves no folder made for --json
    out, lock = writable_outputs(args.out, args.json if args.json and args.json != "-" else None,
                                 take=rundir.lock)                       # noqa: F841 (held until exit)
    signal.signal(signal.SIGTERM, on_signal)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:     # not where SIGINT is ignored
        signal.signal(signal.SIGINT, on_signal)
    moved = rundir.move_previous(out)
    if moved:
        print(f"moved the previous run's results to {moved}/", file=sys.stderr)
    budget = Budget.quick() if args.quick else Budget()
    runs = [replace(c, batch_sizes=batches, epochs=epochs, dataset=args.dataset, data=data_dir,
                    weights=args.weights, quick=args.quick, budget=budget) for c in runs]

    info = Meta(**meta.collect(argv, out), run_id=rundir.new_run_id(), repeats=repeats, modes=list(modes),
                batch_sizes=list(batches), epochs=epochs, quick=args.quick, budget=vars(budget),
                percentiles="nearest rank over all samples of all runs",
                throughput="median over timed calls, then median over runs")
    print(f"run {info.run_id}: floors, then {len(runs)} configuration(s) x {repeats} repeat(s); "
          f"{len(skipped)} not available here", file=sys.stderr)
    counts, reasons = count_lines([c.backend for c in runs] + [r.backend for r in skipped]) if "loc" in modes else ({}, {})
    raw.save_plan(out, Plan(meta=info, floors=measure_floors(args.quick, any(c.device == "gpu" for c in runs)),
                            skipped=skipped, configs=[f"{c.backend}/{c.device}/{c.variant or '-'}" for c in runs],
                            tiers={name: backends.module(name).TIER for name in backends.names()},
                            splits=[Split(**s) for n in backends.names() for s in getattr(backends.module(n), "SPLITS", ())],
                            loc=counts, loc_reasons=reasons))
    measure_all(out, runs, repeats, timeout)
    stop_if_signalled()
    print("floors again (the CPU floor keeps each rate's better measurement)", file=sys.stderr)
    raw.save_floors_after(out, measure_floors(args.quick, gpu=False))
    stop_if_signalled()

    doc = report.regenerate(out, plots=not args.no_plots)
    if args.json == "-":
        sys.stdout.write(doc.dumps())
    elif args.json:
        atomic_write(args.json, doc.dumps().encode("utf-8"))
    if args.json != "-":
        sys.stdout.flush()
        sys.stdout.buffer.write((out / "results.md").read_bytes())
        sys.stdout.flush()
    print(f"wrote {out}/results.json, results.md" + ("" if args.no_plots else ", *.png")
          + f" (from {out}/raw/: python -m lenet.bench.report {out} writes them again)", file=sys.stderr)
    return 1 if any(r.status == "failed" or r.cut for r in doc.results) else 0


run = guarded(main)
