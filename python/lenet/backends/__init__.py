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
    unavailable(device) -> str | None   why it cannot run here (one line), or None
    create(device, params, variant) -> lenet.net.Net
"""
from __future__ import annotations

import ctypes
import functools
import importlib
import pkgutil
from types import ModuleType

from ..errors import InputError

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


CUDA_REQUIRED = 13000       # cuDriverGetVersion of CUDA 13.0: what nvcc, NVRTC and the cu13 wheels need
CU_RESULT = {               # CUresult codes cuInit can return: (name, what it means)
    3: ("NOT_INITIALIZED", "the driver did not initialise"),
    34: ("STUB_LIBRARY", "libcuda.so.1 is the toolkit's stub, no NVIDIA driver is installed"),
    35: ("INSUFFICIENT_DRIVER", "the NVIDIA driver is too old"),
    46: ("DEVICE_UNAVAILABLE", "every CUDA device is busy or in exclusive use"),
    100: ("NO_DEVICE", "no CUDA device"),
    101: ("INVALID_DEVICE", "invalid CUDA device"),
    304: ("OPERATING_SYSTEM", "an operating system call failed (permissions on /dev/nvidia*?)"),
    802: ("SYSTEM_NOT_READY", "the system is not ready (nvidia-fabricmanager not running?)"),
    803: ("SYSTEM_DRIVER_MISMATCH", "the NVIDIA kernel module and libcuda.so.1 differ in version"),
    804: ("COMPAT_NOT_SUPPORTED_ON_DEVICE", "the forward-compatibility driver does not support this GPU"),
}


def cuda_problem(status: int, driver_version: int, devices: int = 1) -> str | None:
    """One line on why CUDA cannot be used, from cuInit's CUresult `status`, cuDriverGetVersion's
    `driver_version` (e.g. 12040; 0 if unknown) and the device count; None when all is well."""
    if 0 < driver_version < CUDA_REQUIRED:
        have, need = (f"{v // 1000}.{v % 1000 // 10}" for v in (driver_version, CUDA_REQUIRED))
        return f"CUDA driver {have} is older than CUDA {need} needs (update the NVIDIA driver)"
    if status != 0:
        name, words = CU_RESULT.get(status, ("", "the CUDA driver failed"))
        return f"{words} (cuInit returned {'CUDA_ERROR_' + name if name else 'CUresult'} {status})"
    if devices == 0:
        return "no CUDA device (the driver reports none)"
    return None


@functools.cache
def cuda_unavailable() -> str | None:
    """Why no CUDA device can be used here, asked of the driver directly (no framework import)."""
    from ._cuda_driver import Driver

    try:
        cuda = Driver()
    except OSError:
        return "no CUDA driver (libcuda.so.1 not found)"
    version = cuda.version()
    status = cuda.status("cuInit", 0)
    count = ctypes.c_int(0)
    if status == 0 and cuda.status("cuDeviceGetCount", ctypes.byref(count)) != 0:
        count.value = 0
    return cuda_problem(status, version, count.value)


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
