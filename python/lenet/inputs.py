"""Validation of what users pass in: images, labels, learning rate. Every check is one
clear InputError; nothing is silently copied or cast."""
from __future__ import annotations

import numpy as np

from .errors import InputError
from .model import IMAGE_SHAPE, NUM_CLASSES


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
