"""What the report's tables (markdown.py) and plots (plots.py) both read off a Results: each row's
name, the rows that measured something, a row's host and device p50s, the floors, numbers as text."""
from __future__ import annotations

from .results import Results, Row


def label(row: Row) -> str:
    variant = f" [{row.variant}]" if row.variant not in (None, "") else ""
    return f"{row.backend}/{row.device}{variant}{on_runtime(row)}"


def short_label(row: Row) -> str:
    """"backend (variant)", the device added for GPU rows: the README's and the layers table's names."""
    name = f"{row.backend} ({row.variant})" if row.variant else row.backend
    return f"{name} on GPU" if row.device == "gpu" else name


def on_runtime(row: Row) -> str:
    return f" ({row.runtime})" if row.runtime else ""


def floor_us(doc: Results, device: str) -> float | None:
    """The single-image floor for `device`: the CPU roofline on all cores, the GPU host->host floor."""
    if device == "cpu" and doc.floors.cpu:
        return doc.floors.cpu.floor_us.all_cores
    if device == "gpu" and doc.floors.gpu:
        return doc.floors.gpu.host_to_host_floor_us
    return None


def chained_floor_us(doc: Results, device: str) -> float | None:
    """The CPU's chained floor on all cores (one image, its layers in sequence); None on a GPU or
    for a run from before it was measured."""
    cpu = doc.floors.cpu if device == "cpu" and doc.floors else None
    return cpu.chained_us.all_cores if cpu and cpu.chained_us else None


def host_p50(row: Row) -> float | None:
    """p50 of a row's single-image latency, host to host, µs (None without the latency mode)."""
    return row.latency.host_us.p50 if row.latency else None


def device_p50(row: Row, what: str) -> float | None:
    """p50 of a GPU row's device time `what` ("forward" as enqueued, or "kernels" only), µs."""
    times = (row.latency and row.latency.device_us or {}).get(what)
    return times.p50 if times else None


def fmt(value, digits: int = 3) -> str:
    if value is None:
        return "–"
    if abs(value) >= 10 ** digits:
        return f"{value:,.0f}"
    return f"{value:.{digits}g}"


def ok_rows(doc: Results, attribute: str) -> list[Row]:
    return [r for r in doc.results if r.ok and getattr(r, attribute)]


def layered_rows(doc: Results) -> list[Row]:
    """The ok rows with per-layer times (--mode layers)."""
    return [r for r in doc.results if r.ok and r.layers and r.layers.us]
