"""The CPU-versus-GPU figure: for every backend measured on both devices, and for every tier of
the stack (the best backend of each tier on each device), the best single-image latency and the
best training images/s on each device, side by side, from committed results.

    python -m lenet.bench.versus OUT.png RESULTS.json [RESULTS.json ...]

The results may come from several runs (the CPU and the GPU are different machines): a backend's
(or tier's) bar on a device comes from the first file that measured it there, never the best of
several runs. Each bar is labelled with its variant and the figure names each machine and date.
Nothing is estimated: a backend missing a measurement on either device is left out of that panel.
"""
from __future__ import annotations

import io
import sys
from pathlib import Path
from typing import NamedTuple

from .._files import atomic_write
from ..errors import InputError
from . import require_tools, results
from .readings import fmt, host_p50
from .results import Results, Row

DEVICE_COLORS = {"cpu": "#1f77b4", "gpu": "#2ca02c"}


class Best(NamedTuple):
    group: str          # a backend, or "<tier> tier"
    device: str
    name: str           # what ran: the variant, or for a tier the backend and its variant
    value: float


def best(docs: list[Results], metric, tiers: bool = False) -> list[tuple[Best, Best]]:
    """(CPU, GPU) of each backend (with `tiers`, each tier) that has `metric(row)` on both devices:
    the best row of each (`metric` returns a value where larger is better), from the first of
    `docs` that measured it, never the best of several runs."""
    top: dict[tuple[str, str], tuple[float, Row]] = {}
    for doc in docs:
        mine: dict[tuple[str, str], tuple[float, Row]] = {}
        for r in doc.results:
            value = metric(r) if r.ok and (r.tier or not tiers) else None
            key = (f"{r.tier} tier" if tiers else r.backend, r.device)
            if value is not None and key not in top and (key not in mine or value > mine[key][0]):
                mine[key] = (value, r)
        top |= mine
    pairs = []
    for group in dict.fromkeys(g for g, _ in top):
        if (group, "cpu") in top and (group, "gpu") in top:
            rows = {d: top[group, d][1] for d in ("cpu", "gpu")}
            pairs.append(tuple(Best(group, d, (f"{r.backend} " if tiers else "") + (r.variant or "-"),
                                    abs(top[group, d][0])) for d, r in rows.items()))
    return pairs


def latency_p50(row: Row) -> float | None:
    return -host_p50(row) if row.latency else None        # negated: lower is better


def train_ips(row: Row) -> float | None:
    return row.train.images_per_s if row.train else None


def machines(docs: list[Results]) -> list[str]:
    """One line per device and run: the machine and the date."""
    lines = []
    for doc in docs:
        meta, devices = doc.meta, {r.device for r in doc.results if r.ok}
        if "cpu" in devices:
            lines.append(f"CPU: {meta.cpu} ({meta.cpu_affinity} cores), {meta.date[:10]}")
        if "gpu" in devices:
            gpus = ", ".join(sorted({g.get("name", "?") for g in meta.gpus or []})) or "?"
            lines.append(f"GPU: {gpus}, {meta.date[:10]}")
    return list(dict.fromkeys(lines))


def render(docs: list[Results], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [(best(docs, latency_p50) + best(docs, latency_p50, tiers=True),
               "single-image latency p50 (µs, log scale; lower is better)", "µs"),
              (best(docs, train_ips) + best(docs, train_ips, tiers=True),
               "training images/s at batch 64 (log scale; higher is better)", "img/s")]
    if not any(pairs for pairs, _, _ in panels):
        raise InputError("no backend has a measurement on both the CPU and the GPU in these results")
    height, named = max(len(pairs) for pairs, _, _ in panels), machines(docs)
    fig, axes = plt.subplots(1, 2, figsize=(12, 1.2 + 0.9 * height + 0.3 * len(named)), layout="constrained")
    try:
        for ax, (pairs, xlabel, unit) in zip(axes, panels):
            for i, pair in enumerate(pairs):
                for j, one in enumerate(pair):
                    y = i + (j - 0.5) * 0.38
                    ax.barh(y, one.value, height=0.36, color=DEVICE_COLORS[one.device],
                            label=one.device.upper() if i == 0 else None)
                    ax.text(one.value, y, f" {fmt(one.value)} {unit} ({one.name})", va="center", fontsize=8)
            ax.set_yticks(range(len(pairs)), [pair[0].group for pair in pairs])
            ax.invert_yaxis()
            ax.set(xscale="log", xlabel=xlabel)
            values = [one.value for pair in pairs for one in pair]
            if values:
                ax.set_xlim(min(values) / 2, max(values) * 30)
                ax.legend(loc="lower right", fontsize=8)
        fig.suptitle("The same LeNet on CPU and GPU: each backend's best variant, then each tier's best backend\n" + "\n".join(named),
                     fontsize=9)
        png = io.BytesIO()
        fig.savefig(png, format="png", dpi=110)
    finally:
        plt.close(fig)
    atomic_write(path, png.getvalue())


def main(argv=None) -> int:
    from .._cli import Parser

    p = Parser(prog="python -m lenet.bench.versus", description=__doc__.split("\n\n")[0])
    p.add_argument("out", metavar="OUT.png", help="the figure to write")
    p.add_argument("inputs", metavar="RESULTS.json", nargs="+", help="results of python -m lenet.bench")
    args = p.parse_args(argv)
    if not args.out.endswith(".png"):
        raise InputError(f"{args.out}: the figure is a PNG file; name it OUT.png")
    docs = [results.load(Path(name)) for name in args.inputs]
    require_tools(("matplotlib",))
    render(docs, Path(args.out))
    print(f"wrote {args.out} from {len(docs)} result file(s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    from .._cli import guarded

    sys.exit(guarded(main)())
