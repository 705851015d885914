"""cudnn backend (gpu): the native C++ module's GPU path, cuDNN for conv/pool/activation/softmax and
cuBLAS for the dense layers, forward, backward and SGD on the device (csrc/cudnn_net.cu).

Timing split: upload stages the images in pinned memory (and, on the plain path, starts the H2D
copy), forward enqueues the device work, download waits and returns the logits. On the "graph"
variant a batch of one image replays one captured CUDA graph (H2D copy, forward, D2H copy).
Plans (descriptors, cudnnFind* algorithms, buffers) are made once per batch size and cached:
batch 1 always, the 4 most recently used other sizes (MAX_PLANS).

device_times_us (CUDA events, copies excluded): "forward" the calls as forward() enqueues them
(graph variant at batch 1: its graph without the copies), "kernels" a copy-free graph of the same
calls, replayed.
"""
from __future__ import annotations

import importlib

from ..net import Net
from ..inputs import check_images
from . import native_unavailable
from ._cuda_driver import cuda_unavailable

TIER = "native"
DEVICES = ("gpu",)
VARIANTS = {
    "graph": "batch 1 as one captured CUDA graph (H2D copy, forward, D2H copy); other batches as plain",
    "plain": "the plain cuDNN/cuBLAS call sequence, one launch at a time",
}
SOURCES = ("csrc/cudnn_net.cu", "csrc/cudnn_net.h", "csrc/cudnn_bind.cpp", "csrc/cuda_check.h",
           "csrc/arrays.h", "csrc/module.cpp", "CMakeLists.txt", "python/lenet/backends/cudnn.py")


def _native():
    return importlib.import_module("lenet._native")


def unavailable(device: str) -> str | None:
    reason = native_unavailable()
    if reason:
        return reason
    native = _native()
    if not native.WITH_CUDA:
        return f"not built with CUDA ({native.CUDA_WHY})"
    reason = cuda_unavailable()
    if reason:
        return reason
    if native.cuda_device_count() == 0:
        return "no CUDA device"
    return None


def create(device: str, params: dict, variant: str | None = None) -> "CudnnNet":
    return CudnnNet(params, variant or next(iter(VARIANTS)))


class CudnnNet(Net):
    backend = "cudnn"
    device = "gpu"
    layers_method = ("CUDA events after each layer's cuDNN and cuBLAS calls (host gaps included: on an H100 "
                     "their sum exceeded the host-to-host time)")

    def __init__(self, params: dict, variant: str = "graph", deterministic: bool = True, native=None):
        """native: the compiled module to run (default lenet._native; the tests pass the build on the
        stand-in CUDA/cuDNN/cuBLAS of tests/cudnn_standin)."""
        self.variant = variant
        self.native = native or _native()
        self._net = self.native.CudnnNet(params, graph=variant == "graph", deterministic=deterministic)

    def upload(self, x):
        return self._net.upload(x)           # the staged batch size

    def forward(self, n):
        return self._net.forward(n)

    def download(self, n):
        return self._net.download(n)

    def synchronize(self):
        self._net.synchronize()

    def device_times_us(self, x, repeats):
        return self._net.device_times_us(check_images(x), int(repeats))   # {"forward": [...], "kernels": [...]}

    def layer_times_us(self, x, repeats):
        """CUDA events after each layer's cuDNN/cuBLAS calls, the forward at batch 1 enqueued call by
        call (not the graph). On an H100 the host's gaps between calls fell inside the pairs: the layers
        summed to more than the host-to-host time (bench/results/h100/)."""
        return self._net.layer_times_us(check_images(x), int(repeats))

    def _train_step(self, x, y, lr):
        return self._net.train_step(x, y, lr)

    def parameters(self):
        return self._net.parameters()

    def memory_in_use(self) -> int:
        """Bytes of device memory in use on the device this net runs on (cudaMemGetInfo)."""
        free, total = self.native.cuda_mem_info()
        return total - free

    def describe(self) -> str:
        """The cuDNN algorithms and workspace of each cached plan (batch size)."""
        return self._net.describe()
