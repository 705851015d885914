"""Where the time goes (--mode layers): one run's profiled per-layer times (`layer_times`, in the
worker) and their merge over a configuration's runs (`merge`, in raw.merge): each layer's p50,
and the dispatch overhead, host→host p50 minus the sum of the layer p50s.

The host→host p50 is the latency mode's when it ran (the same rows' timed runs), else the one the
layers mode measured itself (`layers_host_us`). A negative overhead means the profiler's own cost
inflated the layers: the row says so (`overhead_warning`) instead of hiding it.
"""
from __future__ import annotations

import time
from dataclasses import replace

import numpy as np

from ..errors import UnavailableError
from ..layers import overhead_us, times_problem
from . import stats
from .results import Row


def layer_times(net, images, forwards: int, warm_up) -> dict:
    """One run's profiled single-image forwards of one real digit through net.layer_times_us,
    after `warm_up(one_call)`. Row fields: layer_samples_us and layers_method, or layers_reason
    when the backend has no instrumentation (or reports invalid times: a reason, not a crash)."""
    x = np.ascontiguousarray(images[:1])

    def one():
        start = time.perf_counter()
        net.predict(x)
        return time.perf_counter() - start

    warm_up(one)
    try:
        times = net.layer_times_us(x, forwards)
    except UnavailableError as exc:          # a CPU emulator of CUDA semantics: never timed
        return {"layers_reason": " ".join(str(exc).split())}
    except ValueError as exc:                # a profile without every layer (lenet.layers.stack)
        return {"layers_reason": f"invalid layer times: {' '.join(str(exc).split())}"}
    if times is None:
        variant = f" ({net.variant})" if net.variant else ""
        return {"layers_reason": f"no per-layer instrumentation for {net.backend} on {net.device}{variant}"}
    problem = times_problem(times, forwards)
    if problem:
        return {"layers_reason": f"invalid layer times: {problem}"}
    return {"layer_samples_us": {name: [round(t, 2) for t in samples] for name, samples in times.items()},
            "layers_method": net.layers_method}


def merge(row: Row, results: list[Row]) -> Row:
    """`row` (the merge of `results`, all ok) with the breakdown's fields from its runs."""
    row = replace(row, layer_samples_us=None, layers_host_us=None)
    seconds = sum(r.layers_s or 0.0 for r in results) if any(r.layers_s is not None for r in results) else None
    measured = [r for r in results if r.layer_samples_us]
    if not measured:
        reason = next((r.layers_reason for r in results if r.layers_reason), None)
        return replace(row, layers_reason=reason, layers_s=seconds)
    names = list(measured[0].layer_samples_us)
    if any(list(r.layer_samples_us) != names for r in measured):
        return replace(row, layers_s=seconds, layers_reason="runs reported different layer groups: "
                       + " / ".join("+".join(r.layer_samples_us) for r in measured))
    detail = {n: stats.summary([t for r in measured for t in r.layer_samples_us[n]]) for n in names}
    layers_us = {n: s.p50 for n, s in detail.items()}
    row = replace(row, layers_us=layers_us, layers_detail_us=detail, layers_method=measured[0].layers_method,
                  layers_reason=None, layers_s=seconds)
    latency = [t for r in results if r.latency_us for t in r.latency_us.samples or ()]
    host = latency or [t for r in measured if r.layers_host_us for t in r.layers_host_us.samples or ()]
    if not host:
        return row
    host_p50 = stats.summary(host).p50
    over = overhead_us(host_p50, layers_us)
    warning = None
    if over < 0:
        warning = (f"the layers' p50s add up to {sum(layers_us.values()):.0f} µs, more than the host→host p50 "
                   f"{host_p50:.0f} µs: the profiler's own cost inflated them")
    return replace(row, overhead_us=over, overhead_host_us=host_p50, overhead_warning=warning,
                   overhead_from="latency" if latency else "layers")
