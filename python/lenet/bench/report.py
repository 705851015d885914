"""The report: results.json, results.md and PNG plots, from a run's raw results.

    python -m lenet.bench.report OUT [--no-plots]     (re)write them from OUT/raw/

The JSON follows schema.json; the tests check that. A plot that fails is a one-line warning.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from .raw import assemble
LAYER_COLORS = {"reference": "#7f7f7f", "native": "#1f77b4", "raw kernels": "#d62728",
                "framework": "#2ca02c", "peer": "#9467bd"}
PLOTS = ("latency.png", "latency_distribution.png", "loc.png", "cost_of_abstraction.png",
         "throughput.png", "train.png")


def label(row: dict) -> str:
    variant = f" [{row['variant']}]" if row.get("variant") not in (None, "") else ""
    return f"{row['backend']}/{row['device']}{variant}{on_keras(row)}"


def on_keras(row: dict) -> str:
    return f" (Keras on {row['keras_backend']})" if row.get("keras_backend") else ""


def floor_us(doc: dict, device: str) -> float | None:
    """The single-image floor for `device`: the CPU roofline on all cores, the GPU host->host floor."""
    floors = doc.get("floors") or {}
    if device == "cpu" and floors.get("cpu"):
        return floors["cpu"]["floor_us"]["all_cores"]
    if device == "gpu" and floors.get("gpu"):
        return floors["gpu"]["host_to_host_floor_us"]
    return None


def device_p50(row: dict, what: str) -> float | None:
    """p50 of a GPU row's device time `what` ("forward" as enqueued, or "kernels" only), µs."""
    times = (row.get("device_us") or {}).get(what)
    return times["p50"] if times else None


def fmt(value, digits: int = 3) -> str:
    if value is None:
        return "–"
    if abs(value) >= 10 ** digits:
        return f"{value:,.0f}"
    return f"{value:.{digits}g}"


def ok_rows(doc: dict, key: str) -> list[dict]:
    return [r for r in doc["results"] if r["status"] == "ok" and r.get(key)]


# --- Markdown -------------------------------------------------------------------------

def markdown(doc: dict) -> str:
    meta, floors = doc["meta"], doc.get("floors") or {}
    gpu_names = ", ".join(sorted({g["name"] for g in meta.get("gpus") or []})) or "no GPU"
    lines = [f"# LeNet benchmark: {meta.get('cpu')} ({meta.get('cpu_affinity')} cores), {gpu_names}", "",
             f"{meta.get('date')} · `{meta.get('command')}` · commit {(meta.get('git') or {}).get('commit') or '?'}"
             f" · load average at start {', '.join(f'{x:.1f}' for x in meta.get('load_average') or [])}", ""]
    batches = meta.get("batch_sizes") or []
    gpu_rows = any(r["status"] == "ok" and r["device"] == "gpu" for r in doc["results"])
    head = (["backend", "device", "variant", "p50 µs", "**p90 µs**", "p99 µs", "p50 × floor"]
            + (["device µs (forward)", "kernels µs"] if gpu_rows else [])
            + [f"img/s @{b}" for b in batches]
            + ["train img/s", "epoch s (first)", "train acc", "acc", "LOC code/comment/blank"])
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in doc["results"]:
        if r["status"] != "ok":
            continue
        lat, tput, train, loc = r.get("latency_us"), r.get("throughput_ips") or {}, r.get("train"), r.get("loc")
        floor = floor_us(doc, r["device"])
        cells = [r["backend"], r["device"], str(r.get("variant") or "–") + on_keras(r),
                 fmt(lat and lat["p50"]), f"**{fmt(lat and lat['p90'])}**", fmt(lat and lat["p99"]),
                 f"{lat['p50'] / floor:.1f}×" if lat and floor else "–"]
        if gpu_rows:
            cells += [fmt(device_p50(r, "forward")), fmt(device_p50(r, "kernels"))]
        cells += [fmt(tput.get(str(b))) for b in batches]
        cells += [fmt(train and train["images_per_s"]),
                  f"{fmt(train['epoch_s'])} ({fmt(train['first_epoch_s'])})" if train else "–",
                  f"{train['accuracy']:.2%}" if train else "–",
                  f"{r['accuracy']:.2%}" if r.get("accuracy") is not None else "–",
                  f"{loc['code']}/{loc['comment']}/{loc['blank']}" if loc else "–"]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines.append(f"Latency: one image at a time through `predict`, host to host, after warm-up; nearest-rank "
                 f"percentiles over all samples of {meta.get('repeats')} interleaved run(s), each in a fresh process. "
                 "× floor: p50 over the CPU roofline floor (all cores) or the GPU host→host floor (below). "
                 + ("GPU rows, p50 of CUDA-event times without the copies: device µs (forward) is the forward "
                    "as `forward()` enqueues it, the host's launch gaps included; kernels µs is kernel-only time "
                    "(a graph replay of the same launches, or summed per-kernel events). " if gpu_rows else "")
                 + f"Throughput: {meta.get('throughput')}. {_training_note(doc, meta)}"
                 "acc: the weights under test on the 1 000 embedded test digits. LOC: pygount over each backend's SOURCES.")
    lines += ["", *_floor_text(floors)]
    others = [r for r in doc["results"] if r["status"] != "ok"]
    if others:
        lines += ["", "Not measured:", ""]
        lines += [f"- {label(r)}: **{r['status']}**: {r.get('reason')}"
                  + (f" (LOC {r['loc']['code']}/{r['loc']['comment']}/{r['loc']['blank']})" if r.get("loc") else "")
                  for r in others]
    notes = [r for r in doc["results"] if r["status"] == "ok" and r.get("train_reason")]
    if notes:
        lines += ["", "Not trained:", ""] + [f"- {label(r)}: {r['train_reason']}" for r in notes]
    return "\n".join(lines) + "\n"


def _floor_text(floors: dict) -> list[str]:
    """The floors and their parts, one paragraph per device."""
    cpu, gpu = floors.get("cpu"), floors.get("gpu")
    if cpu:
        read, reads = cpu.get("read") or {}, cpu["weights_read_us"]
        parts = {k: (f"{fmt(cpu['arithmetic_us'][k])} µs of arithmetic at {cpu['sgemm_gmacs_per_s'][k]:.1f} GMAC/s"
                     + (f", {fmt(reads[k])} µs to read the weights at "
                        f"{cpu['weight_bytes'] / reads[k] / 1e3:.0f} GB/s" if reads else ""))
                 for k in ("one_core", "all_cores")}
        text = (f"**CPU floor** (roofline per image: the larger of {cpu['multiply_adds_per_image'] / 1e6:.3f} M "
                f"multiply-adds at the measured SGEMM rate and {cpu['weight_bytes'] / 1e6:.2f} MB of float32 weights "
                f"read once from the cache they fit in): one core **{fmt(cpu['floor_us']['one_core'])} µs** "
                f"({parts['one_core']}); all {read.get('cores', '?')} cores **{fmt(cpu['floor_us']['all_cores'])} µs** "
                f"({parts['all_cores']}); SGEMM ceiling {fmt(cpu['images_per_s_ceiling'])} images/s.")
        if not reads:
            text += f" Without the weights-read term: {cpu.get('read_reason')}."
    else:
        text = f"**CPU floor**: not measured ({floors.get('cpu_reason')})."
    lines = [text, ""]
    if gpu:
        peak = gpu.get("fp32_fma_per_s_peak")
        lines.append(
            f"**GPU floors** ({gpu['device_name']}, {gpu.get('sm_count', '?')} SMs): host→host "
            f"**{fmt(gpu['host_to_host_floor_us'])} µs** = empty kernel launch + synchronize "
            f"{fmt(gpu['launch_sync_us']['p50'])} + 3 KB host→device {fmt(gpu['h2d_3kb_us']['p50'])} + 40 B "
            f"device→host {fmt(gpu['d2h_40b_us']['p50'])} µs (p50s); kernel-only **{fmt(gpu['kernel_floor_us'])} µs** "
            f"= the larger of {fmt(gpu['kernel_arithmetic_us'])} µs of FP32 FMAs at the measured "
            f"{gpu['fp32_fma_per_s_measured'] / 1e12:.1f} T/s"
            + (f" (peak from the device attributes {peak / 1e12:.1f} T/s)" if peak else "")
            + f" and {fmt(gpu['kernel_weights_read_us'])} µs to read the weights once at the measured device "
            f"bandwidth {gpu['dtod_bytes_per_s'] / 1e9:,.0f} GB/s (device-to-device copy, bytes read + written).")
    else:
        lines.append(f"**GPU floors**: none ({floors.get('gpu_reason')}).")
    return lines


def _training_note(doc: dict, meta: dict) -> str:
    trained = ok_rows(doc, "train")
    if not trained:
        return "Training: no row trained in this run. "
    t = trained[0]["train"]
    return (f"Training: lr {t['learning_rate']}, batch {t['batch_size']}, from the seeded init, {meta.get('epochs')} "
            f"epoch(s) on {t['images']} images of {t['dataset']}; epoch s excludes the first epoch. ")


# --- plots ----------------------------------------------------------------------------

def _figure(rows: int):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, max(2.5, 0.45 * rows + 1.5)), layout="constrained")
    return fig, ax


def _empty(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes)
    ax.set_axis_off()


def _save(fig, path: Path) -> None:
    import matplotlib.pyplot as plt

    fig.savefig(path, dpi=110)
    plt.close(fig)


def _floor_lines(ax, doc: dict, devices, horizontal: bool = False) -> None:
    for device, style in (("cpu", ":"), ("gpu", "--")):
        value = floor_us(doc, device)
        if value and device in devices:
            text = f"{'CPU roofline floor (all cores)' if device == 'cpu' else 'GPU host→host floor'} {fmt(value)} µs"
            if horizontal:
                ax.axhline(value, color="k", ls=style, lw=1, label=text)
            else:
                ax.axvline(value, color="k", ls=style, lw=1, label=text)


def plot_latency(doc: dict, path: Path) -> None:
    rows = ok_rows(doc, "latency_us")
    fig, ax = _figure(len(rows))
    if not rows:
        _empty(ax, "no latency results")
        return _save(fig, path)
    y = range(len(rows))
    for key, marker, color in (("p50", "o", "#1f77b4"), ("p90", "D", "#d62728"), ("p99", "^", "#7f7f7f")):
        ax.scatter([r["latency_us"][key] for r in rows], y, marker=marker, color=color, label=key, zorder=3)
    for i, r in enumerate(rows):
        ax.plot([r["latency_us"]["p50"], r["latency_us"]["p99"]], [i, i], color="#bbbbbb", zorder=1)
    for what, marker, text in (("forward", "+", "GPU forward as enqueued, p50"), ("kernels", "x", "GPU kernels only, p50")):
        points = [(device_p50(r, what), i) for i, r in enumerate(rows) if device_p50(r, what)]
        if points:
            ax.scatter(*zip(*points), marker=marker, color="#2ca02c", label=text, zorder=3)
    gpu = (doc.get("floors") or {}).get("gpu")
    if gpu and any(device_p50(r, "kernels") for r in rows):
        ax.axvline(gpu["kernel_floor_us"], color="#2ca02c", ls="-.", lw=1,
                   label=f"GPU kernel-only floor {fmt(gpu['kernel_floor_us'])} µs")
    _floor_lines(ax, doc, {r["device"] for r in rows})
    ax.set_yticks(list(y), [label(r) for r in rows])
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("single-image latency, host to host unless marked (µs, log scale)")
    ax.set_title("Latency p50 / p90 / p99 (lower is better)")
    ax.grid(axis="x", which="both", alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    _save(fig, path)


def plot_distribution(doc: dict, path: Path) -> None:
    rows = [r for r in ok_rows(doc, "latency_us") if r["latency_us"].get("samples")]
    fig, ax = _figure(6)
    if not rows:
        _empty(ax, "no latency samples")
        return _save(fig, path)
    from matplotlib import colormaps
    tab20 = colormaps["tab20"].colors
    ax.set_prop_cycle(color=tab20[::2] + tab20[1::2])   # 20 distinct colours: the dark ten, then the light
    for r in rows:
        samples = sorted(r["latency_us"]["samples"])
        n = len(samples)
        ax.step(samples, [(i + 1) / n for i in range(n)], where="post", label=f"{label(r)} (n={n})")
    _floor_lines(ax, doc, {r["device"] for r in rows})
    ax.set_xscale("log")
    ax.set_ylim(0, 1.01)
    ax.set_xlabel("single-image latency (µs, log scale)")
    ax.set_ylabel("fraction of samples ≤ x")
    ax.set_title("Latency distribution (empirical CDF)")
    ax.grid(which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    _save(fig, path)


def _loc_rows(doc: dict) -> list[dict]:
    seen, rows = set(), []
    for r in doc["results"]:
        if r.get("loc") and r["backend"] not in seen:
            seen.add(r["backend"])
            rows.append(r)
    return rows


def plot_loc(doc: dict, path: Path) -> None:
    rows = _loc_rows(doc)
    fig, ax = _figure(len(rows))
    if not rows:
        _empty(ax, "no lines-of-code counts")
        return _save(fig, path)
    y, left = range(len(rows)), [0] * len(rows)
    for key, color in (("code", "#1f77b4"), ("comment", "#ff7f0e"), ("blank", "#dddddd")):
        values = [r["loc"][key] for r in rows]
        ax.barh(list(y), values, left=left, color=color, label=key)
        left = [a + b for a, b in zip(left, values)]
    for i, r in enumerate(rows):
        ax.text(left[i], i, f"  {r['loc']['code']} code", va="center", fontsize=8)
    ax.set_yticks(list(y), [f"{r['backend']} ({r.get('layer', '?')})" for r in rows])
    ax.invert_yaxis()
    ax.set_xlim(0, max(left) * 1.25)
    ax.set_xlabel("lines (pygount over each backend's SOURCES)")
    ax.set_title("Lines of code per backend")
    ax.legend(loc="lower right", fontsize=8)
    _save(fig, path)


def plot_cost(doc: dict, path: Path) -> None:
    rows = [r for r in ok_rows(doc, "latency_us") if r.get("loc")]
    fig, ax = _figure(7)
    if not rows:
        _empty(ax, "no rows with both latency and lines of code")
        return _save(fig, path)
    groups = []   # variants of one backend and device within 30% of each other share a point and a label
    for r in sorted(rows, key=lambda r: (r["backend"], r["device"], r["latency_us"]["p50"])):
        g = groups[-1] if groups else None
        if g and (g[0]["backend"], g[0]["device"]) == (r["backend"], r["device"]) and \
                r["latency_us"]["p50"] <= 1.3 * g[0]["latency_us"]["p50"]:
            g.append(r)
        else:
            groups.append([r])
    groups.sort(key=lambda g: g[0]["latency_us"]["p50"])
    for i, g in enumerate(groups):   # labels alternate above and below their point, so neighbours stay legible
        r, variants = g[0], ", ".join(str(x["variant"]) for x in g)
        ax.scatter(r["loc"]["code"], r["latency_us"]["p50"], s=60, zorder=3,
                   color=LAYER_COLORS.get(r.get("layer"), "k"), marker="o" if r["device"] == "cpu" else "s")
        ax.annotate(f"{r['backend']}/{r['device']} [{variants}]", (r["loc"]["code"], r["latency_us"]["p50"]),
                    xytext=(6, 5 if i % 2 else -11), textcoords="offset points", fontsize=8)
    codes = [r["loc"]["code"] for r in rows]
    ax.set_xlim(min(codes) / 1.3, max(codes) * 2.2)   # room for the rightmost labels
    _floor_lines(ax, doc, {r["device"] for r in rows}, horizontal=True)
    for layer, color in LAYER_COLORS.items():
        if any(r.get("layer") == layer for r in rows):
            ax.scatter([], [], color=color, label=layer)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("lines of code (log scale)")
    ax.set_ylabel("latency p50 (µs, log scale)")
    ax.set_title("Cost of abstraction: lines written vs single-image latency (● cpu, ■ gpu)")
    ax.grid(which="both", alpha=0.3)
    ax.legend(fontsize=8)
    _save(fig, path)


def plot_throughput(doc: dict, path: Path) -> None:
    rows = ok_rows(doc, "throughput_ips")
    fig, ax = _figure(6)
    if not rows:
        _empty(ax, "no throughput results")
        return _save(fig, path)
    for r in rows:
        batches = sorted(r["throughput_ips"], key=int)
        ax.plot([int(b) for b in batches], [r["throughput_ips"][b] for b in batches], marker="o", label=label(r))
    cpu = (doc.get("floors") or {}).get("cpu")
    if cpu and any(r["device"] == "cpu" for r in rows):
        ax.axhline(cpu["images_per_s_ceiling"], color="k", ls=":", lw=1,
                   label=f"CPU SGEMM ceiling {fmt(cpu['images_per_s_ceiling'])} img/s")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("batch size")
    ax.set_ylabel("images/s (log scale)")
    ax.set_title("Inference throughput (higher is better)")
    ax.grid(which="both", alpha=0.3)
    ax.legend(fontsize=7)
    _save(fig, path)


def plot_train(doc: dict, path: Path) -> None:
    rows = ok_rows(doc, "train")
    fig, ax = _figure(len(rows))
    if not rows:
        _empty(ax, "no training results")
        return _save(fig, path)
    values = [r["train"]["images_per_s"] for r in rows]
    ax.barh(range(len(rows)), values, color=[LAYER_COLORS.get(r.get("layer"), "k") for r in rows])
    for i, r in enumerate(rows):
        t = r["train"]
        ax.text(values[i], i, f"  {fmt(values[i])} img/s, acc {t['accuracy']:.1%}", va="center", fontsize=8)
    ax.set_yticks(range(len(rows)), [label(r) for r in rows])
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlim(min(values) / 2, max(values) * 20)
    ax.set_xlabel("training images/s (log scale; epochs after the first)")
    ax.set_title("Training throughput, same SGD hyper-parameters for every backend")
    _save(fig, path)


def dumps(doc: dict) -> str:
    """Compact JSON: the raw samples make up most of it (results.md is the readable form)."""
    return json.dumps(doc, separators=(",", ":")) + "\n"


def write(doc: dict, out: Path, plots: bool = True) -> list[str]:
    """results.json and results.md, then each plot; returns one `warning:` line per plot that failed."""
    out = Path(out)
    (out / "results.json").write_text(dumps(doc))
    (out / "results.md").write_text(markdown(doc))
    warnings = []
    if plots:
        for name, fn in zip(PLOTS, (plot_latency, plot_distribution, plot_loc, plot_cost, plot_throughput, plot_train)):
            try:
                fn(doc, out / name)
            except Exception as exc:  # an optional step: the results are written already
                warnings.append(f"warning: {name} not written: {type(exc).__name__}: {' '.join(str(exc).split())}")
    return warnings


def regenerate(out, plots: bool = True) -> dict:
    """The document from OUT/raw/, written out as the report; warnings go to stderr."""
    doc = assemble(out)
    for line in write(doc, out, plots):
        print(line, file=sys.stderr)
    return doc


def main(argv=None) -> int:
    from .._cli import Parser

    p = Parser(prog="python -m lenet.bench.report", description="Write results.json, results.md and the "
               "PNG plots of a benchmark run from its raw results (OUT/raw/), e.g. after an interrupted run.")
    p.add_argument("out", metavar="OUT", help="the run's output directory (--out of python -m lenet.bench)")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    args = p.parse_args(argv)
    doc = regenerate(args.out, plots=not args.no_plots)
    done = doc["meta"].get("runs_finished"), doc["meta"].get("runs_planned")
    print(f"wrote {args.out}/results.json, results.md from {done[0]} of {done[1]} planned run(s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    from .._cli import guarded

    sys.exit(guarded(main)())
