"""tensorflow (raw TF ops) against the NumPy reference: forward on real digits, one SGD step, exact
layout round trips (the shared _frameworks.to_tf / from_tf), GPU memory growth, and the errors for
a missing package, a broken install or a missing GPU."""
from __future__ import annotations

import numpy as np
import pytest

import lenet
from lenet.backends._frameworks import from_tf, import_tf, to_tf
from lenet.backends.tensorflow import TFNet

from agree import assert_logits_agree, assert_step_agrees, require
from framework_checks import (assert_layer_times, assert_broken_install_is_one_line, assert_gpu_without_a_gpu_is_one_clear_error,
                              assert_missing_package_is_one_line, assert_round_trip_is_exact)

pytestmark = pytest.mark.isolated        # its own process: TF's LLVM and triton's (torch.compile) clash

DEVICES = ["cpu", pytest.param("gpu", marks=pytest.mark.gpu)]
STEP_LR = 0.1           # not the default 0.05: the learning rate passed must take effect


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("variant", list(lenet.backends.variants("tensorflow")))
def test_forward_agrees_with_reference(variant, device, params, dataset):
    require("tensorflow", device)
    net = lenet.load("tensorflow", device, params, variant)
    x = dataset.test_x[:256].copy()
    assert_logits_agree(net.predict(x), params, x)
    assert_logits_agree(net.predict(x[:1]), params, x[:1])          # the single-image shape


def test_gpu_layout_agrees_on_cpu(params, dataset, batch):
    """The NCHW layout the gpu device uses, run through TF's CPU kernels: oneDNN's, since TF's own
    CPU pooling is NHWC only (TF turns oneDNN on by default only on CPUs with AVX512_VNNI, AVX-VNNI,
    AVX512_BF16 or AMX; TF_ENABLE_ONEDNN_OPTS=1 forces it)."""
    require("tensorflow")
    from tensorflow.python.util import _pywrap_util_port
    if not _pywrap_util_port.IsMklEnabled():
        pytest.skip("TF's CPU pooling without oneDNN is NHWC only, and oneDNN is off on this CPU")
    net = TFNet("cpu", params, "graph", layout="NCHW")
    x = dataset.test_x[:256].copy()
    assert_logits_agree(net.predict(x), params, x)
    assert all(np.array_equal(v, params[k]) for k, v in net.parameters().items())
    assert_step_agrees(net, params, *batch, STEP_LR)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("variant", ["graph", "eager"])
def test_one_sgd_step_agrees_with_float64_reference(device, variant, params, batch):
    require("tensorflow", device)
    assert_step_agrees(lenet.load("tensorflow", device, params, variant), params, *batch, STEP_LR)


def test_round_trip_is_exact(params):
    assert_round_trip_is_exact("tensorflow", params)


@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
def test_tf_layout_functions_are_inverse_and_match_the_flatten(layout, params):
    """to_tf reorders fc1's inputs so an NHWC flatten meets the same weights as the
    canonical (c, h, w) flatten; from_tf undoes every change exactly."""
    back = from_tf(to_tf(params, layout), layout)
    assert all(np.array_equal(back[k], v) for k, v in params.items())
    act = np.random.default_rng(0).standard_normal((3, 50, 4, 4)).astype(np.float32)  # pool2 output
    flat = act.transpose(0, 2, 3, 1) if layout == "NHWC" else act
    got = flat.reshape(3, -1) @ to_tf(params, layout)["fc1.weight"]
    np.testing.assert_allclose(got, act.reshape(3, -1) @ params["fc1.weight"].T, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("variant", list(lenet.backends.variants("tensorflow")))
def test_layer_times(variant, params, dataset):
    assert_layer_times("tensorflow", variant, params, dataset)


def test_no_device_times(params, dataset):
    """TensorFlow exposes no CUDA events: None, as on any CPU backend."""
    require("tensorflow")
    assert lenet.load("tensorflow", "cpu", params).device_times_us(dataset.test_x[:1].copy(), 3) is None


@pytest.mark.gpu
def test_gpu_memory_grows_instead_of_being_taken(params):
    """import_tf turns on memory growth for every GPU before any op, so other frameworks in the
    process keep their share."""
    require("tensorflow", "gpu")
    lenet.load("tensorflow", "gpu", params).predict(np.zeros((1, 1, 28, 28), np.float32))
    tf = import_tf()
    gpus = tf.config.list_physical_devices("GPU")
    assert gpus and all(tf.config.experimental.get_memory_growth(g) for g in gpus)
    assert not tf.config.experimental.tensor_float_32_execution_enabled()


def test_gpu_without_a_gpu_is_one_clear_error(params):
    assert_gpu_without_a_gpu_is_one_clear_error("tensorflow", params)


@pytest.mark.parametrize("device", ["cpu", "gpu"])
def test_missing_package_is_a_one_line_reason(device, monkeypatch):
    assert_missing_package_is_one_line("tensorflow", device, "'.[tf]'", monkeypatch)


def test_broken_install_is_a_one_line_error(monkeypatch):
    assert_broken_install_is_one_line("tensorflow", import_tf, monkeypatch)
