"""lenet: one LeNet at every layer of the GPU software stack, measured side by side."""
from __future__ import annotations

import importlib.metadata

from . import backends, data, model, weights
from .net import Net
from .errors import DataError, InputError, LenetError, UnavailableError, WeightsError

try:
    __version__ = importlib.metadata.version("lenet")      # pyproject.toml's, as installed
except importlib.metadata.PackageNotFoundError:           # a source checkout on sys.path, not installed
    __version__ = "unknown"
__all__ = ["available", "load", "Net", "backends", "data", "model", "weights", "LenetError",
           "InputError", "WeightsError", "DataError", "UnavailableError", "__version__"]


def available() -> list[tuple[str, str, bool, str]]:
    """[(backend, device, ok, reason)] for every backend and each device it implements."""
    rows = []
    for name in backends.names():
        for device in backends.module(name).DEVICES:
            reason = backends.unavailable(name, device)
            rows.append((name, device, reason is None, reason or "ok"))
    return rows


def load(backend: str, device: str = "cpu", params: dict | None = None, kernel: str | int | None = None) -> Net:
    """A ready network of `backend` on `device` ("cpu" | "gpu") with `params` (default: the
    shipped weights); `kernel` picks a variant where the backend has several."""
    if device not in backends.DEVICES:
        raise InputError(f"unknown device {device!r} (use cpu or gpu)")
    mod = backends.module(backend)
    variants = backends.kernels(backend)
    kernel = None if kernel is None else str(kernel)
    if kernel is not None and kernel not in variants:
        raise InputError(f"{backend}: unknown kernel {kernel!r} (known: {', '.join(variants) or 'none'})")
    if kernel is not None and kernel not in backends.kernels(backend, device):
        raise UnavailableError(f"{backend} kernel {kernel!r} does not run on {device} "
                               f"(on {device}: {', '.join(backends.kernels(backend, device))})")
    reason = backends.unavailable(backend, device)
    if reason:
        raise UnavailableError(f"{backend} on {device}: {reason}")
    params = weights.check_params(params) if params is not None else weights.load()
    return mod.create(device, params, kernel or backends.default_kernel(backend, device))
