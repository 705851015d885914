"""cupy: the hand-written CUDA C kernels (python/lenet/kernels/*.cu) compiled by NVRTC through
cupy.RawModule and launched from Python. Sequences and geometry live in _cuda_kernels.py, the
Net and the launchers' shared base in _cuda_net.py; this file is only the launcher. Variants "1g"/"2g" replay the multi-kernel forward pass as a
captured CUDA graph (one graph launch instead of six kernel launches).
"""
from __future__ import annotations

import functools
from importlib.util import find_spec

import numpy as np

from . import _cuda_kernels as ck
from . import _cuda_net as cn
from ._cuda_driver import cuda_unavailable

TIER = "raw kernels"
DEVICES = ("gpu",)
VARIANTS = {**ck.VERSIONS,
            "2g": "v2 forward replayed as a captured CUDA graph",
            "1g": "v1 forward replayed as a captured CUDA graph"}
SOURCES = ("python/lenet/backends/cupy.py",) + ck.SOURCES


def unavailable(device: str) -> str | None:
    return cuda_unavailable() or (None if find_spec("cupy") else "cupy not installed (pip install cupy-cuda13x)")


def create(device: str, params: dict, variant: str = "3") -> cn.CudaNet:
    return cn.CudaNet("cupy", GPU(), params, variant, graphs=variant.endswith("g"))


@functools.cache
def _module(file: str):
    import cupy
    return cupy.RawModule(code=ck.source(file), options=ck.OPTIONS)


class GPU(cn.Launcher):
    """CuPy's calls for the launcher interface of _cuda_net.Launcher. Everything runs on one
    non-blocking stream, which does not wait for the legacy default stream: every CuPy call that
    allocates, copies, fills or launches is made inside `with self.stream:` (or passes it)."""

    def __init__(self):
        import cupy
        self.cp = cupy
        self.stream = cupy.cuda.Stream(non_blocking=True)
        super().__init__()

    def compute_capability(self):
        cc = self.cp.cuda.Device().compute_capability       # e.g. "90"
        return int(cc[:-1]), int(cc[-1])

    # memory: cupy arrays
    def empty(self, count, dtype):
        with self.stream:
            return self.cp.empty(count, dtype)

    def to_device(self, host):
        with self.stream:
            return self.cp.asarray(host)

    def fill(self, buf, value):
        with self.stream:
            buf.fill(value)

    def pointer(self, buf, offset):
        return buf[offset:]

    def address(self, buf):
        return buf.data.ptr

    def _pinned_empty(self, count, dtype):
        return np.frombuffer(self.cp.cuda.alloc_pinned_memory(count * dtype.itemsize), dtype, count)

    def _copy_htod(self, address, host):
        self.cp.cuda.runtime.memcpyAsync(address, host.ctypes.data, host.nbytes,
                                         self.cp.cuda.runtime.memcpyHostToDevice, self.stream.ptr)

    def _copy_dtoh(self, host, address):
        self.cp.cuda.runtime.memcpyAsync(host.ctypes.data, address, host.nbytes,
                                         self.cp.cuda.runtime.memcpyDeviceToHost, self.stream.ptr)

    # events
    def event(self, timing=True):
        return self.cp.cuda.Event(disable_timing=not timing)

    def _elapsed_ms(self, start, end):
        return self.cp.cuda.get_elapsed_time(start, end)

    # kernels
    def function(self, file, name):
        return _module(file).get_function(name)

    def bind(self, fn, grid, block, args, extents):     # extents: the emulator's check only
        return fn, grid, block, args

    def launch(self, item):                     # on the current stream: run() makes it ours
        fn, grid, block, args = item
        fn(grid, block, args)

    def run(self, bound):
        if hasattr(bound, "launch"):            # a captured graph
            bound.launch(self.stream)
            return
        with self.stream:
            super().run(bound)

    def capture(self, bound):
        self.stream.synchronize()
        with self.stream:
            self.stream.begin_capture()
            try:
                self.run(bound)
            finally:
                graph = self.stream.end_capture()
        return graph
