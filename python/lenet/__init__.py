"""lenet: one LeNet at every tier of the GPU software stack, measured side by side."""
from __future__ import annotations

import importlib.metadata

from . import _fork, backends, data, model, weights
from .net import Net
from .errors import DataError, InputError, LenetError, TrainingError, UnavailableError, WeightsError

try:
    __version__ = importlib.metadata.version("lenet")      # pyproject.toml's, as installed
except importlib.metadata.PackageNotFoundError:           # a source checkout on sys.path, not installed
    __version__ = "unknown"
__all__ = ["available", "load", "Net", "backends", "data", "model", "weights", "LenetError",
           "InputError", "WeightsError", "DataError", "TrainingError", "UnavailableError", "__version__"]


def available() -> list[tuple[str, str, bool, str]]:
    """[(backend, device, ok, reason)] for every backend and each device it implements."""
    rows = []
    for name in backends.names():
        for device in backends.module(name).DEVICES:
            reason = backends.unavailable(name, device)
            rows.append((name, device, reason is None, reason or "ok"))
    return rows


def load(backend: str, device: str = "cpu", params: dict | None = None, variant: str | int | None = None) -> Net:
    """A ready network of `backend` on `device` ("cpu" | "gpu") with `params` (default: the
    shipped weights); `variant` picks one where the backend has several."""
    if device not in backends.DEVICES:
        raise InputError(f"unknown device {device!r} (use cpu or gpu)")
    mod = backends.module(backend)
    known = backends.variants(backend)
    variant = None if variant is None else str(variant)
    if variant is not None and variant not in known:
        raise InputError(f"{backend}: unknown variant {variant!r} (known: {', '.join(known) or 'none'})")
    if variant is not None and backends.variant_unavailable(backend, variant, device):
        raise UnavailableError(backends.variant_unavailable(backend, variant, device))
    reason = backends.unavailable(backend, device)
    if reason:
        raise UnavailableError(f"{backend} on {device}: {reason}")
    variant = variant or backends.default_variant(backend, device)
    _fork.check(backend, variant)
    params = weights.check_params(params) if params is not None else weights.load()
    net = mod.create(device, params, variant)
    _fork.note_loaded(net)
    return net
