"""Per-layer times of one single-image forward (`Net.layer_times_us`): the rule that assigns a
profiler's ops to `lenet.model.LAYERS`, fused groups, and the dispatch overhead.

A backend reports {layer or fused group: [µs per profiled forward]}, keys in forward order. A fused
group names its layers joined by "+" ("conv1+pool1"); every layer appears in exactly one key.
"""
from __future__ import annotations

import time
from collections.abc import Iterable

from .model import LAYERS

# the kind of op that starts each layer; the parts of a layer (bias adds, the ReLU, the flatten,
# layout reorders, XLA's fusions of them) belong to the layer in progress; every other op (variable
# reads, Keras predict's data pipeline) and anything before conv1 is in no layer: it is overhead
ANCHORS = dict(zip(LAYERS, ("conv", "pool", "conv", "pool", "matmul", "matmul")))
_KINDS = (("convert", None), ("conv", "conv"), ("im2col", "conv"), ("pool", "pool"), ("reduce-window", "pool"), ("reduce_window", "pool"),
          ("matmul", "matmul"), ("gemm", "matmul"), ("linear", "matmul"), ("addmm", "matmul"),
          ("dense", "matmul"), ("dot", "matmul"),
          ("bias", "part"), ("add", "part"), ("relu", "part"), ("maximum", "part"), ("clamp", "part"),
          ("flatten", "part"), ("reshape", "part"), ("view", "part"), ("reorder", "part"), ("fusion", "part"))


def op_kind(op: str) -> str | None:
    """A profiler's op name or type -> "conv", "pool", "matmul", "part" (of a layer) or None
    (no layer's), by the first word of _KINDS it contains ("aten::conv2d", "im2col",
    "_MklNativeFusedMatMul", "FusedGemm", "MaxPool2d", XLA's "wrapped_reduce-window", "dot_add_fusion",
    jax's "jit_reduce_window_max"; "jit_convert_element_type" is no convolution)."""
    op = op.lower()
    return next((kind for word, kind in _KINDS if word in op), None)


def by_layer(ops: Iterable[tuple[str, float]]) -> dict[str, float]:
    """(op name, µs) of one forward in execution order -> {layer: summed µs of its ops}."""
    times: dict[str, float] = {}
    current = -1
    for op, us in ops:
        kind = op_kind(op)
        if current + 1 < len(LAYERS) and kind == ANCHORS[LAYERS[current + 1]]:
            current += 1
        elif kind is None:
            continue
        if current >= 0:
            times[LAYERS[current]] = times.get(LAYERS[current], 0.0) + us
    return times


def by_launch(kernels: list[str], values: list[float]) -> dict[str, float]:
    """A GPU forward's per-launch values (event times, byte counts) -> {layer or group: sum}, by
    kernel name (by_layer); a single launch (a fused forward) is one group of every layer."""
    if len(kernels) == 1:
        return {"+".join(LAYERS): values[0]}
    return by_layer(zip(kernels, values))


def by_named_layer(ops: Iterable[tuple[frozenset, float]]) -> dict[str, float]:
    """(the layers an op computes, µs) of one forward in execution order -> {layer or fused group:
    summed µs}, for compilers that record which layers each of their ops came from (XLA's HLO
    metadata). An op that names no layer (XLA leaves a dot's metadata empty) joins the op after
    it; ops that share a layer form one group ("conv1+pool1+conv2"): nothing is split."""
    ops = list(ops)
    named: list[tuple[set, float]] = []
    following: frozenset = frozenset()
    for layers, us in reversed(ops):
        following = layers or following
        named.append((set(following), us))
    groups: list[tuple[set, float]] = []                        # (layers, µs), disjoint
    for layers, us in named:
        if not layers:
            continue
        overlapping = [g for g in groups if g[0] & layers]
        groups = [g for g in groups if not g[0] & layers]
        groups.append((layers.union(*(g[0] for g in overlapping)), us + sum(g[1] for g in overlapping)))
    groups.sort(key=lambda g: min(LAYERS.index(layer) for layer in g[0]))
    return {"+".join(layer for layer in LAYERS if layer in g[0]): g[1] for g in groups}


def stack(forwards: list[dict[str, float]]) -> dict[str, list[float]]:
    """Per-forward {group: µs} dicts -> {group: [µs per forward]}; every forward must have the same
    groups, in forward order (else ValueError naming what is wrong)."""
    if not forwards:
        raise ValueError("no profiled forward")
    names = list(forwards[0])
    problem = group_problem(names)
    if problem:
        raise ValueError(f"layer times {names}: {problem}")
    for i, one in enumerate(forwards):
        if list(one) != names:
            raise ValueError(f"profiled forward {i} has layers {list(one)}, the first had {names}")
    return {name: [one[name] for one in forwards] for name in names}


def group_problem(names: Iterable[str]) -> str | None:
    """Why `names` are not `LAYERS` in order, each once, alone or in "+"-joined groups; else None."""
    flat = [layer for name in names for layer in name.split("+")]
    if flat != list(LAYERS):
        return f"expected {'+'.join(LAYERS)} in order, each once (got {'+'.join(flat)})"
    return None


def times_problem(times, repeats: int) -> str | None:
    """Why `times` is not a valid layer_times_us result for `repeats` forwards; else None."""
    if not isinstance(times, dict):
        return f"expected a dict of layer times, got {type(times).__name__}"
    problem = group_problem(times)
    if problem:
        return problem
    for name, samples in times.items():
        if len(samples) != repeats or not all(isinstance(t, float) and 0 <= t < float("inf") for t in samples):
            return f"{name}: expected {repeats} finite non-negative float µs, got {samples!r:.80}"
    return None


def overhead_us(host_p50: float, layer_p50s: dict[str, float]) -> float:
    """The dispatch overhead: host→host p50 minus the sum of the layer p50s (negative when the
    profiler's own cost inflated the layers; the report warns then)."""
    return host_p50 - sum(layer_p50s.values())


def timed_calls(functions: dict, calls: list) -> dict:
    """{name: f} -> {name: f that also appends (name, µs of the call) to `calls`}."""
    def timed(name, f):
        def call(*args):
            start = time.perf_counter()
            out = f(*args)
            calls.append((name, (time.perf_counter() - start) * 1e6))
            return out
        return call
    return {name: timed(name, f) for name, f in functions.items()}


class Stopwatch(dict):
    """A dict that stamps the time each key is stored; laps() turns the stamps into
    {layer: µs since the previous store}, via `layer_of` (stored key -> layer, None: not timed)."""

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        self.setdefault("@stamps", []).append((key, time.perf_counter()))

    def laps(self, layer_of: dict) -> dict[str, float]:
        stamps, times = self["@stamps"], {}
        for (_, before), (key, after) in zip(stamps, stamps[1:]):
            layer = layer_of.get(key)
            if layer:
                times[layer] = times.get(layer, 0.0) + (after - before) * 1e6
        return times
