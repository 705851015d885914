"""cblas backend (cpu): the native C++ module's CPU path (csrc/cblas_net.cpp, csrc/NOTES.md): direct
vectorised convolutions (AVX-512, AVX2 or generic x86-64, picked at load) and a row-dot dense
kernel for the forward pass; OpenBLAS sgemm for batched dense layers and, with im2col, the backward pass."""
from __future__ import annotations

from ..net import Net
from . import native_unavailable

LAYER = "native"
DEVICES = ("cpu",)
VARIANTS = {   # OpenBLAS itself always runs single-threaded
    "threads": "one image split over the calling thread and a persistent helper, batches over worker "
               "threads (OpenBLAS's default count: the cores)",
    "1thread": "everything on the calling thread",
}
SOURCES = ("csrc/cblas_net.cpp", "csrc/cblas_net.h", "csrc/cblas_bind.cpp", "csrc/model.h", "csrc/arrays.h",
           "csrc/module.cpp", "CMakeLists.txt", "python/lenet/backends/cblas.py")


def unavailable(device: str) -> str | None:
    return native_unavailable()


def create(device: str, params: dict, variant: str | None = None) -> CblasNet:
    return CblasNet(params, variant or next(iter(VARIANTS)))


class CblasNet(Net):
    backend = "cblas"

    def __init__(self, params: dict, variant: str):
        from .. import _native
        self.variant = variant
        self._net = _native.CpuNet(params, threads=1 if variant == "1thread" else 0)   # copies the parameters

    def forward(self, x):
        return self._net.predict(x)

    def _train_step(self, x, y, lr):
        return self._net.train_step(x, y, lr)

    def parameters(self):
        return self._net.parameters()
