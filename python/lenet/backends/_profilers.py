"""Per-layer times (lenet.net.Net.layer_times_us) read from the frameworks' own profilers:
torch.profiler (torch, Keras on torch), TensorFlow's profiler (tensorflow, Keras on TensorFlow) and
jax's (Keras on jax; its XPlane is read with the protobuf definitions TensorFlow ships).

Each profiles `repeats` forwards, each inside a named range ("lenet.forward"), after WARMUP
profiled forwards that are dropped (a profiler's first ranges carry its own start-up), and turns
the ops inside each range into layers with lenet.layers.by_layer.
"""
from __future__ import annotations

import glob
import tempfile
from bisect import bisect_left, bisect_right

from ..errors import UnavailableError
from ..layers import LAYERS, by_layer, by_named_layer, stack

WARMUP = 3
RANGE = "lenet.forward"


def torch_layer_times(forward, repeats: int, layers=None) -> dict[str, list[float]]:
    """torch.profiler (CPU activity) over `forward()`; `layers(range_event)` -> {layer or group: µs}
    of one forward (default: by_layer over the range's top-level aten ops, each with its own time).
    Not used on a GPU: there, profiling with CUDA activity corrupted the heap (backends/torch.py)."""
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
    def traced(logdir):
        options = tf.profiler.experimental.ProfilerOptions(host_tracer_level=2, python_tracer_level=0,
                                                           device_tracer_level=0)
        tf.profiler.experimental.start(logdir, options=options)
        try:
            for _ in range(WARMUP + repeats):
                with tf.profiler.experimental.Trace(RANGE):
                    forward()
        finally:
            tf.profiler.experimental.stop()

    space = _xspace(traced)
    events = sorted(_tf_events(_plane(space, "/host:CPU")))  # (start ps, end ps, line, name, op type)
    return stack([by_layer(_tf_ops(inside)) for inside in _per_range(events)])


def jax_layer_times(jax, forward, repeats: int) -> dict[str, list[float]]:
    """jax's profiler over `forward()`: the XLA ops each forward ran. A compiled step (Keras's
    predict modes) records in its HLO which Keras layer each op came from (the layer name in the
    op's name stack, inside fusions too): by_named_layer groups by that. Eager Keras runs one small
    XLA module per primitive (jit_conv_general_dilated, jit_add, ...), whose HLO names no layer:
    each module run is one op, named by its module, for by_layer."""
    def traced(logdir):
        options = jax.profiler.ProfileOptions()
        options.host_tracer_level, options.python_tracer_level = 2, 0
        with jax.profiler.trace(logdir, profiler_options=options):
            for _ in range(WARMUP + repeats):
                with jax.profiler.TraceAnnotation(RANGE):
                    forward()

    space = _xspace(traced)
    layers_of = _hlo_layers(_plane(space, "/host:metadata"))
    forwards = []
    for inside in _per_range(sorted(_xla_events(_plane(space, "/host:CPU")))):
        ops = [(layers_of.get((program, op), frozenset()), run, module, (end - start) / 1e6)
               for start, end, _, _, (program, op, run, module) in inside if op]
        if any(layers for layers, _, _, _ in ops):
            forwards.append(by_named_layer((layers, us) for layers, _, _, us in ops))
        else:
            runs: dict = {}                               # run id -> (module, µs), in order
            for _, run, module, us in ops:
                runs[run] = (module, runs.get(run, (module, 0.0))[1] + us)
            forwards.append(by_layer(runs.values()))
    return stack(forwards)


def _xspace(traced):
    """The XSpace that `traced(logdir)` left in logdir, read with TensorFlow's xplane_pb2."""
    try:
        from tensorflow.tsl.profiler.protobuf import xplane_pb2
    except ImportError:
        raise UnavailableError("reading the profiler's trace needs the protobuf definitions that "
                               "TensorFlow ships (pip install '.[tf]')") from None

    with tempfile.TemporaryDirectory(prefix="lenet-prof-") as logdir:
        traced(logdir)
        space = xplane_pb2.XSpace()
        with open(glob.glob(f"{logdir}/**/*.xplane.pb", recursive=True)[0], "rb") as f:
            space.ParseFromString(f.read())
    return space


def _plane(space, name: str):
    return next(p for p in space.planes if p.name == name)


def _per_range(events):
    """Sorted (start, end, ...) events -> per RANGE after the first WARMUP: the events inside it."""
    starts = [ev[0] for ev in events]
    ranges = [(s, e) for s, e, _, name, _ in events if name == RANGE][WARMUP:]
    return [[ev for ev in events[bisect_left(starts, s):bisect_right(starts, e)] if ev[1] <= e] for s, e in ranges]


_XLA_RUNTIME = {"BlockUntilReady"}      # events inside an XLA run that are not its ops


def _tf_events(plane):
    meta = plane.event_metadata
    for i, line in enumerate(plane.lines):
        for e in line.events:
            start = line.timestamp_ns * 1000 + e.offset_ps
            m = meta[e.metadata_id]
            yield start, start + e.duration_ps, i, m.name, m.display_name


def _xla_events(plane):
    """(start ps, end ps, line, name, (program id, HLO op, run id, HLO module)) of a jax trace's events; the
    last part is empty for events that are not XLA ops (the python line's, the runtime's)."""
    names = {k: v.name for k, v in plane.stat_metadata.items()}

    def value(stat) -> str:
        kind = stat.WhichOneof("value")
        return names[stat.ref_value] if kind == "ref_value" else str(getattr(stat, kind))
    for i, line in enumerate(plane.lines):
        for e in line.events:
            start = line.timestamp_ns * 1000 + e.offset_ps
            stats = {names[st.metadata_id]: value(st) for st in e.stats}
            yield (start, start + e.duration_ps, i, plane.event_metadata[e.metadata_id].name,
                   tuple(stats.get(key, "") for key in ("program_id", "hlo_op", "run_id", "hlo_module")))


def _hlo_layers(plane) -> dict:
    """{(program id, HLO op of its entry computation): the model's layers it computes}, from the
    HLO protos a jax trace stores: a layer is named in an op's name stack ("jit(predict_step)/
    conv1/conv_general_dilated"), for a fusion in the ops it calls."""
    from tensorflow.compiler.xla.service import hlo_pb2

    names = {k: v.name for k, v in plane.stat_metadata.items()}
    found = {}
    for meta in plane.event_metadata.values():
        for stat in meta.stats:
            if names.get(stat.metadata_id) != "Hlo Proto":
                continue
            module = hlo_pb2.HloProto.FromString(stat.bytes_value).hlo_module
            program = str(module.id)
            computations = {c.id: c for c in module.computations}

            def layers(instruction, depth=0) -> set:
                own = set(instruction.metadata.op_name.split("/")) & set(LAYERS)
                for called in instruction.called_computation_ids if depth < 8 else ():
                    for inner in computations[called].instructions:
                        own |= layers(inner, depth + 1)
                return own
            for instruction in computations[module.entry_computation_id].instructions:
                found[(program, instruction.name)] = frozenset(layers(instruction))
    return found


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
