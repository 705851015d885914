"""Where the time goes (--mode layers): one run's profiled per-layer times (`layer_times`, in the
worker) and their merge over a configuration's runs (`merge`, in raw.merge): each layer's p50,
and the dispatch overhead, host→host p50 minus the sum of the layer p50s; where the backend records
them (cblas), the hand-offs: how long after each forward began a helper thread started on its half.

The host→host p50 is the latency mode's when it ran (the same rows' timed runs), else the one the
layers mode measured itself (`Layers.host_us`). A negative overhead means the profiler's own cost
inflated the layers: the row says so (`overhead_warning`) instead of hiding it.
"""
from __future__ import annotations

import time
from dataclasses import replace

import numpy as np

from ..errors import UnavailableError
from ..layers import overhead_us, times_problem
from . import stats
from .results import Layers, Row


def layer_times(net, images, forwards: int, warm_up) -> Layers:
    """One run's profiled single-image forwards of one real digit through net.layer_times_us,
    after `warm_up(one_call)`: samples_us and method, or the reason when the backend has no
    instrumentation (or reports invalid times: a reason, not a crash)."""
    x = np.ascontiguousarray(images[:1])

    def one():
        start = time.perf_counter()
        net.predict(x)
        return time.perf_counter() - start

    warm_up(one)
    try:
        times = net.layer_times_us(x, forwards)
    except UnavailableError as exc:          # a CPU emulator of CUDA semantics: never timed
        return Layers(reason=" ".join(str(exc).split()))
    except ValueError as exc:                # a profile without every layer (lenet.layers.stack)
        return Layers(reason=f"invalid layer times: {' '.join(str(exc).split())}")
    if times is None:
        variant = f" ({net.variant})" if net.variant else ""
        return Layers(reason=f"no per-layer instrumentation for {net.backend} on {net.device}{variant}")
    problem = times_problem(times, forwards)
    if problem:
        return Layers(reason=f"invalid layer times: {problem}")
    return Layers(samples_us={name: [round(t, 2) for t in samples] for name, samples in times.items()},
                  method=net.layers_method, handoff_samples_us=[round(t, 3) for t in net.handoffs_us or ()] or None,
                  row_splits=net.row_splits, cuts=[net.cuts] if net.cuts else None)


def merge(row: Row, results: list[Row]) -> Row:
    """`row` (the merge of `results`, all ok) with the breakdown of its runs: each layer's p50 over
    every run's samples, and the overhead; the runs' samples are not kept."""
    runs = [r.layers for r in results if r.layers]
    if not runs:
        return replace(row, layers=None)
    seconds = sum(r.seconds or 0.0 for r in runs) if any(r.seconds is not None for r in runs) else None
    measured = [r for r in runs if r.samples_us]
    if not measured:
        return replace(row, layers=Layers(reason=next((r.reason for r in runs if r.reason), None), seconds=seconds))
    names = list(measured[0].samples_us)
    if any(list(r.samples_us) != names for r in measured):
        return replace(row, layers=Layers(seconds=seconds, reason="runs reported different layer groups: "
                                          + " / ".join("+".join(r.samples_us) for r in measured)))
    detail = {n: stats.summary([t for r in measured for t in r.samples_us[n]]) for n in names}
    layers = Layers(method=measured[0].method, seconds=seconds, us={n: s.p50 for n, s in detail.items()},
                    detail_us=detail)
    handoffs = [r.handoff_samples_us for r in measured if r.handoff_samples_us]
    if handoffs:
        layers.handoff_us = replace(stats.summary([t for run in handoffs for t in run]),
                                    runs=[stats.summary(run) for run in handoffs])
    splits = [r for r in measured if r.row_splits is not None]
    if splits:
        forwards = sum(len(next(iter(r.samples_us.values()))) for r in splits)
        layers.row_split_share = round(sum(r.row_splits for r in splits) / forwards, 4)
    layers.cuts = [cut for r in measured for cut in r.cuts or ()] or None
    latency = [t for r in results if r.latency for t in r.latency.host_us.samples or ()]
    host = latency or [t for r in measured if r.host_us for t in r.host_us.samples or ()]
    if host:
        host_p50 = stats.summary(host).p50
        layers.overhead_us, layers.overhead_host_us = overhead_us(host_p50, layers.us), host_p50
        layers.overhead_from = "latency" if latency else "layers"
        if layers.overhead_us < 0:
            layers.overhead_warning = (f"the layers' p50s add up to {sum(layers.us.values()):.0f} µs, more than "
                                       f"the host→host p50 {host_p50:.0f} µs: the profiler's own cost inflated them")
    return replace(row, layers=layers)
