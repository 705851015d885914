"""The reference: LeNet forward, backward and SGD in plain NumPy, float32 or float64.

This is the oracle every other backend is compared with, so it favours obviousness over
speed. Shapes are per batch of N images, NCHW.
"""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ..model import FILTER_SIZE, PARAM_NAMES, POOL
from ..layers import Stopwatch, stack
from ..net import Net

TIER = "reference"
DEVICES = ("cpu",)
VARIANTS = {"float32": "float32 arithmetic", "float64": "float64 arithmetic (the training oracle)"}
SOURCES = ("python/lenet/backends/numpy.py",)


def unavailable(device: str) -> str | None:
    return None


def create(device: str, params: dict, variant: str | None = None) -> "Reference":
    return Reference(params, np.float64 if variant == "float64" else np.float32)


# --- ops: each forward with its backward ---------------------------------------------

def conv(x, w, b):
    """Cross-correlation, stride 1, no padding. x (N,C,H,W), w (O,C,K,K) -> (N,O,H-K+1,W-K+1)."""
    windows = sliding_window_view(x, (FILTER_SIZE, FILTER_SIZE), axis=(2, 3))  # N,C,OH,OW,K,K
    return np.tensordot(windows, w, axes=([1, 4, 5], [1, 2, 3])).transpose(0, 3, 1, 2) + b[:, None, None]


def conv_backward(dy, x, w):
    """dy (N,O,OH,OW) -> dx (N,C,H,W), dw (O,C,K,K), db (O,)."""
    windows = sliding_window_view(x, (FILTER_SIZE, FILTER_SIZE), axis=(2, 3))  # N,C,OH,OW,K,K
    dw = np.tensordot(dy, windows, axes=([0, 2, 3], [0, 2, 3]))            # O,C,K,K
    dx = np.zeros_like(x)
    oh, ow = dy.shape[2:]
    for i in range(FILTER_SIZE):
        for j in range(FILTER_SIZE):
            dx[:, :, i:i + oh, j:j + ow] += np.einsum("nohw,oc->nchw", dy, w[:, :, i, j])
    return dx, dw, dy.sum(axis=(0, 2, 3))


def pool_windows(x):
    """(N,C,H,W) -> (N,C,H/2,W/2,4): each 2x2 pool window, in row-major order."""
    n, c, h, w = x.shape
    return x.reshape(n, c, h // POOL, POOL, w // POOL, POOL).transpose(0, 1, 2, 4, 3, 5).reshape(
        n, c, h // POOL, w // POOL, POOL * POOL)


def maxpool(x):
    return pool_windows(x).max(axis=-1)


def maxpool_backward(dy, x):
    """Each gradient goes to the first maximum of its window (row-major)."""
    n, c, h, w = x.shape
    first_max = pool_windows(x).argmax(axis=-1)                             # N,C,H/2,W/2
    dwin = (np.arange(POOL * POOL) == first_max[..., None]) * dy[..., None]
    return dwin.reshape(n, c, h // POOL, w // POOL, POOL, POOL).transpose(0, 1, 2, 4, 3, 5).reshape(n, c, h, w)


def dense(x, w, b):
    """x (N,in), w (out,in) -> (N,out)."""
    return x @ w.T + b


def dense_backward(dy, x, w):
    return dy @ w, dy.T @ x, dy.sum(axis=0)


def softmax_cross_entropy(logits, y):
    """Mean cross-entropy over the batch and its gradient with respect to the logits."""
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    n = len(y)
    loss = -log_probs[np.arange(n), y].mean()
    dlogits = np.exp(log_probs)
    dlogits[np.arange(n), y] -= 1
    return loss, dlogits / n


# the stored activation -> the layer whose time ends with it
_LAYER_OF = {"conv1": "conv1", "pool1": "pool1", "conv2": "conv2", "pool2": "pool2",
             "flat": "fc1", "fc1": "fc1", "relu": "fc1", "logits": "fc2"}


# --- the network ----------------------------------------------------------------------

class Reference(Net):
    """The oracle's state is public: `params` {name: array in `dtype`}, `forward(x, keep=True)`
    (every activation by name) and `gradients(x, y)`, for the checks in lenet.check."""
    backend = "numpy"
    layers_method = "the forward's own clock: the time between its activations' stores"

    def __init__(self, params: dict, dtype=np.float32):
        self.dtype = np.dtype(dtype)
        self.variant = self.dtype.name
        self.params = {k: np.array(params[k], dtype=self.dtype) for k in PARAM_NAMES}

    def forward(self, x, keep=False, acts=None):
        """Logits, or with keep every activation by name; `acts`: the dict to store them in."""
        p = self.params
        a = {} if acts is None else acts
        a["x"] = np.asarray(x, self.dtype)
        a["conv1"] = conv(a["x"], p["conv1.weight"], p["conv1.bias"])       # N,20,24,24
        a["pool1"] = maxpool(a["conv1"])                                      # N,20,12,12
        a["conv2"] = conv(a["pool1"], p["conv2.weight"], p["conv2.bias"])   # N,50,8,8
        a["pool2"] = maxpool(a["conv2"])                                      # N,50,4,4
        a["flat"] = a["pool2"].reshape(len(x), -1)                            # N,800 (c,h,w order)
        a["fc1"] = dense(a["flat"], p["fc1.weight"], p["fc1.bias"])         # N,500
        a["relu"] = np.maximum(a["fc1"], 0)
        a["logits"] = dense(a["relu"], p["fc2.weight"], p["fc2.bias"])      # N,10
        return a if keep else a["logits"]

    def layer_times_us(self, x, repeats):
        """The forward run with a Stopwatch for its activations: each layer is the time from the
        previous activation's store to its own (fc1 from the flatten to the ReLU)."""
        return stack([self.forward(x, keep=True, acts=Stopwatch()).laps(_LAYER_OF) for _ in range(repeats)])

    def gradients(self, x, y):
        """Loss and {name: gradient} of the mean softmax cross-entropy."""
        p, a = self.params, self.forward(x, keep=True)
        loss, d = softmax_cross_entropy(a["logits"], y)
        g = {}
        d, g["fc2.weight"], g["fc2.bias"] = dense_backward(d, a["relu"], p["fc2.weight"])
        d = d * (a["fc1"] > 0)
        d, g["fc1.weight"], g["fc1.bias"] = dense_backward(d, a["flat"], p["fc1.weight"])
        d = maxpool_backward(d.reshape(a["pool2"].shape), a["conv2"])
        d, g["conv2.weight"], g["conv2.bias"] = conv_backward(d, a["pool1"], p["conv2.weight"])
        d = maxpool_backward(d, a["conv1"])
        _, g["conv1.weight"], g["conv1.bias"] = conv_backward(d, a["x"], p["conv1.weight"])
        return float(loss), g

    def _train_step(self, x, y, lr):
        loss, g = self.gradients(x, y)
        for name, grad in g.items():
            self.params[name] -= self.dtype.type(lr) * grad
        return loss

    def parameters(self):
        return {k: v.astype(np.float32) for k, v in self.params.items()}
