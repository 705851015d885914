"""What both numba nets share: the flat parameter buffer, the activation shapes, the lock.

Parameters (and their gradients) live in one flat float32 buffer each, in canonical order with
the dense weights transposed to [in, out] (so a dense layer's forward reads neighbouring
outputs' weights side by side); SGD is one kernel over the buffer. `views` names the tensors
inside it. Sizes come from the parameters' shapes (the channel counts) and lenet.model (the
image and filter), so the nets also run a LeNet with fewer channels (the simulator tests).

Thread safety: a net keeps one set of activation buffers per batch size and updates its
parameters in place, so every call that touches them holds the net's lock (`self.lock`): calls
from several threads on one net are serialised, never mixed (without it, 4 threads got 133 of 200
single images wrong). Chosen over per-call buffers because training must be serialised anyway
and the prange kernels use every core for one call. Cost, on a 2-core AMD EPYC shared with other
jobs: the uncontended RLock 0.16 us (timeit); single-image p50 with and without it, interleaved,
179.5 vs 180.7 us (prange) and 146.6 vs 141.2 us (1thread): inside the noise.
"""
from __future__ import annotations

import threading

import numpy as np

from ..model import IMAGE_SHAPE, PARAM_NAMES, POOL
from ..net import Net


def _is_dense_weight(name: str) -> bool:
    return name.startswith("fc") and name.endswith(".weight")


def pack(params: dict) -> np.ndarray:
    """Canonical params -> one flat float32 buffer, dense weights transposed to [in, out]."""
    return np.concatenate([np.asarray(params[k], np.float32).T.ravel() if _is_dense_weight(k) else
                           np.asarray(params[k], np.float32).ravel() for k in PARAM_NAMES])


def views(flat, shapes: dict) -> dict:
    """Named views into a flat buffer (numpy or device array); shapes are canonical."""
    out, at = {}, 0
    for k in PARAM_NAMES:
        shape = shapes[k][::-1] if _is_dense_weight(k) else shapes[k]
        size = int(np.prod(shape))
        out[k] = flat[at:at + size].reshape(shape)
        at += size
    return out


def unpack(flat: np.ndarray, shapes: dict) -> dict:
    """The inverse of pack: canonical float32 arrays, copies."""
    return {k: np.ascontiguousarray(v.T if _is_dense_weight(k) else v, dtype=np.float32)
            for k, v in views(flat, shapes).items()}


def activation_shapes(shapes: dict, n: int) -> dict:
    """Per-layer activation shapes for a batch of n images, and their gradients ("d" + name);
    channel counts and filter size read from the parameter shapes."""
    c1, c2, k = shapes["conv1.weight"][0], shapes["conv2.weight"][0], shapes["conv1.weight"][2]
    h1 = IMAGE_SHAPE[1] - k + 1
    h2 = h1 // POOL - k + 1
    a = {"conv1": (n, c1, h1, h1), "pool1": (n, c1, h1 // POOL, h1 // POOL), "conv2": (n, c2, h2, h2),
         "pool2": (n, c2, h2 // POOL, h2 // POOL), "fc1": (n, shapes["fc1.weight"][0]),
         "logits": (n, shapes["fc2.weight"][0])}
    return a | {"d" + name: shape for name, shape in a.items()}


class NumbaNet(Net):
    """The numba net of one device: `flat_params`/`flat_grads` hold the buffers, `weights`/
    `grads` name the tensors in them, `kernels` holds the device's compiled kernels."""

    backend = "numba"
    fork_safe = False                   # its thread pools do not survive fork() (docs/using.md)

    def __init__(self, params: dict, variant: str):
        self.variant = variant
        self.shapes = {k: tuple(np.shape(params[k])) for k in PARAM_NAMES}
        self.buffers: dict = {}            # activation buffers per batch size (and mode)
        self.lock = threading.RLock()

    def parameters(self):
        with self.lock:
            return unpack(self.download(self.flat_params), self.shapes)
