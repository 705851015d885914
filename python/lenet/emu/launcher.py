"""EmuGPU: the launcher interface of the cupy and pycuda backends (_cuda_net.Launcher) on the CPU
emulator of CUDA semantics, so `CudaNet` runs its real launch sequences with the real .cu files.

Everything is synchronous: a launch returns when every thread of every block has run, and any
report (race, out-of-bounds, ...) raises EmuError naming the kind, file:line, block and thread.
Device buffers come poisoned with NaN bytes and count as never written until written.
Correctness only: the emulator is never timed (device timing raises).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..backends import _cuda_kernels as ck
from ..backends import _cuda_net as cn
from ..errors import UnavailableError
from ..layers import by_launch
from . import build, modules, runtime

NOT_EMULATED = {"hold.cu": "a timing spin on the GPU's %globaltimer (inline PTX); only timing uses it"}
NEVER_TIMED = "executed on a CPU emulator of CUDA semantics: correctness only, never timed"


def layer_traffic(net: cn.CudaNet, x: np.ndarray) -> dict[str, dict[str, int]]:
    """{layer or fused group: {"launches": n, and runtime.TRAFFIC's byte counts}} of `net`'s forward
    on `x` (net on an EmuGPU), launch by launch: what each layer asks of memory. Counts, never times."""
    batch = net.upload(x)
    plan = ck.forward(net.version, batch.n)
    rt, kernels, counts = net.gpu.rt, [launch.kernel for launch in plan], []
    for item in cn.bind(net.gpu, plan, net.bufs):
        before = rt.traffic()
        net.gpu.run((item,))
        counts.append(rt.traffic() - before)
    columns = {"launches": by_launch(kernels, [1] * len(plan))}
    columns |= {name: by_launch(kernels, [int(c[i]) for c in counts]) for i, name in enumerate(runtime.TRAFFIC)}
    return {group: {name: int(column[group]) for name, column in columns.items()} for group in columns["launches"]}


class _Allocation:
    """Frees its device memory when the buffer holding it is dropped."""

    def __init__(self, rt, nbytes):
        self.rt, self.ptr = rt, rt.malloc(nbytes)

    def __del__(self):
        self.rt.free(self.ptr)


class _Synchronous:
    """Stream and event in one: every emulator call has finished when it returns."""

    def synchronize(self):
        pass

    def record(self, stream):
        pass


class EmuGPU(cn.Launcher):
    """Kernels from `kernel_dir` and the runtime from `runtime_dir` (the installed package's by
    default; tests pass the checkout's, so an edited .cu is tested without reinstalling)."""

    def __init__(self, kernel_dir: Path = ck.KERNEL_DIR, runtime_dir: Path = runtime.HERE):
        build.require()
        self.kernel_dir, self.runtime_dir = Path(kernel_dir), Path(runtime_dir)
        self.rt = runtime.load(self.runtime_dir)
        self.stream = _Synchronous()
        super().__init__()

    def compute_capability(self):
        return (9, 0)                   # the semantics emulated: sm_90's clusters and limits

    # memory: DeviceBuffers in the runtime's checked memory
    def empty(self, count, dtype):
        alloc = _Allocation(self.rt, max(count, 1) * np.dtype(dtype).itemsize)
        return cn.DeviceBuffer(alloc, dtype, count, alloc.ptr)

    def to_device(self, host):
        host = np.ascontiguousarray(host).ravel()
        buf = self.empty(host.size, host.dtype)
        self.rt.htod(buf.ptr, host)
        return buf

    def fill(self, buf, value):
        self.rt.memset32(buf.ptr, cn.fill_bits(value, buf.dtype), buf.size)

    def _pinned_empty(self, count, dtype):
        return np.empty(count, dtype)

    def _copy_htod(self, address, host):
        self.rt.htod(address, host)

    def _copy_dtoh(self, host, address):
        self.rt.dtoh(host, address)

    # events: nothing is asynchronous, and nothing is timed
    def event(self, timing=True):
        return _Synchronous()

    def _elapsed_ms(self, start, end):
        raise UnavailableError(NEVER_TIMED)

    def hold(self, ns):                 # what device timing starts with
        raise UnavailableError(NEVER_TIMED)

    # kernels
    def function(self, file, name):
        if file in NOT_EMULATED:
            raise UnavailableError(f"{file} is not emulated: {NOT_EMULATED[file]}")
        return modules.load(file, self.kernel_dir, self.runtime_dir), name

    def bind(self, fn, grid, block, args, extents):
        module, name = fn
        return modules.Launch(module, name, grid, block, args, cn.arg_codes(args), extents)

    def launch(self, item):
        item()
