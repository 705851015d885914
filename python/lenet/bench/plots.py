"""The report's PNG plots. Each is a `Plot`: which rows it shows, how it draws them, and its
axes; `render` does the rest (figure, the empty case, labels, legend, an atomic write)."""
from __future__ import annotations

import io
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from .._files import atomic_write
from .readings import (chained_floor_us, device_p50, floor_us, fmt, host_p50, label, layered_rows, ok_rows,
                       short_label)
from .results import Results, Row

LABEL_CHAR_WIDTH = 0.0085            # one character of an 8-point label, as a fraction of the axes' width
TIER_COLORS = {"reference": "#7f7f7f", "native": "#1f77b4", "raw kernels": "#d62728",
                "framework": "#2ca02c", "peer": "#9467bd"}


@dataclass(frozen=True)
class Plot:
    file: str
    rows: Callable[[Results], list[Row]]       # what it shows; none: the `empty` text instead
    draw: Callable                             # draw(ax, rows, doc)
    empty: str
    axes: dict = field(default_factory=dict)   # for ax.set: title, labels, scales
    height: int | None = None                  # figure height in rows (None: one per row shown)
    legend: dict | None = None                 # ax.legend's arguments (fig.legend's if loc is "outside ..."); None: no legend
    grid: dict | None = None                   # ax.grid's arguments; None: no grid


LEGEND_ROW_INCHES = 0.2   # one row of a legend at font size 7 or 8


def distinct_lines(ax) -> None:
    """Thirty line styles that differ: ten colours solid, then dashed, then dotted."""
    from cycler import cycler
    from matplotlib import colormaps

    ax.set_prop_cycle(cycler(linestyle=["-", "--", ":"]) * cycler(color=colormaps["tab10"].colors))


def figure(plot: Plot, doc: Results):
    """The plot's matplotlib figure (the caller closes it)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = plot.rows(doc)
    height = plot.height if plot.height is not None else len(rows)
    fig, ax = plt.subplots(figsize=(9, max(2.5, 0.45 * height + 1.5)), layout="constrained")
    try:
        if rows:
            plot.draw(ax, rows, doc)
            ax.set(**plot.axes)
            if plot.grid is not None:
                ax.grid(**plot.grid)
            if plot.legend is not None:   # "outside ..." places it below the axes, clear of every point
                outside = plot.legend.get("loc", "").startswith("outside")
                if outside:               # the figure grows by the legend's rows, the axes keep their height
                    entries = len(ax.get_legend_handles_labels()[0])
                    fig.set_figheight(fig.get_figheight() + LEGEND_ROW_INCHES * -(-entries // plot.legend.get("ncol", 1)))
                (fig.legend if outside else ax.legend)(**plot.legend)
        else:
            ax.text(0.5, 0.5, plot.empty, ha="center", va="center", transform=ax.transAxes)
            ax.set_axis_off()
    except BaseException:
        plt.close(fig)
        raise
    return fig


def render(plot: Plot, doc: Results, path: Path) -> None:
    import matplotlib.pyplot as plt

    fig = figure(plot, doc)
    try:
        png = io.BytesIO()
        fig.savefig(png, format="png", dpi=110)
    finally:
        plt.close(fig)
    atomic_write(path, png.getvalue())


def floors_shown(doc: Results, devices) -> list[tuple[float, str, str]]:
    """(µs, line style, name) of each floor line a plot of rows on `devices` draws."""
    return [(value, style, name) for device, value, style, name in (
        ("cpu", floor_us(doc, "cpu"), ":", "CPU roofline floor (all cores)"),
        ("cpu", chained_floor_us(doc, "cpu"), "-.", "CPU chained floor: one image, layers in sequence"),
        ("gpu", floor_us(doc, "gpu"), "--", "GPU host→host floor")) if value and device in devices]


def floor_lines(ax, doc: Results, devices, horizontal: bool = False) -> None:
    for value, style, name in floors_shown(doc, devices):
        (ax.axhline if horizontal else ax.axvline)(value, color="k", ls=style, lw=1, label=f"{name} {fmt(value)} µs")


def row_ticks(ax, rows: list[Row], names: list[str]) -> None:
    """One horizontal row per result, the first on top."""
    ax.set_yticks(range(len(rows)), names)
    ax.invert_yaxis()


# --- latency ----------------------------------------------------------------------------

def draw_latency(ax, rows: list[Row], doc: Results) -> None:
    y = range(len(rows))
    for key, marker, color in (("p50", "o", "#1f77b4"), ("p90", "D", "#d62728"), ("p99", "^", "#7f7f7f")):
        ax.scatter([getattr(r.latency.host_us, key) for r in rows], y, marker=marker, color=color, label=key, zorder=3)
    for i, r in enumerate(rows):
        ax.plot([r.latency.host_us.p50, r.latency.host_us.p99], [i, i], color="#bbbbbb", zorder=1)
    for what, marker, text in (("forward", "+", "GPU forward as enqueued, p50"), ("kernels", "x", "GPU kernels only, p50")):
        points = [(device_p50(r, what), i) for i, r in enumerate(rows) if device_p50(r, what)]
        if points:
            ax.scatter(*zip(*points), marker=marker, color="#2ca02c", label=text, zorder=3)
    gpu = doc.floors.gpu
    if gpu and any(device_p50(r, "kernels") for r in rows):
        ax.axvline(gpu.kernel_floor_us, color="#2ca02c", ls="-.", lw=1,
                   label=f"GPU kernel-only floor {fmt(gpu.kernel_floor_us)} µs")
    floor_lines(ax, doc, {r.device for r in rows})
    row_ticks(ax, rows, [label(r) for r in rows])


def draw_distribution(ax, rows: list[Row], doc: Results) -> None:
    distinct_lines(ax)
    for r in rows:
        samples = sorted(r.latency.host_us.samples)
        n = len(samples)
        ax.step(samples, [(i + 1) / n for i in range(n)], where="post", label=f"{label(r)} (n={n})")
    floor_lines(ax, doc, {r.device for r in rows})


# --- lines of code ------------------------------------------------------------------------

def loc_rows(doc: Results) -> list[Row]:
    """One row per backend that has a count."""
    seen, rows = set(), []
    for r in doc.results:
        if r.loc and r.backend not in seen:
            seen.add(r.backend)
            rows.append(r)
    return rows


def draw_loc(ax, rows: list[Row], doc: Results) -> None:
    left = [0] * len(rows)
    for key, color in (("code", "#1f77b4"), ("comment", "#ff7f0e"), ("blank", "#dddddd")):
        values = [getattr(r.loc, key) for r in rows]
        ax.barh(range(len(rows)), values, left=left, color=color, label=key)
        left = [a + b for a, b in zip(left, values)]
    for i, r in enumerate(rows):
        ax.text(left[i], i, f"  {r.loc.code} code", va="center", fontsize=8)
    row_ticks(ax, rows, [f"{r.backend} ({r.tier or '?'})" for r in rows])
    ax.set_xlim(0, max(left) * 1.25)


def cost_groups(rows: list[Row]) -> list[list[Row]]:
    """Variants of one backend and device within 30% of each other share a point and a label;
    fastest group first."""
    groups: list[list[Row]] = []
    for r in sorted(rows, key=lambda r: (r.backend, r.device, host_p50(r))):
        g = groups[-1] if groups else None
        if g and (g[0].backend, g[0].device) == (r.backend, r.device) and host_p50(r) <= 1.3 * host_p50(g[0]):
            g.append(r)
        else:
            groups.append([r])
    return sorted(groups, key=lambda g: host_p50(g[0]))


def place_labels(points: list[tuple[float, float]], widths: list[float], gap: float = 0.045,
                 step: float = 0.005, lines: tuple[float, ...] = ()) -> list[tuple[float, str]]:
    """(height, side) for labels `widths` wide beside their points (axes fractions): each on the
    right ("left"-aligned) or, where that is nearer its point, on the left, as near its point's
    height as it can be without covering another label or point or one of the horizontal `lines`
    (heights); placed from the bottom up."""
    pad = 0.015

    def span(i, side):
        x = points[i][0]
        return (x + pad, x + pad + widths[i]) if side == "left" else (x - pad - widths[i], x - pad)

    def clear(i, y, side, placed):
        x0, x1 = span(i, side)
        if x0 < 0 or x1 > 1 or any(abs(y - h) < gap / 2 for h in lines):
            return False
        if any(abs(y - py) < gap * 0.6 and x0 - 0.005 < px < x1 + 0.005 for k, (px, py) in enumerate(points) if k != i):
            return False
        return all(abs(y - yk) >= gap or span(k, sk)[1] <= x0 or x1 <= span(k, sk)[0] for k, (yk, sk) in placed.items())

    placed: dict[int, tuple[float, str]] = {}
    for i in sorted(range(len(points)), key=lambda i: points[i][1]):
        want = points[i][1]
        tries = [(k * step, want + sign * k * step, side) for k in range(int(1 / step))
                 for side in ("left", "right") for sign in (1, -1)]
        best = min((t for t in tries if 0.02 <= t[1] <= 0.98 and clear(i, t[1], t[2], placed)),
                   key=lambda t: (t[0] + (0.01 if t[2] == "right" else 0)), default=(0, want, "left"))
        placed[i] = best[1:]
    return [placed[i] for i in range(len(points))]


def draw_cost(ax, rows: list[Row], doc: Results) -> None:
    """Lines of code against p50, one point per group of close variants, each label placed where
    it covers no other label or point and joined to its point by a thin line."""
    groups = cost_groups(rows)
    devices = {r.device for r in rows}
    ax.set_xscale("log")
    ax.set_yscale("log")
    codes = [r.loc.code for r in rows]
    left, right = math.log10(min(codes) / 1.3), math.log10(max(codes) * 2.2)   # room for the rightmost labels
    p50s = [host_p50(r) for r in rows] + [v for v in (floor_us(doc, d) for d in ("cpu", "gpu")) if v]
    low, high = math.log10(min(p50s) / 1.6), math.log10(max(p50s) * 1.6)
    ax.set_xlim(10 ** left, 10 ** right)
    ax.set_ylim(10 ** low, 10 ** high)
    points = [((math.log10(g[0].loc.code) - left) / (right - left),
               (math.log10(host_p50(g[0])) - low) / (high - low)) for g in groups]   # axes fractions
    texts = [f"{g[0].backend}/{g[0].device} [{', '.join(str(x.variant) for x in g)}]" for g in groups]
    places = place_labels(points, [LABEL_CHAR_WIDTH * len(t) for t in texts],   # clear of the floor lines too
                          lines=tuple((math.log10(v) - low) / (high - low) for v, _, _ in floors_shown(doc, devices)))
    for g, text, (y, align) in zip(groups, texts, places):
        r = g[0]
        ax.scatter(r.loc.code, host_p50(r), s=60, zorder=3,
                   color=TIER_COLORS.get(r.tier, "k"), marker="o" if r.device == "cpu" else "s")
        ax.annotate(text, (r.loc.code, host_p50(r)), xytext=(r.loc.code * 1.08 ** (1 if align == "left" else -1), y),
                    textcoords=("data", "axes fraction"), fontsize=8, va="center", ha=align,
                    arrowprops={"arrowstyle": "-", "color": "#999999", "lw": 0.6, "shrinkA": 0, "shrinkB": 4})
    floor_lines(ax, doc, devices, horizontal=True)
    for tier, color in TIER_COLORS.items():
        if any(r.tier == tier for r in rows):
            ax.scatter([], [], color=color, label=tier)


# --- throughput and training ----------------------------------------------------------------

def draw_throughput(ax, rows: list[Row], doc: Results) -> None:
    distinct_lines(ax)
    for r in rows:
        ips = r.throughput.images_per_s
        batches = sorted(ips, key=int)
        ax.plot([int(b) for b in batches], [ips[b] for b in batches], marker="o", label=label(r))
    cpu = doc.floors.cpu
    if cpu and any(r.device == "cpu" for r in rows):
        ax.axhline(cpu.images_per_s_ceiling, color="k", ls=":", lw=1,
                   label=f"CPU SGEMM ceiling {fmt(cpu.images_per_s_ceiling)} img/s")
    ax.set_xscale("log", base=2)


def draw_train(ax, rows: list[Row], doc: Results) -> None:
    values = [r.train.images_per_s for r in rows]
    runs = [r.train.runs or [v] for r, v in zip(rows, values)]
    ax.barh(range(len(rows)), values, color=[TIER_COLORS.get(r.tier, "k") for r in rows],
            xerr=[[v - min(rs) for v, rs in zip(values, runs)], [max(rs) - v for v, rs in zip(values, runs)]],
            error_kw={"lw": 1, "capsize": 2})
    for i, r in enumerate(rows):
        ax.text(max(runs[i]), i, f"  {fmt(values[i])} img/s, acc {r.train.accuracy:.1%}", va="center", fontsize=8)
    row_ticks(ax, rows, [label(r) for r in rows])
    ax.set_xscale("log")
    ax.set_xlim(min(values) / 2, max(values) * 20)


# --- where the time goes ------------------------------------------------------------------

SEGMENT_COLORS = {"conv1": "#1f77b4", "pool1": "#ff7f0e", "conv2": "#aec7e8", "pool2": "#ffbb78",
                  "fc1": "#2ca02c", "fc2": "#98df8a", "overhead": "#d9d9d9"}


def segments(row: Row) -> list[tuple[str, float]]:
    """(segment, µs) of one bar: each layer or fused group, then the overhead (0 when negative or unknown)."""
    return [*row.layers.us.items(), ("overhead", max(row.layers.overhead_us or 0.0, 0.0))]


def draw_layers(ax, rows: list[Row], doc: Results) -> None:
    """100 % stacked bars, so that 25 µs and 9 ms are both readable; each bar's host→host p50 beside it."""
    from matplotlib.patches import Rectangle

    for i, r in enumerate(rows):
        parts = segments(r)
        total, left = sum(us for _, us in parts), 0.0
        for name, us in parts:
            ax.barh(i, us / total * 100, left=left, color=SEGMENT_COLORS.get(name.split("+")[0], "#7f7f7f"),
                    hatch="///" if "+" in name else None, edgecolor="white", lw=0.5)
            left += us / total * 100
        host = f"{fmt(r.layers.overhead_host_us)} µs" if r.layers.overhead_host_us else "no host p50"
        ax.text(101, i, host + (" ⚠" if r.layers.overhead_warning else ""), va="center", fontsize=8)
    row_ticks(ax, rows, [short_label(r) for r in rows])
    for name, color in SEGMENT_COLORS.items():   # the legend's entries: empty patches, drawn nowhere
        ax.add_patch(Rectangle((0, 0), 0, 0, facecolor=color, label=name))
    ax.add_patch(Rectangle((0, 0), 0, 0, facecolor="white", edgecolor="k", hatch="///",
                           label="fused group (its first layer's colour)"))


PLOTS = (
    Plot("layers.png", layered_rows, draw_layers, "no per-layer times (--mode layers)",
         {"xlim": (0, 118), "xlabel": "share of the host→host p50 (%; ⚠ rows: of the layers' sum); right: the p50",
          "title": "Where the time of one single-image predict goes"},
         legend={"loc": "outside lower center", "ncol": 4, "fontsize": 8}),
    Plot("latency.png", lambda doc: ok_rows(doc, "latency"), draw_latency, "no latency results",
         {"xscale": "log", "xlabel": "single-image latency, host to host unless marked (µs, log scale)",
          "title": "Latency p50 / p90 / p99 (lower is better)"},
         legend={"loc": "outside lower center", "ncol": 3, "fontsize": 8},
         grid={"axis": "x", "which": "both", "alpha": 0.3}),
    Plot("latency_distribution.png", lambda doc: [r for r in ok_rows(doc, "latency") if r.latency.host_us.samples],
         draw_distribution, "no latency samples",
         {"xscale": "log", "ylim": (0, 1.01), "xlabel": "single-image latency (µs, log scale)",
          "ylabel": "fraction of samples ≤ x", "title": "Latency distribution (empirical CDF)"},
         height=6, legend={"fontsize": 7, "loc": "outside lower center", "ncol": 2}, grid={"which": "both", "alpha": 0.3}),
    Plot("loc.png", loc_rows, draw_loc, "no lines-of-code counts",
         {"xlabel": "lines (pygount over each backend's SOURCES)", "title": "Lines of code per backend"},
         legend={"loc": "lower right", "fontsize": 8}),
    Plot("cost_of_abstraction.png", lambda doc: [r for r in ok_rows(doc, "latency") if r.loc], draw_cost,
         "no rows with both latency and lines of code",
         {"xlabel": "lines of code (log scale)", "ylabel": "latency p50 (µs, log scale)",
          "title": "Cost of abstraction: lines written vs single-image latency (● cpu, ■ gpu)"},
         height=9, legend={"fontsize": 8, "loc": "best"}, grid={"which": "both", "alpha": 0.3}),
    Plot("throughput.png", lambda doc: ok_rows(doc, "throughput"), draw_throughput, "no throughput results",
         {"yscale": "log", "xlabel": "batch size", "ylabel": "images/s (log scale)",
          "title": "Inference throughput (higher is better)"},
         height=6, legend={"fontsize": 7, "loc": "outside lower center", "ncol": 2}, grid={"which": "both", "alpha": 0.3}),
    Plot("train.png", lambda doc: ok_rows(doc, "train"), draw_train, "no training results",
         {"xlabel": "training images/s (log scale, epochs after the first;\nbar: the median run, whiskers: the runs' min–max)",
          "title": "Training throughput, the same SGD for every backend"}),
)
