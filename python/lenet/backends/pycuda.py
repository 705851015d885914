"""pycuda: the very same .cu kernels as the cupy backend, compiled by nvcc through
pycuda.compiler.SourceModule and launched with PyCUDA prepared calls, so the two launchers can
be compared on identical kernels. Sequences and geometry live in _cuda_kernels.py, the Net and
the launchers' shared base in _cuda_net.py.
"""
from __future__ import annotations

import atexit
import functools
import shutil
from importlib.util import find_spec

import numpy as np

from . import _cuda_kernels as ck
from . import _cuda_net as cn
from ._cuda_driver import cuda_unavailable

TIER = "raw kernels"
DEVICES = ("gpu",)
VARIANTS = dict(ck.VERSIONS)
SOURCES = ("python/lenet/backends/pycuda.py",) + ck.SOURCES


def unavailable(device: str) -> str | None:
    if reason := cuda_unavailable():
        return reason
    if find_spec("pycuda") is None:
        return "pycuda not installed (pip install pycuda; building it needs the CUDA toolkit)"
    if shutil.which("nvcc") is None:
        return "nvcc not found on PATH (PyCUDA SourceModule compiles with it)"
    return None


def create(device: str, params: dict, variant: str = "3") -> cn.CudaNet:
    return cn.CudaNet("pycuda", GPU(), params, variant)


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
    return SourceModule(ck.source(file), options=list(ck.OPTIONS), no_extern_c=True)


class GPU(cn.Launcher):
    """PyCUDA's calls for the launcher interface of _cuda_net.Launcher, on one stream; memory is
    allocated synchronously, and set and copied on the stream, so in order with its launches."""

    def __init__(self):
        import pycuda.driver as cuda
        self.ctx, self.cuda = _context(), cuda
        self.stream = cuda.Stream()
        super().__init__()

    def compute_capability(self):
        return self.ctx.get_device().compute_capability()

    # memory: a DeviceAllocation in a DeviceBuffer (its dtype and size)
    def empty(self, count, dtype):
        alloc = self.cuda.mem_alloc(max(count, 1) * np.dtype(dtype).itemsize)
        return cn.DeviceBuffer(alloc, dtype, count, int(alloc))

    def to_device(self, host):
        buf = self.empty(host.size, host.dtype)
        self.cuda.memcpy_htod(buf.ptr, np.ascontiguousarray(host))
        return buf

    def fill(self, buf, value):
        self.cuda.memset_d32_async(buf.ptr, cn.fill_bits(value, buf.dtype), buf.size, self.stream)

    def _pinned_empty(self, count, dtype):
        return self.cuda.pagelocked_empty(count, dtype)

    def _copy_htod(self, address, host):
        self.cuda.memcpy_htod_async(address, host, self.stream)

    def _copy_dtoh(self, host, address):
        self.cuda.memcpy_dtoh_async(host, address, self.stream)

    # events
    def event(self, timing=True):
        return self.cuda.Event(0 if timing else self.cuda.event_flags.DISABLE_TIMING)

    def _elapsed_ms(self, start, end):
        return start.time_till(end)

    # kernels
    def function(self, file, name):
        return _module(file).get_function(name)

    def bind(self, fn, grid, block, args, extents):     # extents: the emulator's check only
        fn.prepare(cn.arg_codes(args))
        return fn, grid, block, args

    def launch(self, item):
        fn, grid, block, args = item
        fn.prepared_async_call(grid, block, self.stream, *args)

