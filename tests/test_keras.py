"""keras against the NumPy reference: every mode on this process's Keras backend, fit against the
reference's steps, Keras on jax and torch (fresh processes: Keras fixes its backend at import),
variant labels that carry the Keras backend, one GPU shared by frameworks (JAX does not
preallocate), and the errors for a missing package or GPU."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import lenet
from lenet.backends import keras as keras_backend
from lenet.model import LAYERS
from lenet.backends import numpy as reference
from lenet.backends._frameworks import import_jax

from lenet.training import run_epoch
from agree import assert_logits_agree, assert_step_agrees, require
from framework_checks import (assert_layer_times, assert_broken_install_is_one_line, assert_gpu_without_a_gpu_is_one_clear_error,
                              assert_missing_package_is_one_line, assert_round_trip_is_exact)

pytestmark = pytest.mark.isolated        # its own process: Keras imports one backend per process

DEVICES = ["cpu", pytest.param("gpu", marks=pytest.mark.gpu)]
STEP_LR = 0.1           # not the default 0.05 the optimizer starts with: the change must take effect
TESTS = Path(__file__).resolve().parent
HERE = lenet.backends.default_variant("keras", "cpu").split("/")[0]   # this process's Keras backend


def _run(code: str, *args: str, **env: str | None) -> subprocess.CompletedProcess:
    """`code` in a fresh Python with this checkout and tests/ importable; `env` changes the
    environment (None: unset)."""
    environ = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(TESTS), str(Path(lenet.__file__).parents[1]), os.environ.get("PYTHONPATH", "")]))
    for name, value in env.items():
        if value is None:
            environ.pop(name, None)
        else:
            environ[name] = value
    return subprocess.run([sys.executable, "-c", code, *args], env=environ, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", list(keras_backend.MODES))
def test_forward_agrees_with_reference(mode, device, params, dataset):
    require("keras", device)
    net = lenet.load("keras", device, params, f"{HERE}/{mode}")
    x = dataset.test_x[:256].copy()
    assert_logits_agree(net.predict(x), params, x)
    assert_logits_agree(net.predict(x[:1]), params, x[:1])          # the single-image shape


@pytest.mark.parametrize("mode", list(keras_backend.MODES))
def test_layer_times(mode, params, dataset):
    """Keras on this process's backend, through that backend's own profiler. XLA's fusions in a
    compiled step (jax's predict modes) are its own choice: every layer once, in order, is checked."""
    expected = None if HERE == "jax" and mode != "call" else LAYERS
    assert_layer_times("keras", f"{HERE}/{mode}", params, dataset, expected)


@pytest.mark.parametrize("device", DEVICES)
def test_one_sgd_step_agrees_with_float64_reference(device, params, batch):
    require("keras", device)
    assert_step_agrees(lenet.load("keras", device, params), params, *batch, STEP_LR)


def test_round_trip_is_exact(params):
    assert_round_trip_is_exact("keras", params)


def test_fit_epoch_agrees_with_reference_steps(params, dataset):
    """train_epoch (Keras fit) over a given order equals plain SGD steps in that order, at
    a learning rate changed between calls."""
    require("keras")
    net = lenet.load("keras", "cpu", params)
    x, y = dataset.train_x[:256], dataset.train_y[:256]
    order = np.random.default_rng(1).permutation(len(x))
    ref = reference.Reference(params, np.float64)
    for lr in (STEP_LR, 0.02):
        losses = [ref.train_step(x[order[i:i + 64]], y[order[i:i + 64]], lr) for i in range(0, len(x), 64)]
        loss = net.train_epoch(x, y, lr, 64, order)
        assert abs(loss - np.mean(losses)) <= 1e-5 * max(1.0, np.mean(losses)), (loss, np.mean(losses))
    got = net.parameters()
    for name in params:
        update = ref.params[name] - params[name]
        err = np.abs((got[name] - params[name]) - update).max() / np.abs(update).max()
        assert err <= 1e-3, f"{name}: {err:.3g}"


def test_divergence_in_fit_is_caught_at_the_epoch(dataset):
    """Keras fits a whole epoch in one call: its mean loss tells that, not which batch, diverged."""
    require("keras")
    net = lenet.load("keras", "cpu", lenet.model.init_params())
    with pytest.raises(lenet.TrainingError, match=r"^training diverged in epoch 1: its mean loss is (nan|inf) "):
        run_epoch(net, np.ascontiguousarray(dataset.train_x[::16]), dataset.train_y[::16], lr=1e3)


def test_variants_name_the_keras_backend(params):
    """Every variant is <Keras backend>/<mode>; the net reports its backend, in repr too."""
    require("keras")
    assert list(keras_backend.VARIANTS) == [f"{b}/{m}" for b in ("tensorflow", "jax", "torch") for m in keras_backend.MODES]
    import keras
    net = lenet.load("keras", "cpu", params, f"{HERE}/call")
    assert net.keras_backend == keras.backend.backend() == HERE and net.mode == "call"
    assert net.runtime == f"Keras on {HERE}"
    assert f"{HERE}/call" in repr(net)


def test_a_second_keras_backend_in_one_process_is_one_clear_error(params):
    require("keras")
    lenet.load("keras", "cpu", params, f"{HERE}/call")               # Keras is now imported on HERE
    other = next(b for b in keras_backend.KERAS_BACKENDS if b != HERE)
    if importlib.util.find_spec(other) is None:
        pytest.skip(f"{other} not installed")
    with pytest.raises(lenet.UnavailableError) as err:
        lenet.load("keras", "cpu", params, f"{other}/call")
    assert str(err.value) == (f"keras on cpu: Keras backend {other}: this process imported Keras on {HERE}, and "
                              f"Keras fixes its backend at import (run {other}/... in a fresh process)")


SECOND_BACKEND_SCRIPT = """
import sys, lenet, lenet.layers
from lenet.training import run_epoch
from lenet.check import step_batch
from agree import assert_logits_agree, assert_step_agrees
params, ds, name, device = lenet.weights.load(sys.argv[1]), lenet.data.embedded(), sys.argv[2], sys.argv[3]
x = ds.test_x[:128].copy()
try:
    for variant in [k for k in lenet.backends.variants("keras") if k.startswith(name + "/")]:
        net = lenet.load("keras", device, params, variant)
        assert net.keras_backend == name and net.variant == variant, (net.keras_backend, net.variant)
        assert_logits_agree(net.predict(x), params, x)
        if device == "cpu":                 # each mode's layer times, from the backend's own profiler
            times = net.layer_times_us(x[:1].copy(), 2)
            assert lenet.layers.times_problem(times, 2) is None, times
            assert name == "jax" and "predict" in variant or list(times) == list(lenet.model.LAYERS), times
except lenet.UnavailableError as exc:
    print("unavailable:", exc)
    sys.exit(3)
assert_step_agrees(lenet.load("keras", device, params, name + "/call"), params,
                   *step_batch(params, ds.test_x, ds.test_y), 0.1)
print("ok on", net.keras_backend)
"""


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", ["jax", "torch"])
def test_keras_on_jax_and_torch(name, device, params, tmp_path):
    """Keras on jax|torch chosen by the variant label alone, in a fresh process as the benchmark runs it."""
    require("keras", device)
    if importlib.util.find_spec(name) is None:
        pytest.skip(f"keras on {name}: {name} not installed")
    path = lenet.weights.save(tmp_path / "w.safetensors", params)
    run = _run(SECOND_BACKEND_SCRIPT, str(path), name, device, KERAS_BACKEND="tensorflow")
    if run.returncode == 3:
        pytest.skip(run.stdout.strip())
    assert run.returncode == 0, run.stderr[-3000:]
    assert f"ok on {name}" in run.stdout


def test_default_variant_follows_keras_backend():
    """Without a variant, lenet.load("keras") runs on the backend KERAS_BACKEND names, as before;
    a backend that cannot train LeNet is a one-line reason."""
    code = "import lenet; print(lenet.backends.default_variant('keras', 'cpu'), lenet.backends.unavailable('keras', 'cpu'))"
    for name in keras_backend.KERAS_BACKENDS:
        assert _run(code, KERAS_BACKEND=name).stdout.split() == [f"{name}/call", "None"]
    run = _run(code, KERAS_BACKEND="numpy")
    assert run.stdout.startswith("tensorflow/call Keras backend 'numpy' (KERAS_BACKEND or keras.json) cannot train")


JAX_PREALLOCATE = """
import os, sys, lenet
from lenet.backends._frameworks import import_jax
import_jax() if sys.argv[1] == "import_jax" else lenet.load("keras", "cpu", variant=sys.argv[1])
print(os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"], "jax" in sys.modules)
"""


@pytest.mark.parametrize("how", ["import_jax", "torch/call"])
@pytest.mark.parametrize("user, expected", [(None, "false"), ("true", "true")])
def test_jax_does_not_preallocate_unless_the_user_asks(how, user, expected):
    """XLA_PYTHON_CLIENT_PREALLOCATE=false is set before jax is imported, by import_jax and before
    Keras (which imports jax on any backend), unless the user set it."""
    for package in ("jax", "keras", "torch")[:1 if how == "import_jax" else 3]:
        if importlib.util.find_spec(package) is None:
            pytest.skip(f"{package} not installed")
    run = _run(JAX_PREALLOCATE, how, XLA_PYTHON_CLIENT_PREALLOCATE=user)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split()[-2:] == [expected, "True"]


def test_gpu_without_a_gpu_is_one_clear_error(params):
    assert_gpu_without_a_gpu_is_one_clear_error("keras", params)


@pytest.mark.parametrize("device", ["cpu", "gpu"])
def test_missing_package_is_a_one_line_reason(device, monkeypatch):
    assert_missing_package_is_one_line("keras", device, "'.[keras]'", monkeypatch)


def test_broken_jax_install_is_a_one_line_error(monkeypatch):
    assert_broken_install_is_one_line("jax", import_jax, monkeypatch)
