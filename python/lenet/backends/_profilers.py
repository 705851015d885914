"""Per-layer times (lenet.net.Net.layer_times_us) read from the frameworks' own profilers:
torch.profiler (torch, Keras on torch) and TensorFlow's profiler (tensorflow, Keras on TensorFlow).

Each profiles `repeats` forwards, each inside a named range ("lenet.forward"), after WARMUP
profiled forwards that are dropped (a profiler's first ranges carry its own start-up), and turns
the ops inside each range into layers with lenet.layers.by_layer.
"""
from __future__ import annotations

import glob
import tempfile
from bisect import bisect_left, bisect_right

from ..layers import by_layer, stack

WARMUP = 3
RANGE = "lenet.forward"


def torch_layer_times(forward, repeats: int, layers=None) -> dict[str, list[float]]:
    """torch.profiler over `forward()`; `layers(range_event)` -> {layer or group: µs} of one forward
    (default: by_layer over the range's top-level aten ops, each with its own time)."""
    from torch.profiler import ProfilerActivity, profile, record_function

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(WARMUP + repeats):
            with record_function(RANGE):
                forward()
    ranges = [e for e in prof.events() if e.name == RANGE][WARMUP:]
    layers = layers or (lambda r: by_layer((op.name, op.time_range.elapsed_us()) for op in r.cpu_children))
    return stack([layers(r) for r in ranges])


def tf_layer_times(tf, forward, repeats: int) -> dict[str, list[float]]:
    """TensorFlow's profiler (host tracer) over `forward()`. The ops of one forward are the
    kernels it ran, wherever TensorFlow ran them: graph-executor kernels (events with an op type),
    eager kernels (the KernelAndDeviceFunc::Run inside each "EagerLocalExecute: <op>"), and XLA's
    compiled ops (the events inside a CpuExecutable run)."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    with tempfile.TemporaryDirectory(prefix="lenet-tfprof-") as logdir:
        options = tf.profiler.experimental.ProfilerOptions(host_tracer_level=2, python_tracer_level=0,
                                                           device_tracer_level=0)
        tf.profiler.experimental.start(logdir, options=options)
        try:
            for _ in range(WARMUP + repeats):
                with tf.profiler.experimental.Trace(RANGE):
                    forward()
        finally:
            tf.profiler.experimental.stop()
        space = xplane_pb2.XSpace()
        with open(glob.glob(f"{logdir}/**/*.xplane.pb", recursive=True)[0], "rb") as f:
            space.ParseFromString(f.read())
    host = next(p for p in space.planes if p.name == "/host:CPU")
    events = sorted(_tf_events(host))                 # (start ps, end ps, line, name, op type)
    starts = [ev[0] for ev in events]
    ranges = [(s, e) for s, e, _, name, _ in events if name == RANGE][WARMUP:]
    return stack([by_layer(_tf_ops([ev for ev in events[bisect_left(starts, s):bisect_right(starts, e)] if ev[1] <= e]))
                  for s, e in ranges])


_XLA_RUNTIME = {"BlockUntilReady"}      # events inside an XLA run that are not its ops


def _tf_events(plane):
    meta = plane.event_metadata
    for i, line in enumerate(plane.lines):
        for e in line.events:
            start = line.timestamp_ns * 1000 + e.offset_ps
            m = meta[e.metadata_id]
            yield start, start + e.duration_ps, i, m.name, m.display_name


def _tf_ops(events) -> list[tuple[str, float]]:
    """The kernels among one forward's events (sorted by start), as (op, µs)."""
    ops = []
    eager = None                         # the eager op in progress: (end, line, op)
    xla_end = None                       # the end of the XLA run in progress
    for start, end, line, name, op_type in events:
        if op_type:                                              # a graph executor's kernel
            ops.append((op_type, (end - start) / 1e6))
        elif name.startswith("EagerLocalExecute: ") and not name.startswith("EagerLocalExecute: __"):
            eager = (end, line, name.split(": ", 1)[1])
        elif name == "KernelAndDeviceFunc::Run" and eager and start < eager[0] and line == eager[1]:
            ops.append((eager[2], (end - start) / 1e6))
            eager = None
        elif name == "CpuExecutable::ExecuteAsyncOnStream":
            xla_end = end
        elif xla_end and start < xla_end and "::" not in name and not name.startswith("end: ") and name not in _XLA_RUNTIME:
            ops.append((name, (end - start) / 1e6))             # an XLA op (HLO name)
    return ops
