"""Backends: one module per backend in this directory, found by name.

A backend module defines, and imports nothing heavy at module level:

    TIER     "reference" | "native" | "raw kernels" | "framework" | "peer"
    DEVICES  devices it can run on, e.g. ("cpu", "gpu")
    VARIANTS  {label: one-line description} of its selectable variants (kernel versions,
              graph vs plain, ...); the first is the default. Optional.
    VARIANT_DEVICES  {label: devices} for variants that run on some of DEVICES only. Optional.
    DEFAULT_VARIANT  {device: label} where the fastest variant differs by device. Optional.
    SPLITS   comparisons the benchmark's report draws, as lenet.bench.results.Split fields. Optional.
    SOURCES  its own source files, relative to the repository root (lines-of-code count)
    DOES_NOT_TRAIN  why it never trains (an inference engine), one line. Optional.
    unavailable(device) -> str | None   why it cannot run here (one line), or None
    create(device, params, variant) -> lenet.net.Net
"""
from __future__ import annotations

import functools
import importlib
import pkgutil
from types import ModuleType

from ..errors import InputError
from ._cuda_driver import cuda_unavailable  # public here: why no GPU backend can run

TIERS = ("reference", "native", "raw kernels", "framework", "peer")
DEVICES = ("cpu", "gpu")


def _listed() -> list[str]:
    """The backend modules in this directory (underscore modules are helpers, not backends)."""
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))


def names() -> list[str]:
    """Every backend in this directory, ordered by tier then name."""
    return sorted(_listed(), key=lambda n: (TIERS.index(module(n).TIER), n))


@functools.cache
def module(name: str) -> ModuleType:
    if name not in _listed():
        raise InputError(f"unknown backend {name!r} (known: {', '.join(_listed())})")
    return importlib.import_module(f"{__name__}.{name}")


def variants(name: str, device: str | None = None) -> dict[str, str]:
    """{label: description} of the backend's variants; with `device`, those that run on it."""
    mod = module(name)
    only = getattr(mod, "VARIANT_DEVICES", {})
    return {v: text for v, text in getattr(mod, "VARIANTS", {}).items()
            if device is None or device in only.get(v, mod.DEVICES)}


def variant_unavailable(name: str, variant: str, device: str) -> str | None:
    """Why known variant `variant` of `name` does not run on `device` (which devices it needs, and
    what it is), or None if it does."""
    if variant in variants(name, device):
        return None
    mod = module(name)
    only = getattr(mod, "VARIANT_DEVICES", {}).get(variant, mod.DEVICES)
    return (f"{name} variant {variant!r} runs on {' and '.join(only)} only ({mod.VARIANTS[variant]}); "
            f"on {device}: {', '.join(variants(name, device)) or 'none'}")


def default_variant(name: str, device: str) -> str | None:
    """The variant `lenet.load` uses when none is asked for: the fastest measured one."""
    return getattr(module(name), "DEFAULT_VARIANT", {}).get(device) or next(iter(variants(name, device)), None)


def unavailable(name: str, device: str) -> str | None:
    """One-line reason why `name` cannot run on `device` here, or None if it can."""
    mod = module(name)
    if device not in mod.DEVICES:
        return f"{name} has no {device} implementation (devices: {', '.join(mod.DEVICES)})"
    try:
        return mod.unavailable(device)
    except Exception as exc:  # a broken install must not take the listing down
        return f"{type(exc).__name__}: {first_line(exc)}".rstrip(": ")


def training_unavailable(name: str) -> str | None:
    """Why backend `name` never trains (its train_step raises this as UnavailableError), or None."""
    return getattr(module(name), "DOES_NOT_TRAIN", None)


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message ("" if it has none)."""
    return (str(exc).strip().splitlines() or [""])[0]


def native_unavailable() -> str | None:
    """Why the native extension lenet._native cannot be imported here, or None."""
    try:
        importlib.import_module("lenet._native")
    except ImportError as exc:  # not built, or built but a library (OpenBLAS, cuDNN) does not load
        if isinstance(exc, ModuleNotFoundError) and exc.name == "lenet._native":
            return "lenet._native not built (pip install .)"
        return f"lenet._native does not load: {first_line(exc)}"
    return None
