"""`python -m lenet.bench`: plan the runs, start one fresh worker process per backend x device
x variant (interleaved over repeats), keep each result in <out>/raw/ as it comes, then write the
report from there (the same step as `python -m lenet.bench.report <out>`)."""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from dataclasses import replace
from pathlib import Path

from tqdm import tqdm

from .. import backends, data, weights
from .._cli import Parser, add_variant_option, guarded
from ..errors import InputError, UnavailableError
from . import meta, raw, report
from .worker import Budget, Config, config_to_json, row_head

MODES = ("latency", "throughput", "train", "loc")
DEFAULT_BATCHES = (1, 8, 64, 256)
QUICK_BATCHES = (1, 64)


def parser() -> argparse.ArgumentParser:
    p = Parser(prog="python -m lenet.bench",
               description="Benchmark LeNet backends: correctness against the NumPy reference first, then "
                           "single-image latency (p50/p90/p99), batch throughput, training, lines of code; "
                           "writes results.json, results.md and PNG plots.",
               epilog="Each backend x device x variant runs in a fresh process; --backend all interleaves "
                      "them over --repeats. Exit status: 0 ok, 1 a backend failed its check or crashed, "
                      "2 bad arguments.")
    p.add_argument("--list", action="store_true", help="list every backend and device with ok or why it cannot run")
    p.add_argument("--backend", default="all", help="a backend name or 'all' (default: all)")
    p.add_argument("--device", default="auto", choices=("cpu", "gpu", "auto"),
                   help="auto: every device that works here with --backend all, else the GPU when it works, else the CPU")
    add_variant_option(p, "variant label, or 'all' for every variant (default: each backend's default)")
    p.add_argument("--mode", default=",".join(MODES), help=f"comma-separated subset of {','.join(MODES)} (default: all)")
    p.add_argument("--batch-sizes", default=None, help="throughput batch sizes (default: 1,8,64,256; --quick: 1,64)")
    p.add_argument("--epochs", type=int, default=None, help="training epochs (default: 2; --quick: 1 on 256 images)")
    p.add_argument("--dataset", choices=data.DATASETS, default=None,
                   help="training data (default: --data/LENET_DATA if given, else the embedded digits); "
                        "correctness and accuracy always use the embedded test digits")
    p.add_argument("--data", metavar="DIR", default=None, help="directory with the four MNIST-format IDX files")
    p.add_argument("--weights", metavar="FILE", default=None, help="weights to check and time (default: the shipped ones)")
    p.add_argument("--quick", action="store_true", help="few samples, small batches, one short epoch (well under a minute)")
    p.add_argument("--repeats", type=int, default=None, help="runs of each backend, interleaved (default: 3; --quick: 1)")
    p.add_argument("--timeout", type=float, default=None, help="seconds per worker before it counts as failed (default: 1800; --quick: 300)")
    p.add_argument("--json", metavar="FILE", default=None, help="also write the JSON here ('-' for stdout)")
    p.add_argument("--out", metavar="DIR", default="bench-out", help="write results.json, results.md, *.png here (default: bench-out)")
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
    if any(b < 1 for b in sizes):
        raise InputError(f"bad batch sizes {text!r}: each must be >= 1")
    return tuple(dict.fromkeys(sizes))


def writable_dir(path: str) -> Path:
    out = Path(path)
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as exc:
        raise InputError(f"cannot write to output directory {path}: {exc.strerror or exc}") from None
    return out


def list_backends() -> None:
    rows = [("backend", "device", "variants", "status")]
    for name in backends.names():
        for device in backends.module(name).DEVICES:
            default = backends.default_variant(name, device)      # each device's default first
            variants = ",".join(sorted(backends.variants(name), key=lambda v: v != default)) or "-"
            rows.append((name, device, variants, backends.unavailable(name, device) or "ok"))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[3])


def plan(args, modes) -> tuple[list[Config], list[dict]]:
    """(configs to run, rows of those that cannot run here)."""
    names = backends.names() if args.backend == "all" else [backends.module(args.backend) and args.backend]
    if args.backend == "all" and args.variant not in (None, "all"):
        raise InputError("with --backend all, --variant must be 'all' or left out")
    runs, skipped = [], []
    for name in names:
        mod = backends.module(name)
        if args.variant not in (None, "all") and args.variant not in backends.variants(name):
            raise InputError(f"{name}: unknown variant {args.variant!r} (known: {', '.join(backends.variants(name))})")
        devices = mod.DEVICES if args.device == "auto" else [args.device]
        reasons = {d: backends.unavailable(name, d) for d in devices}
        if args.backend != "all":
            if args.device == "auto":             # one backend: the GPU when it works, else the CPU
                working = [d for d in ("gpu", "cpu") if d in devices and not reasons[d]]
                if not working:
                    raise UnavailableError(f"{name}: " + "; ".join(f"{d}: {r}" for d, r in reasons.items()))
                devices = working[:1]
            elif reasons[args.device]:
                raise UnavailableError(f"{name} on {args.device}: {reasons[args.device]}")
        for device in devices:
            if reasons[device]:
                skipped.append({**row_head(name, device, None), "layer": mod.LAYER,
                                "status": "unavailable", "reason": reasons[device]})
                continue
            if args.variant == "all":
                variants = list(backends.variants(name, device)) or [None]
            else:                                  # the one asked for, or each device's default
                variants = [args.variant or backends.default_variant(name, device)]
            for variant in variants:
                runs.append(Config(name, device, variant, modes=tuple(m for m in modes if m != "loc")))
    return runs, skipped


def kill(proc) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def spawn(cfg: Config, timeout: float, on_phase) -> dict:
    """Run one worker process; its result, or a "failed" row saying what happened."""
    head = row_head(cfg.backend, cfg.device, cfg.variant)
    with tempfile.TemporaryDirectory(prefix="lenet-bench-") as tmp:
        result_file = Path(tmp) / "result.json"
        cmd = [sys.executable, "-m", "lenet.bench.worker", config_to_json(cfg), "--result", str(result_file)]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                errors="replace", start_new_session=True)
        timer = threading.Timer(timeout, kill, (proc,))
        timer.start()
        last, current = "", "starting"
        try:
            for line in proc.stderr:
                line = line.strip()
                if line.startswith("@phase "):
                    current = line[7:]
                    on_phase(current)
                elif line:
                    last = line
            code = proc.wait()
        except BaseException:                     # interrupted: the worker must not run on alone
            kill(proc)
            raise
        finally:
            timed_out = not timer.is_alive() and proc.returncode != 0
            timer.cancel()
        if timed_out:
            return {**head, "status": "failed", "reason": f"timed out after {timeout:g} s (while {current})"}
        if code == 0 and result_file.is_file():
            return json.loads(result_file.read_text())
    how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exited with status {code}"
    return {**head, "status": "failed", "reason": f"worker {how} while {current}" + (f": {last}" if last else "")}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser().parse_args(argv)
    if args.list:
        list_backends()
        return 0
    modes = parse_list(args.mode, "mode", MODES)
    batches = parse_batches(args.batch_sizes) if args.batch_sizes else (QUICK_BATCHES if args.quick else DEFAULT_BATCHES)
    epochs = args.epochs if args.epochs is not None else (1 if args.quick else 2)
    repeats = args.repeats if args.repeats is not None else (1 if args.quick else 3)
    timeout = args.timeout if args.timeout is not None else (300.0 if args.quick else 1800.0)
    if epochs < 1 or repeats < 1 or timeout <= 0:
        raise InputError("--epochs and --repeats must be >= 1 and --timeout > 0")
    runs, skipped = plan(args, modes)
    out = writable_dir(args.out)
    if args.json and args.json != "-":
        writable_dir(str(Path(args.json).resolve().parent))
    weights.load(args.weights) if args.weights else weights.load()        # fail early, one line
    if "train" in modes and (args.dataset not in (None, "embedded") or args.data):
        data.load(args.dataset, args.data)
    budget = Budget.quick() if args.quick else Budget()
    runs = [replace(c, batch_sizes=batches, epochs=epochs, dataset=args.dataset, data=args.data,
                    weights=args.weights, quick=args.quick, budget=budget) for c in runs]

    info = meta.collect(argv)
    info.update(repeats=repeats, modes=list(modes), batch_sizes=list(batches), epochs=epochs, quick=args.quick,
                budget=vars(budget), percentiles="nearest rank over all samples of all runs",
                throughput="median over timed calls, then median over runs")
    print(f"floors, then {len(runs)} run(s) x {repeats} repeat(s); {len(skipped)} not available here", file=sys.stderr)
    raw.save_plan(out, info, measure_floors(args.quick, any(c.device == "gpu" for c in runs)), skipped,
                  [f"{c.backend}/{c.device}/{c.variant or '-'}" for c in runs])

    order = [(r, (i + r) % len(runs)) for r in range(repeats) for i in range(len(runs))]   # interleaved, rotated
    with tqdm(total=len(order), desc="bench", unit="run", file=sys.stderr, disable=None) as bar:
        for repeat, i in order:
            cfg = runs[i] if repeat == 0 else replace(runs[i], modes=tuple(m for m in runs[i].modes if m != "train"))
            label = f"{cfg.backend}/{cfg.device}/{cfg.variant or '-'} #{repeat + 1}"
            bar.set_description(label)
            result = spawn(cfg, timeout, lambda text: bar.set_postfix_str(text[:40]))
            raw.save_result(out, i, repeat, result)
            bar.write(f"{label}: {result['status']}" + (f" ({result['reason']})" if result.get("reason") else
                      f", p90 {result['latency_us']['p90']:.0f} us" if result.get("latency_us") else ""), file=sys.stderr)
            bar.update()

    doc = report.regenerate(out, plots=not args.no_plots)
    if args.json:
        text = report.dumps(doc)
        sys.stdout.write(text) if args.json == "-" else Path(args.json).write_text(text)
    if args.json != "-":
        print((out / "results.md").read_text())
    print(f"wrote {out}/results.json, results.md" + ("" if args.no_plots else ", *.png")
          + f" (from {out}/raw/: python -m lenet.bench.report {out} writes them again)", file=sys.stderr)
    return 1 if any(r["status"] == "failed" for r in doc["results"]) else 0


def measure_floors(quick: bool, gpu: bool) -> dict:
    """The floors, in their own process (a GPU context must not linger in this one)."""
    cmd = [sys.executable, "-m", "lenet.bench.floors"] + (["--quick"] if quick else []) + ([] if gpu else ["--no-gpu"])
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        reason = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"cpu": None, "gpu": None, "gpu_reason": f"floors failed: {reason}", "cpu_reason": f"floors failed: {reason}"}
    return json.loads(done.stdout)


run = guarded(main)
