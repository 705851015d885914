"""The framework layer (tensorflow, keras, torch) against the NumPy reference: forward on real
digits, one SGD step, exact layout round trips, Keras on a second Keras backend, and the
errors for a missing package or GPU."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import lenet
from lenet.backends import numpy as reference
from lenet.backends.tensorflow import from_tf, to_tf

from lenet.check import assert_logits_agree, assert_step_agrees, require

pytestmark = pytest.mark.isolated

BACKENDS = ("tensorflow", "keras", "torch")
FORWARD = [("tensorflow", "graph"), ("tensorflow", "xla"), ("keras", "call"),
           ("keras", "predict_on_batch"), ("keras", "predict"), ("torch", "eager")]
DEVICES = ["cpu", pytest.param("gpu", marks=pytest.mark.gpu)]
STEP_LR = 0.1           # not the default 0.05 the optimizers start with: the change must take effect
TESTS = Path(__file__).resolve().parent


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("backend,kernel", FORWARD)
def test_forward_agrees_with_reference(backend, kernel, device, params, dataset):
    require(backend, device)
    net = lenet.load(backend, device, params, kernel)
    x = dataset.test_x[:256].copy()
    assert_logits_agree(net.predict(x), params, x)
    assert_logits_agree(net.predict(x[:1]), params, x[:1])          # the single-image shape


def test_tensorflow_gpu_layout_agrees_on_cpu(params, dataset, batch):
    """The NCHW layout the gpu device uses, run through TF's CPU kernels."""
    require("tensorflow")
    from lenet.backends.tensorflow import TFNet
    net = TFNet("cpu", params, "graph", layout="NCHW")
    x = dataset.test_x[:256].copy()
    assert_logits_agree(net.predict(x), params, x)
    assert all(np.array_equal(v, params[k]) for k, v in net.parameters().items())
    assert_step_agrees(net, params, *batch, STEP_LR)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_one_sgd_step_agrees_with_float64_reference(backend, device, params, batch):
    require(backend, device)
    assert_step_agrees(lenet.load(backend, device, params), params, *batch, STEP_LR)


@pytest.mark.parametrize("backend", BACKENDS)
def test_round_trip_is_exact(backend, params):
    require(backend)
    got = lenet.load(backend, "cpu", params).parameters()
    assert set(got) == set(params)
    for name, value in params.items():
        assert got[name].dtype == np.float32 and np.array_equal(got[name], value), name


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


def test_keras_fit_epoch_agrees_with_reference_steps(params, dataset):
    """train_epoch (Keras fit) over a given order equals plain SGD steps in that order, at
    a learning rate changed between calls."""
    require("keras")
    net = lenet.load("keras", "cpu", params)
    x, y = dataset.train_x[:256], dataset.train_y[:256]
    order = np.random.default_rng(1).permutation(len(x))
    ref = reference.Reference(params, np.float64)
    for lr in (STEP_LR, 0.02):
        losses = [ref._train_step(x[order[i:i + 64]], y[order[i:i + 64]], lr) for i in range(0, len(x), 64)]
        loss = net.train_epoch(x, y, lr, 64, order)
        assert abs(loss - np.mean(losses)) <= 1e-5 * max(1.0, np.mean(losses)), (loss, np.mean(losses))
    got = net.parameters()
    for name in params:
        update = ref.p[name] - params[name]
        err = np.abs((got[name] - params[name]) - update).max() / np.abs(update).max()
        assert err <= 1e-3, f"{name}: {err:.3g}"


def test_keras_reports_its_backend(params):
    require("keras")
    import keras
    net = lenet.load("keras", "cpu", params, "call")
    assert net.keras_backend == keras.backend.backend()
    assert net.keras_backend in repr(net)


SECOND_BACKEND_SCRIPT = """
import sys, lenet
from lenet.check import assert_logits_agree, assert_step_agrees, step_batch
params, ds = lenet.weights.load(sys.argv[1]), lenet.data.embedded()
x = ds.test_x[:128].copy()
for kernel in lenet.backends.kernels("keras"):
    net = lenet.load("keras", "cpu", params, kernel)
    assert net.keras_backend == sys.argv[2], net.keras_backend
    assert_logits_agree(net.predict(x), params, x)
assert_step_agrees(lenet.load("keras", "cpu", params), params, *step_batch(params, ds.test_x, ds.test_y), 0.1)
print("ok on", net.keras_backend)
"""


@pytest.mark.parametrize("keras_backend", ["jax", "torch"])
def test_keras_on_a_second_backend(keras_backend, params, tmp_path):
    """Keras with KERAS_BACKEND=jax|torch (a fresh process: the backend is fixed at import)."""
    for package in ("keras", keras_backend):
        if importlib.util.find_spec(package) is None:
            pytest.skip(f"keras on {keras_backend}: {package} not installed")
    path = lenet.weights.save(tmp_path / "w.safetensors", params)
    env = dict(os.environ, KERAS_BACKEND=keras_backend,
               PYTHONPATH=os.pathsep.join([str(TESTS), str(Path(lenet.__file__).parents[1]), os.environ.get("PYTHONPATH", "")]))
    run = subprocess.run([sys.executable, "-c", SECOND_BACKEND_SCRIPT, str(path), keras_backend],
                         env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert f"ok on {keras_backend}" in run.stdout


@pytest.mark.parametrize("backend", BACKENDS)
def test_gpu_without_a_gpu_is_one_clear_error(backend, params):
    if lenet.backends.cuda_unavailable() is None:
        pytest.skip("a CUDA GPU is present")
    with pytest.raises(lenet.UnavailableError) as err:
        lenet.load(backend, "gpu", params)
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"{backend} on gpu: ")
    if lenet.backends.unavailable(backend, "cpu") is None:         # installed: the GPU is what is missing
        assert lenet.backends.cuda_unavailable() in message


@pytest.mark.parametrize("backend,package,extra", [
    ("tensorflow", "tensorflow", "'.[tf]'"), ("keras", "keras", "'.[keras]'"), ("torch", "torch", "'.[torch]'")])
@pytest.mark.parametrize("device", ["cpu", "gpu"])
def test_missing_package_is_a_one_line_reason(backend, package, extra, device, monkeypatch):
    """With the package not findable, unavailable() names it and the extra, without importing."""
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == package else find_spec(name, *a))
    assert lenet.backends.unavailable(backend, device) == f"{package} not installed (pip install {extra})"


@pytest.mark.parametrize("package,importer", [("tensorflow", "import_tf"), ("torch", "import_torch")])
def test_broken_install_is_a_one_line_error(package, importer, monkeypatch):
    monkeypatch.setitem(sys.modules, package, None)          # makes `import package` fail
    import_it = getattr(lenet.backends.module(package), importer)
    with pytest.raises(lenet.UnavailableError, match=rf"^{package} failed to import: ModuleNotFoundError: [^\n]*$"):
        import_it()
