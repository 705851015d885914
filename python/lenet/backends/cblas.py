"""cblas backend (cpu): the native C++ module's CPU path (csrc/cblas_*, csrc/NOTES.md): direct
vectorised convolutions (AVX-512, AVX2 or generic x86-64, picked at load) and row-dot dense kernels
for the forward pass; for training, the convolutions' backward through the pools' maxima only,
fc1's gradients over the nonzero ReLU gradients only, and OpenBLAS sgemm for fc2's."""
from __future__ import annotations

from ..errors import InputError
from ..inputs import check_images
from ..net import Net
from . import native_unavailable

TIER = "native"
DEVICES = ("cpu",)
VARIANTS = {   # OpenBLAS itself always runs single-threaded
    "threads": "the calling thread and persistent helper threads (OpenBLAS's default count: the cores); "
               "one image split over two of them (by output channels or by rows, whichever is faster here), "
               "its cuts moved to the one that runs faster",
    "1thread": "everything on the calling thread",
}
SOURCES = ("csrc/cblas_net.h", "csrc/cblas_net.cpp", "csrc/cblas_impl.h", "csrc/cblas_kernels.h",
           "csrc/cblas_kernels.cpp", "csrc/cblas_workers.h", "csrc/cblas_workers.cpp", "csrc/cblas_forward.cpp",
           "csrc/cblas_backward.cpp", "csrc/cblas_bind.cpp", "csrc/model.h", "csrc/arrays.h", "csrc/module.cpp",
           "CMakeLists.txt", "python/lenet/backends/cblas.py")


def unavailable(device: str) -> str | None:
    return native_unavailable()


def create(device: str, params: dict, variant: str | None = None) -> CblasNet:
    return CblasNet(params, variant or next(iter(VARIANTS)))


def _bad_images(x, message: str):
    check_images(x)
    raise InputError(message)


class CblasNet(Net):
    backend = "cblas"
    layers_method = "the C++ forward's own clock reads between its fused groups"   # layer_times_us: csrc

    def __init__(self, params: dict, variant: str):
        from .. import _native
        self.variant = variant
        self._net = _native.CpuNet(params, threads=1 if variant == "1thread" else 0)   # copies the parameters
        # predict: the native call itself, without Net.predict's Python checks on the way in: C++ makes
        # the same ones (type, dtype, shape, contiguity, finiteness), and where it refuses, _bad_images
        # names the fault in the words every backend uses. No Python frame: 0.2 µs less a call
        # (csrc/NOTES.md v27); no fork() check: this net works in a fork() child. The single-image
        # latency is this call.
        self.predict = _native.predictor(self._net, _bad_images)

    def forward(self, x):
        return self._net.predict(x)

    def _train_step(self, x, y, lr):
        return self._net.train_step(x, y, lr)

    def parameters(self):
        return self._net.parameters()

    def layer_times_us(self, x, repeats):
        """The C++ forward's own clock reads between its fused groups (conv1+pool1, conv2+pool2,
        fc1+fc2: each fc1 unit also computes its share of fc2), in a separate instantiation of the
        forward: predict has none. Keeps in handoffs_us, for each forward whose second half a helper
        thread took, how long after the forward began it started (none with one thread), in
        row_splits how many of the forwards were split by rows (csrc/NOTES.md v26, v33), and in cuts
        where the calls before had left one image's cuts between the two threads (v46)."""
        self.cuts = list(self._net.cuts) if self._net.threads > 1 else None
        times, self.handoffs_us, by_rows = self._net.layer_times(x, repeats)
        self.row_splits = sum(by_rows)
        return times
