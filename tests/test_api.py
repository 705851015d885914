"""The public API (README, Using it from Python) and its one-line errors."""
import subprocess
import sys

import numpy as np
import pytest

import lenet
import lenet.bench
from lenet.errors import InputError, UnavailableError, WeightsError
from agree import assert_logits_agree, assert_step_agrees


def test_available_lists_every_backend_and_device():
    rows = lenet.available()
    assert ("numpy", "cpu", True, "ok") in rows
    for backend, device, ok, reason in rows:
        assert device in ("cpu", "gpu") and isinstance(ok, bool)
        assert ok == (reason == "ok") and "\n" not in reason and reason
    assert [r[0] for r in rows][0] == "numpy"          # ordered by layer, the reference first


def test_the_library_imports_none_of_the_benchmarks_tools():
    """`import lenet`, the backends' listing and `python -m lenet.bench --list` need only what
    inference and training need: no plotting library, nothing of the `bench` extra."""
    tools = lenet.bench.TOOLS
    code = ("import sys, lenet; lenet.available(); "
            f"print(sorted(m for m in sys.modules if m.split('.')[0] in {tools!r}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout == "[]\n", done.stderr
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "lenet.bench", "--list"],
                          capture_output=True, text=True, timeout=300)
    imported = {line.split("|")[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert done.returncode == 0 and "lenet.bench.cli" in imported, done.stderr[-2000:]
    assert not {m for m in imported if m.split(".")[0] in tools}


def test_load_defaults_to_the_shipped_weights(params):
    got = lenet.load("numpy").parameters()
    assert all(np.array_equal(got[k], params[k]) for k in params)


def test_numpy_backend_is_the_reference(params, dataset, batch):
    net = lenet.load("numpy", params=params)
    assert_logits_agree(net.predict(dataset.test_x[:100]), params, dataset.test_x[:100])
    assert_step_agrees(lenet.load("numpy", params=params), params, *batch)


@pytest.mark.parametrize("call, error, message", [
    (lambda: lenet.load("nonesuch"), InputError, "unknown backend 'nonesuch' \\(known: .*numpy"),
    (lambda: lenet.load("numpy", device="tpu"), InputError, "unknown device 'tpu'"),
    (lambda: lenet.load("numpy", device="gpu"), UnavailableError, "numpy on gpu: numpy has no gpu implementation"),
    (lambda: lenet.load("numpy", variant="7"), InputError, "unknown variant '7'"),
    (lambda: lenet.load("numpy", params={"conv1.weight": np.zeros((20, 1, 5, 5))}), WeightsError, "missing tensors"),
])
def test_load_errors(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_wrong_parameter_shapes_are_rejected(params):
    bad = dict(params, **{"fc1.weight": params["fc1.weight"].T})
    with pytest.raises(WeightsError, match=r"fc1.weight has shape \(800, 500\)"):
        lenet.load("numpy", params=bad)


@pytest.mark.parametrize("x, message", [
    ([[0.0]], "numpy.ndarray"),
    (np.zeros((2, 1, 28, 28), np.float64), "float32"),
    (np.zeros((2, 28, 28), np.float32), r"shape \(N, 1, 28, 28\)"),
    (np.zeros((2, 1, 28, 27), np.float32), r"shape \(N, 1, 28, 28\)"),
    (np.zeros((0, 1, 28, 28), np.float32), "empty batch"),
    (np.zeros((2, 1, 28, 56), np.float32)[..., ::2], "C-contiguous"),
    (np.full((2, 1, 28, 28), np.nan, np.float32), "NaN"),
])
def test_bad_images_raise_one_clear_error(x, message):
    net = lenet.load("numpy")
    with pytest.raises(InputError, match=message):
        net.predict(x)
    with pytest.raises(InputError, match=message):
        net.train_step(x, np.zeros(2, np.int64))


@pytest.mark.parametrize("y, lr, message", [
    (np.zeros(3, np.int64), 0.1, r"shape \(2,\)"),
    (np.zeros(2, np.float32), 0.1, "integer"),
    (np.array([0, 10]), 0.1, r"\[0, 10\)"),
    (np.zeros(2, np.int64), -1.0, "positive"),
    (np.zeros(2, np.int64), float("nan"), "positive"),
])
def test_bad_labels_and_learning_rates(y, lr, message):
    with pytest.raises(InputError, match=message):
        lenet.load("numpy").train_step(np.zeros((2, 1, 28, 28), np.float32), y, lr)


def test_every_default_variant_is_one_of_the_backends_variants():
    for name in lenet.backends.names():
        for device in lenet.backends.module(name).DEVICES:
            default = lenet.backends.default_variant(name, device)
            assert default in (lenet.backends.variants(name) or {None: ""}), (name, device, default)
    assert lenet.load("numpy").variant == "float32"
