"""pycuda: the very same .cu kernels as the cupy backend, compiled by nvcc through
pycuda.compiler.SourceModule and launched with PyCUDA prepared calls, so the two launchers can
be compared on identical kernels. Sequences, geometry and the Net live in _cuda_kernels.py.
"""
from __future__ import annotations

import atexit
import functools
import shutil
from importlib.util import find_spec

import numpy as np

from . import _cuda_kernels as ck
from . import cuda_unavailable

LAYER = "raw kernels"
DEVICES = ("gpu",)
KERNELS = dict(ck.VERSIONS)
SOURCES = ("python/lenet/backends/pycuda.py",) + ck.SOURCES


def unavailable(device: str) -> str | None:
    if reason := cuda_unavailable():
        return reason
    if find_spec("pycuda") is None:
        return "pycuda not installed (pip install pycuda; building it needs the CUDA toolkit)"
    if shutil.which("nvcc") is None:
        return "nvcc not found on PATH (PyCUDA SourceModule compiles with it)"
    return None


def create(device: str, params: dict, kernel: str = "3") -> ck.CudaNet:
    return ck.CudaNet("pycuda", GPU(), params, kernel)


@functools.cache
def _context():
    """The device's primary context (shared with CuPy and the runtime API), current on this thread."""
    import pycuda.driver as cuda
    cuda.init()
    ctx = cuda.Device(0).retain_primary_context()
    ctx.push()
    atexit.register(ctx.pop)
    return ctx


@functools.cache
def _module(file: str):
    from pycuda.compiler import SourceModule
    _context()
    return SourceModule(ck.source(file), no_extern_c=True)


_FORMAT = {np.int32: "i", np.float32: "f"}      # struct codes of the scalar kernel arguments


class GPU:
    """The launcher interface _cuda_kernels.CudaNet drives (cupy.py has the same methods)."""

    def __init__(self):
        import pycuda.driver as cuda
        self.ctx, self.cuda = _context(), cuda
        self.stream = cuda.Stream()
        self._staging = {}      # (pointer, dtype, size) -> (pinned host array, event of its last copy)

    def compute_capability(self):
        return self.ctx.get_device().compute_capability()

    # memory: DeviceAllocation plus the dtype and size it was made for
    def empty(self, count, dtype):
        return _Buffer(self.cuda.mem_alloc(max(count, 1) * np.dtype(dtype).itemsize), np.dtype(dtype), count)

    def zeros(self, count, dtype):
        buf = self.empty(count, dtype)
        self.cuda.memset_d32(buf.ptr, 0, count)
        return buf

    def to_device(self, host):
        buf = self.empty(host.size, host.dtype)
        self.cuda.memcpy_htod(buf.ptr, np.ascontiguousarray(host))
        return buf

    def fill(self, buf, value):
        bits = np.array(value, buf.dtype).view(np.uint32)
        self.cuda.memset_d32_async(buf.ptr, int(bits), buf.size, self.stream)

    def pointer(self, buf, offset):
        return buf.ptr + offset * buf.dtype.itemsize

    def _pinned(self, buf, count):
        """Pinned staging for copies of `buf`, waiting until its previous copy has finished."""
        key = (buf.ptr, buf.dtype.str, buf.size)
        if key not in self._staging:
            self._staging[key] = self.cuda.pagelocked_empty(buf.size, buf.dtype), self.cuda.Event()
        host, event = self._staging[key]
        event.synchronize()
        return host[:count], event

    def upload(self, buf, x):
        host, event = self._pinned(buf, x.size)
        np.copyto(host, x.ravel(), casting="no")
        self.cuda.memcpy_htod_async(buf.ptr, host, self.stream)
        event.record(self.stream)

    def download(self, buf, count):
        host, _ = self._pinned(buf, count)
        self.cuda.memcpy_dtoh_async(host, buf.ptr, self.stream)
        self.stream.synchronize()
        return host.copy()

    def synchronize(self):
        self.stream.synchronize()

    # kernels
    def function(self, file, name):
        return _module(file).get_function(name)

    def bind(self, fn, grid, block, args):
        fn.prepare("".join("P" if isinstance(a, int) else _FORMAT[type(a)] for a in args))
        return fn, grid, block, args

    def run(self, bound):
        for fn, grid, block, args in bound:
            fn.prepared_async_call(grid, block, self.stream, *args)

    def time_us(self, fn, repeats):
        start, end = self.cuda.Event(), self.cuda.Event()
        times = []
        for _ in range(repeats):
            start.record(self.stream)
            fn()
            end.record(self.stream)
            end.synchronize()
            times.append(start.time_till(end) * 1e3)
        return times


class _Buffer:
    """A device allocation with its element type and count (what cupy arrays carry themselves)."""

    def __init__(self, alloc, dtype, size):
        self.alloc, self.dtype, self.size, self.ptr = alloc, dtype, size, int(alloc)
