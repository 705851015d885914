"""Per-layer times (lenet.layers, Net.layer_times_us): the rule that assigns a profiler's ops to
layers, fused groups, and the layer names, order and presence of every CPU backend and variant that
runs in this process (the framework backends' are in their own isolated test modules). No timing
assertions: the times are only checked to be finite and non-negative."""
from __future__ import annotations

import pytest

import lenet
from lenet import layers
from agree import require
from lenet.model import LAYERS
from framework_checks import assert_layer_times

def test_model_layers_are_the_forward_in_order():
    assert LAYERS == ("conv1", "pool1", "conv2", "pool2", "fc1", "fc2")


@pytest.mark.parametrize("ops, expected", [
    # TensorFlow's executor: variable reads before conv1 are not in a layer; oneDNN fuses bias and ReLU
    ([("ReadVariableOp", 1.0), ("_MklNativeFusedConv2D", 10.0), ("_MklNativeMaxPool", 2.0),
      ("_MklNativeFusedConv2D", 20.0), ("_MklNativeMaxPool", 3.0), ("_MklNativeFusedMatMul", 5.0),
      ("_MklNativeFusedMatMul", 1.0)],
     {"conv1": 10.0, "pool1": 2.0, "conv2": 20.0, "pool2": 3.0, "fc1": 5.0, "fc2": 1.0}),
    # ONNX Runtime: inserted layout reorders go to the layer in progress, Flatten to pool2
    ([("Conv", 10.0), ("ReorderOutput", 1.0), ("MaxPool", 2.0), ("ReorderInput", 1.0), ("Conv", 20.0),
      ("MaxPool", 3.0), ("Flatten", 1.0), ("FusedGemm", 5.0), ("Gemm", 1.0)],
     {"conv1": 11.0, "pool1": 3.0, "conv2": 20.0, "pool2": 4.0, "fc1": 5.0, "fc2": 1.0}),
    # numba: a convolution is im2col + its GEMM kernel; torch eager: the ReLU stays with fc1
    ([("im2col", 1.0), ("conv_forward", 9.0), ("maxpool_forward", 2.0), ("im2col", 2.0), ("conv_forward", 18.0),
      ("maxpool_forward", 3.0), ("aten::linear", 4.0), ("aten::relu", 1.0), ("aten::linear", 1.0)],
     {"conv1": 10.0, "pool1": 2.0, "conv2": 20.0, "pool2": 3.0, "fc1": 5.0, "fc2": 1.0}),
    # Keras predict: its data pipeline's ops are in no layer, even after fc2
    ([("MakeIterator", 40.0), ("_MklNativeFusedConv2D", 10.0), ("_MklNativeMaxPool", 2.0),
      ("_MklNativeFusedConv2D", 20.0), ("_MklNativeMaxPool", 3.0), ("_MklNativeFusedMatMul", 5.0),
      ("_MklNativeFusedMatMul", 1.0), ("AnonymousIteratorV3", 60.0), ("Iterator::Zip", 80.0)],
     {"conv1": 10.0, "pool1": 2.0, "conv2": 20.0, "pool2": 3.0, "fc1": 5.0, "fc2": 1.0}),
    # XLA's compiled ops
    ([("Conv2D.1", 10.0), ("broadcast_add_fusion.1", 1.0), ("wrapped_reduce-window", 2.0), ("Conv2D_1.1", 20.0),
      ("broadcast_add_fusion", 1.0), ("wrapped_reduce-window.1", 3.0), ("dot_add_fusion.1", 4.0),
      ("broadcast_maximum_fusion", 1.0), ("dot_add_fusion", 1.0)],
     {"conv1": 11.0, "pool1": 2.0, "conv2": 21.0, "pool2": 3.0, "fc1": 5.0, "fc2": 1.0}),
])
def test_ops_are_assigned_to_layers_by_their_anchors(ops, expected):
    assert layers.by_layer(ops) == expected


def test_jax_eager_modules_are_ops_and_a_conversion_is_no_convolution():
    ops = [("jit_convert_element_type", 1.0), ("jit_conv_general_dilated", 10.0), ("jit_reshape", 1.0),
           ("jit_add", 1.0), ("jit_reduce_window_max", 2.0), ("jit_conv_general_dilated", 20.0),
           ("jit_reduce_window_max", 3.0), ("jit_matmul", 4.0), ("jit_add", 0.5), ("jit_relu", 0.5),
           ("jit_matmul", 1.0)]
    assert layers.by_layer(ops) == {"conv1": 12.0, "pool1": 2.0, "conv2": 20.0, "pool2": 3.0, "fc1": 5.0, "fc2": 1.0}


def named(*names):
    return frozenset(names)


@pytest.mark.parametrize("ops, expected", [
    # XLA on jax (Keras predict_on_batch): one fusion computes conv1, its bias, pool1 and conv2;
    # conv2's bias add is a separate op that joins that group; the dots carry no metadata
    ([(named("conv1", "pool1", "conv2"), 100.0), (named("conv2"), 2.0), (named("pool2"), 3.0),
      (named("pool2"), 1.0), (named(), 50.0), (named("fc1"), 1.0), (named(), 3.0), (named("fc2"), 1.0)],
     {"conv1+pool1+conv2": 102.0, "pool2": 4.0, "fc1": 51.0, "fc2": 4.0}),
    # a fusion that bridges two earlier groups merges them
    ([(named("conv1"), 1.0), (named("pool1"), 1.0), (named("conv1", "pool1"), 1.0), (named("conv2", "pool2"), 1.0),
      (named("fc1"), 1.0), (named("fc2"), 1.0), (named(), 9.0)],
     {"conv1+pool1": 3.0, "conv2+pool2": 1.0, "fc1": 1.0, "fc2": 1.0}),
])
def test_ops_named_by_their_layers_group_without_splitting(ops, expected):
    assert layers.by_named_layer(ops) == expected


def test_a_forward_that_misses_a_layer_is_named():
    times = layers.by_layer([("Conv", 1.0), ("MaxPool", 1.0), ("Gemm", 1.0)])
    assert times == {"conv1": 1.0, "pool1": 2.0}            # the Gemm is no anchor there: it joins pool1
    with pytest.raises(ValueError, match=r"^layer times \['conv1', 'pool1'\]: expected conv1\+pool1\+conv2"):
        layers.stack([times])


@pytest.mark.parametrize("names, problem", [
    (LAYERS, None),
    (("conv1+pool1", "conv2+pool2", "fc1", "fc2"), None),
    (("conv1+pool1+conv2+pool2+fc1+fc2",), None),
    (("pool1", "conv1", "conv2", "pool2", "fc1", "fc2"), "got pool1+conv1+conv2+pool2+fc1+fc2"),
    (("conv1", "pool1", "conv2", "pool2", "fc1"), "got conv1+pool1+conv2+pool2+fc1)"),
    (("conv1", "conv1+pool1", "conv2", "pool2", "fc1", "fc2"), "got conv1+conv1+pool1"),
    (("conv1", "pool1", "conv2", "pool2", "fc1", "fc2", "softmax"), "fc2+softmax)"),
])
def test_group_names(names, problem):
    got = layers.group_problem(names)
    assert got is None if problem is None else problem in got


def test_stack_needs_the_same_layers_in_every_forward():
    one = dict.fromkeys(LAYERS, 1.0)
    assert layers.stack([one, one]) == {name: [1.0, 1.0] for name in LAYERS}
    with pytest.raises(ValueError, match="^no profiled forward$"):
        layers.stack([])
    with pytest.raises(ValueError, match=r"^profiled forward 1 has layers \['conv1', 'pool1'"):
        layers.stack([one, {"conv1": 1.0, "pool1": 1.0}])


@pytest.mark.parametrize("times, problem", [
    ([1.0], "expected a dict of layer times, got list"),
    ({name: [1.0, 2.0] for name in LAYERS}, None),
    ({name: [1.0] for name in LAYERS}, "conv1: expected 2 finite non-negative float µs"),
    ({**{name: [1.0, 2.0] for name in LAYERS}, "fc2": [1.0, float("nan")]}, "fc2: expected 2"),
    ({**{name: [1.0, 2.0] for name in LAYERS}, "fc2": [1.0, -1.0]}, "fc2: expected 2"),
])
def test_times_problem(times, problem):
    got = layers.times_problem(times, 2)
    assert got is None if problem is None else got.startswith(problem)


def test_timed_calls_record_each_call_and_pass_results_through():
    calls = []
    timed = layers.timed_calls({"add": lambda a, b: a + b}, calls)
    assert timed["add"](2, 3) == 5
    assert [name for name, _ in calls] == ["add"] and calls[0][1] >= 0


def test_stopwatch_laps_end_at_each_store():
    watch = layers.Stopwatch()
    for key in ("x", "conv1", "flat", "fc1", "other"):
        watch[key] = 0
    laps = watch.laps({"conv1": "conv1", "flat": "fc1", "fc1": "fc1"})
    assert list(laps) == ["conv1", "fc1"] and all(t >= 0 for t in laps.values())


def test_overhead_is_host_time_less_the_layers():
    assert layers.overhead_us(100.0, {"conv1": 30.0, "fc1": 20.0}) == 50.0
    assert layers.overhead_us(40.0, {"conv1": 30.0, "fc1": 20.0}) == -10.0


@pytest.mark.parametrize("variant", ["float32", "float64"])
def test_numpy(variant, params, dataset):
    assert_layer_times("numpy", variant, params, dataset)


@pytest.mark.parametrize("variant", ["prange", "1thread"])
def test_numba(variant, params, dataset):
    assert_layer_times("numba", variant, params, dataset)


@pytest.mark.parametrize("variant", ["default", "1thread"])
def test_onnxruntime(variant, params, dataset):
    assert_layer_times("onnxruntime", variant, params, dataset)


def test_the_numba_timed_path_is_restored(params, dataset):
    """The profiled run swaps the kernel table back: predict calls the kernels themselves again."""
    require("numba")
    net = lenet.load("numba", "cpu", params)
    kernels = net.kernels
    net.layer_times_us(dataset.test_x[:1].copy(), 1)
    assert net.kernels is kernels


def test_a_backend_without_instrumentation_says_none(params, dataset):
    assert lenet.net.Net().layer_times_us(dataset.test_x[:1].copy(), 1) is None
