"""Checks the framework backends' test modules (test_tensorflow, test_keras, test_torch) share (and
test_layers);
each module runs in its own process, so what they have in common lives here."""
from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pytest

import lenet

from lenet import layers
from agree import require
from lenet.model import LAYERS

LAYER_REPEATS = 3


def assert_round_trip_is_exact(backend: str, params) -> None:
    require(backend)
    got = lenet.load(backend, "cpu", params).parameters()
    assert set(got) == set(params)
    for name, value in params.items():
        assert got[name].dtype == np.float32 and np.array_equal(got[name], value), name


def assert_gpu_without_a_gpu_is_one_clear_error(backend: str, params) -> None:
    if lenet.backends.cuda_unavailable() is None:
        pytest.skip("a CUDA GPU is present")
    with pytest.raises(lenet.UnavailableError) as err:
        lenet.load(backend, "gpu", params)
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"{backend} on gpu: ")
    if lenet.backends.unavailable(backend, "cpu") is None:         # installed: the GPU is what is missing
        assert lenet.backends.cuda_unavailable() in message


def assert_missing_package_is_one_line(backend: str, device: str, extra: str, monkeypatch) -> None:
    """With the backend's package not findable, unavailable() names it and the extra, without importing."""
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == backend else find_spec(name, *a))
    assert lenet.backends.unavailable(backend, device) == f"{backend} not installed (pip install {extra})"


def assert_broken_install_is_one_line(package: str, importer, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, package, None)           # makes `import package` fail
    with pytest.raises(lenet.UnavailableError, match=rf"^{package} failed to import: ModuleNotFoundError: [^\n]*$"):
        importer()


def assert_layer_times(backend: str, variant: str | None, params, dataset, expected=LAYERS) -> None:
    """layer_times_us on the CPU: every layer present once, in forward order, under `expected`'s
    names (layers or fused groups; None: any valid grouping), LAYER_REPEATS finite non-negative
    samples each; a method named."""
    require(backend)
    net = lenet.load(backend, "cpu", params, variant)
    times = net.layer_times_us(dataset.test_x[:1].copy(), LAYER_REPEATS)
    assert layers.times_problem(times, LAYER_REPEATS) is None, layers.times_problem(times, LAYER_REPEATS)
    assert expected is None or list(times) == list(expected)
    assert net.layers_method
