"""Backends: one module per backend in this directory, found by name.

A backend module defines, and imports nothing heavy at module level:

    LAYER    "reference" | "native" | "raw kernels" | "framework" | "peer"
    DEVICES  devices it can run on, e.g. ("cpu", "gpu")
    KERNELS  {label: one-line description} of its selectable variants (kernel versions,
             graph vs plain, ...); the first is the default. Optional.
    DEFAULT_KERNEL  {device: label} where the fastest variant differs by device. Optional.
    SOURCES  its own source files, relative to the repository root (lines-of-code count)
    unavailable(device) -> str | None   why it cannot run here (one line), or None
    create(device, params, kernel) -> Net
"""
from __future__ import annotations

import ctypes
import functools
import importlib
import pkgutil
from types import ModuleType

import numpy as np

from ..errors import InputError, UnavailableError
from ..model import IMAGE_SHAPE, LEARNING_RATE, NUM_CLASSES

LAYERS = ("reference", "native", "raw kernels", "framework", "peer")
DEVICES = ("cpu", "gpu")


def _listed() -> list[str]:
    """The backend modules in this directory (underscore modules are helpers, not backends)."""
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))


def names() -> list[str]:
    """Every backend in this directory, ordered by layer then name."""
    return sorted(_listed(), key=lambda n: (LAYERS.index(module(n).LAYER), n))


@functools.cache
def module(name: str) -> ModuleType:
    if name not in _listed():
        raise InputError(f"unknown backend {name!r} (known: {', '.join(_listed())})")
    return importlib.import_module(f"{__name__}.{name}")


def kernels(name: str) -> dict[str, str]:
    return dict(getattr(module(name), "KERNELS", {}))


def default_kernel(name: str, device: str) -> str | None:
    """The variant `lenet.load` uses when none is asked for: the fastest measured one."""
    mod = module(name)
    return getattr(mod, "DEFAULT_KERNEL", {}).get(device) or next(iter(getattr(mod, "KERNELS", {})), None)


def unavailable(name: str, device: str) -> str | None:
    """One-line reason why `name` cannot run on `device` here, or None if it can."""
    mod = module(name)
    if device not in mod.DEVICES:
        return f"{name} has no {device} implementation (devices: {', '.join(mod.DEVICES)})"
    try:
        return mod.unavailable(device)
    except Exception as exc:  # a broken install must not take the listing down
        return f"{type(exc).__name__}: {first_line(exc)}".rstrip(": ")


@functools.cache
def cuda_unavailable() -> str | None:
    """Why no CUDA device can be used here, asked of the driver directly (no framework import)."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return "no CUDA driver (libcuda.so.1 not found)"
    status = cuda.cuInit(0)
    if status != 0:
        return "no CUDA device (cuInit failed with CUresult %d)" % status
    count = ctypes.c_int(0)
    status = cuda.cuDeviceGetCount(ctypes.byref(count))
    if status != 0 or count.value == 0:
        return "no CUDA device (driver reports none)"
    return None


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


def check_images(x) -> np.ndarray:
    """Validate a batch of images: float32 ndarray (N, 1, 28, 28), C-contiguous, finite, N >= 1."""
    if not isinstance(x, np.ndarray):
        raise InputError(f"images must be a numpy.ndarray, got {type(x).__name__}")
    if x.dtype != np.float32:
        raise InputError(f"images must be float32, got {x.dtype}")
    if x.ndim != 4 or x.shape[1:] != IMAGE_SHAPE:
        raise InputError(f"images must have shape (N, 1, 28, 28), got {x.shape}")
    if x.shape[0] == 0:
        raise InputError("images: empty batch (N = 0)")
    if not x.flags.c_contiguous:
        raise InputError("images must be C-contiguous (use numpy.ascontiguousarray)")
    if not np.isfinite(x).all():
        raise InputError("images contain NaN or infinity")
    return x


def check_labels(y, n: int) -> np.ndarray:
    """Validate integer class labels (N,) in [0, 10); returned as contiguous int32."""
    if not isinstance(y, np.ndarray) or y.dtype.kind not in "iu":
        raise InputError(f"labels must be an integer numpy.ndarray, got {getattr(y, 'dtype', type(y).__name__)}")
    if y.shape != (n,):
        raise InputError(f"labels must have shape ({n},) to match the images, got {y.shape}")
    if n and (y.min() < 0 or y.max() >= NUM_CLASSES):
        raise InputError(f"labels must lie in [0, {NUM_CLASSES}), got [{y.min()}, {y.max()}]")
    return np.ascontiguousarray(y, dtype=np.int32)


def check_lr(lr) -> float:
    if not isinstance(lr, (int, float, np.floating)) or not np.isfinite(lr) or lr <= 0:
        raise InputError(f"learning rate must be a positive finite number, got {lr!r}")
    return float(lr)


class Net:
    """What `lenet.load` returns. Subclasses implement `forward`, `_train_step`, `parameters`,
    and, on a device, `upload`/`download`/`synchronize`.

    Timing split (DESIGN.md §2): predict(x) == download(forward(upload(x))); `download`
    waits for the result. `device_times_us` gives device-only forward times where the
    backend can measure them (CUDA events), else None.
    """

    backend: str = ""
    device: str = "cpu"
    kernel: str | None = None

    def predict(self, x: np.ndarray) -> np.ndarray:
        """(N, 1, 28, 28) float32 host images -> (N, 10) float32 host logits."""
        return self.download(self.forward(self.upload(check_images(x))))

    def train_step(self, x: np.ndarray, y: np.ndarray, lr: float = LEARNING_RATE) -> float:
        """One plain SGD step on mean softmax cross-entropy, in place; returns the batch loss."""
        x = check_images(x)
        return float(self._train_step(x, check_labels(y, len(x)), check_lr(lr)))

    def parameters(self) -> dict[str, np.ndarray]:
        """Current parameters, canonical names, layouts and float32."""
        raise NotImplementedError

    # timing split; the CPU defaults are identities
    def upload(self, x: np.ndarray):
        return x

    def forward(self, x):
        raise NotImplementedError

    def download(self, out) -> np.ndarray:
        return np.asarray(out, dtype=np.float32)

    def synchronize(self) -> None:
        pass

    def device_times_us(self, x: np.ndarray, repeats: int) -> list[float] | None:
        return None

    def _train_step(self, x: np.ndarray, y: np.ndarray, lr: float) -> float:
        raise UnavailableError(f"{self.backend} does not train")

    def __repr__(self) -> str:
        kernel = f", kernel={self.kernel!r}" if self.kernel else ""
        return f"<lenet {self.backend} on {self.device}{kernel}>"
