"""cupy: the hand-written CUDA C kernels (python/lenet/kernels/*.cu) compiled by NVRTC through
cupy.RawModule and launched from Python. Sequences, geometry and the Net live in _cuda_kernels.py;
this file is only the launcher. Kernels "1g"/"2g" replay the multi-kernel forward pass as a
captured CUDA graph (one graph launch instead of six kernel launches).
"""
from __future__ import annotations

import functools
from importlib.util import find_spec

import numpy as np

from . import _cuda_kernels as ck
from . import cuda_unavailable

LAYER = "raw kernels"
DEVICES = ("gpu",)
KERNELS = {**ck.VERSIONS,
           "2g": "v2 forward replayed as a captured CUDA graph",
           "1g": "v1 forward replayed as a captured CUDA graph"}
SOURCES = ("python/lenet/backends/cupy.py",) + ck.SOURCES


def unavailable(device: str) -> str | None:
    return cuda_unavailable() or (None if find_spec("cupy") else "cupy not installed (pip install cupy-cuda13x)")


def create(device: str, params: dict, kernel: str = "3") -> ck.CudaNet:
    return ck.CudaNet("cupy", GPU(), params, kernel, graphs=kernel.endswith("g"))


@functools.cache
def _module(file: str):
    import cupy
    return cupy.RawModule(code=ck.source(file))


class GPU:
    """The launcher interface _cuda_kernels.CudaNet drives (pycuda.py has the same methods)."""

    def __init__(self):
        import cupy
        self.cp = cupy
        self.stream = cupy.cuda.Stream(non_blocking=True)
        self._staging = {}      # (pointer, dtype, size) -> (pinned host array, event of its last copy)

    def compute_capability(self):
        cc = self.cp.cuda.Device().compute_capability       # e.g. "90"
        return int(cc[:-1]), int(cc[-1])

    # memory
    def empty(self, count, dtype):
        return self.cp.empty(count, dtype)

    def zeros(self, count, dtype):
        return self.cp.zeros(count, dtype)

    def to_device(self, host):
        return self.cp.asarray(host)

    def fill(self, buf, value):
        with self.stream:
            buf.fill(value)

    def pointer(self, buf, offset):
        return buf[offset:]

    def _pinned(self, buf, count):
        """Pinned staging for copies of `buf`, waiting until its previous copy has finished."""
        key = (buf.data.ptr, buf.dtype.str, buf.size)
        if key not in self._staging:
            mem = self.cp.cuda.alloc_pinned_memory(buf.nbytes)
            self._staging[key] = np.frombuffer(mem, buf.dtype, buf.size), self.cp.cuda.Event(disable_timing=True)
        host, event = self._staging[key]
        event.synchronize()
        return host[:count], event

    def upload(self, buf, x):
        host, event = self._pinned(buf, x.size)
        np.copyto(host, x.ravel(), casting="no")
        self.cp.cuda.runtime.memcpyAsync(buf.data.ptr, host.ctypes.data, host.nbytes,
                                         self.cp.cuda.runtime.memcpyHostToDevice, self.stream.ptr)
        event.record(self.stream)

    def download(self, buf, count):
        host, _ = self._pinned(buf, count)
        self.cp.cuda.runtime.memcpyAsync(host.ctypes.data, buf.data.ptr, host.nbytes,
                                         self.cp.cuda.runtime.memcpyDeviceToHost, self.stream.ptr)
        self.stream.synchronize()
        return host.copy()

    def synchronize(self):
        self.stream.synchronize()

    # kernels
    def function(self, file, name):
        return _module(file).get_function(name)

    def bind(self, fn, grid, block, args):
        return fn, grid, block, args

    def run(self, bound):
        if hasattr(bound, "launch"):            # a captured graph
            bound.launch(self.stream)
            return
        with self.stream:
            for fn, grid, block, args in bound:
                fn(grid, block, args)

    def capture(self, bound):
        self.stream.synchronize()
        with self.stream:
            self.stream.begin_capture()
            try:
                self.run(bound)
            finally:
                graph = self.stream.end_capture()
        return graph

    def time_us(self, fn, repeats):
        start, end = self.cp.cuda.Event(), self.cp.cuda.Event()
        times = []
        for _ in range(repeats):
            start.record(self.stream)
            fn()
            end.record(self.stream)
            end.synchronize()
            times.append(self.cp.cuda.get_elapsed_time(start, end) * 1e3)
        return times
