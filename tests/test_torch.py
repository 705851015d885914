"""torch (the peer) against the NumPy reference: eager, torch.compile and CUDA-graph replay forward,
one SGD step, the exact round trip, the graph variant's per-batch-size static buffers, named device
times on a GPU, and the errors for a missing package, a broken install or a missing GPU."""
from __future__ import annotations

import numpy as np
import pytest

import lenet
import lenet.layers
from lenet.backends import torch as torch_backend
from lenet.backends._frameworks import import_torch

from agree import assert_logits_agree, assert_step_agrees, require
from framework_checks import (assert_layer_times, assert_broken_install_is_one_line, assert_gpu_without_a_gpu_is_one_clear_error,
                              assert_missing_package_is_one_line, assert_round_trip_is_exact)

pytestmark = pytest.mark.isolated        # its own process: triton (torch.compile on CUDA) and TF's LLVM clash



def gpu(*args):
    return pytest.param("gpu", *args, marks=pytest.mark.gpu)

STEP_LR = 0.1           # not the default 0.05 the optimizer starts with: the change must take effect


@pytest.mark.parametrize("device,variant", [
    ("cpu", "eager"), pytest.param("cpu", "compile", marks=pytest.mark.slow),
    gpu("eager"), gpu("graph"), gpu("compile")])
def test_forward_agrees_with_reference(device, variant, params, dataset):
    require("torch", device)
    net = lenet.load("torch", device, params, variant)
    for n in (256, 1, 7, 1):                                         # new shapes, then a seen one again
        x = dataset.test_x[:n].copy()
        assert_logits_agree(net.predict(x), params, x)


@pytest.mark.parametrize("variant, expected", [
    ("eager", lenet.model.LAYERS), ("compile", ("conv1+pool1", "conv2+pool2", "fc1", "fc2"))])
def test_layer_times(variant, expected, params, dataset):
    """eager: torch.profiler's aten ops per layer; compile: inductor fuses each pool into the span of its conv."""
    assert_layer_times("torch", variant, params, dataset, expected)


def test_the_gpu_layer_steps_compose_to_the_forward(params, dataset):
    """The per-layer launches the GPU times with CUDA events are, in order, the model's forward."""
    require("torch", "cpu")
    torch = import_torch()
    model = torch_backend.build_model(torch.nn)
    model.load_state_dict(torch_backend.to_torch(params, "cpu"))
    out = torch.from_numpy(dataset.test_x[:3].copy())
    with torch.inference_mode():
        want = model(out)
        steps = torch_backend.layer_steps(model)
        for step in steps:
            out = step(out)
    assert len(steps) == len(lenet.model.LAYERS) and torch.equal(out, want)


@pytest.mark.gpu
@pytest.mark.parametrize("variant", list(torch_backend.VARIANTS))
def test_gpu_layer_times(variant, params, dataset):
    require("torch", "gpu")
    net = lenet.load("torch", "gpu", params, variant)
    times = net.layer_times_us(dataset.test_x[:1].copy(), 3)
    if variant == "compile":
        assert times is None
    else:
        assert list(times) == list(lenet.model.LAYERS) and lenet.layers.times_problem(times, 3) is None, times
        assert all(t > 0 for samples in times.values() for t in samples), times


def test_graph_variant_needs_a_gpu(params):
    require("torch")
    with pytest.raises(lenet.UnavailableError, match=r"^torch variant 'graph' runs on gpu only \(GPU: .*CUDAGraph.*\); on cpu: eager, compile$"):
        lenet.load("torch", "cpu", params, "graph")


def test_graph_variant_static_buffers_on_cpu(params, dataset):
    """The graph variant's bookkeeping, with an eager "replay" in place of the CUDA graph: one capture
    per batch size, reused when sizes alternate, the least recently used of more than GRAPHS released;
    each predict copies its images in and its logits out (a later replay must not change them)."""
    require("torch")
    torch = import_torch()
    sizes = []

    def capture(n):
        sizes.append(n)
        x, y = torch.zeros(n, 1, 28, 28), torch.empty(n, 10)

        def replay():
            with torch.inference_mode():
                y.copy_(net.model(x))
        return torch_backend.Captured(x, replay, y)

    net = torch_backend.TorchNet("cpu", params, "graph", capture=capture)
    first = dataset.test_x[:64].copy()
    got = net.predict(first)
    for n in (16, 64, 16, 64):
        x = dataset.test_x[100:100 + n].copy()
        assert_logits_agree(net.predict(x), params, x)
    assert sizes == [64, 16]                                         # alternating sizes never re-capture
    assert_logits_agree(got, params, first)                          # not overwritten by later replays
    for n in range(1, torch_backend.GRAPHS + 2):                     # GRAPHS + 1 sizes: 64 and 16 evicted
        net.predict(dataset.test_x[:n].copy())
    net.predict(first)
    assert sizes[-1] == 64 and len(sizes) == 2 + torch_backend.GRAPHS + 1 + 1
    assert net._graphs.cache_info().currsize == torch_backend.GRAPHS


@pytest.mark.parametrize("device,variant", [("cpu", "eager"), gpu("eager"), gpu("graph")])
def test_one_sgd_step_agrees_with_float64_reference(device, variant, params, batch):
    require("torch", device)
    assert_step_agrees(lenet.load("torch", device, params, variant), params, *batch, STEP_LR)


def test_round_trip_is_exact(params):
    assert_round_trip_is_exact("torch", params)


def test_cpu_has_no_device_times(params, dataset):
    require("torch")
    assert lenet.load("torch", "cpu", params).device_times_us(dataset.test_x[:1].copy(), 3) is None


@pytest.mark.gpu
@pytest.mark.parametrize("variant", list(torch_backend.VARIANTS))
def test_device_times_are_named(variant, params, dataset):
    """forward (as enqueued) and kernels (a CUDA-graph replay), each `repeats` positive µs, and the
    net still predicts correctly afterwards."""
    require("torch", "gpu")
    net = lenet.load("torch", "gpu", params, variant)
    for n in (1, 64):
        x = dataset.test_x[:n].copy()
        times = net.device_times_us(x, 5)
        assert set(times) == {"forward", "kernels"}
        assert all(len(t) == 5 and all(0 < v < 1e6 for v in t) for t in times.values()), times
        assert_logits_agree(net.predict(x), params, x)


@pytest.mark.gpu
def test_graph_replays_see_trained_weights(params, dataset, batch):
    """SGD updates the parameters in place, so graphs captured before training read the new weights."""
    require("torch", "gpu")
    net = lenet.load("torch", "gpu", params, "graph")
    x = dataset.test_x[:8].copy()
    net.predict(x)                                                   # captures batch 8
    net.train_step(*batch, STEP_LR)
    assert_logits_agree(net.predict(x), net.parameters(), x)
    assert not np.allclose(net.predict(x), lenet.load("torch", "cpu", params).predict(x))


@pytest.mark.gpu
def test_tf32_stays_off():
    require("torch", "gpu")
    torch = import_torch()
    assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32


def test_gpu_without_a_gpu_is_one_clear_error(params):
    assert_gpu_without_a_gpu_is_one_clear_error("torch", params)


@pytest.mark.parametrize("device", ["cpu", "gpu"])
def test_missing_package_is_a_one_line_reason(device, monkeypatch):
    assert_missing_package_is_one_line("torch", device, "'.[torch]'", monkeypatch)


def test_broken_install_is_a_one_line_error(monkeypatch):
    assert_broken_install_is_one_line("torch", import_torch, monkeypatch)
