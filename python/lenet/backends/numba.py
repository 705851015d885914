"""numba backend: LeNet kernels written in Python and compiled by Numba, on cpu and gpu.

Per device a net and its kernels, each in its own module; this one only says what the backend is:
  _numba_net.py          what both nets share: the flat parameter buffer, activation shapes, the lock
  _numba_cpu.py          CpuNet, layer by layer  <- _numba_cpu_kernels.py  @njit, prange over cores
  _numba_gpu.py          GpuNet, fused or per layer  <- _numba_gpu_kernels.py  @cuda.jit
Each variant name belongs to one device (VARIANT_DEVICES). A net is safe to share between
threads: its calls are serialised by a lock (_numba_net).
"""
from __future__ import annotations

import importlib.util

from ..errors import UnavailableError
from ..net import Net
from ._cuda_driver import cuda_unavailable

TIER = "raw kernels"
DEVICES = ("cpu", "gpu")
VARIANTS = {
    "prange": "cpu: one njit kernel per layer, prange-parallel over the cores (im2col convolutions)",
    "1thread": "cpu: the prange kernels on one thread for a single image (no thread-pool hand-off); "
               "batches and training as prange",
    "fused": "gpu: a single image's forward in one cuda.jit launch (one block, activations in shared "
             "memory); batches and training as per-layer",
    "per-layer": "gpu: one cuda.jit launch per layer",
}
VARIANT_DEVICES = {"prange": ("cpu",), "1thread": ("cpu",), "fused": ("gpu",), "per-layer": ("gpu",)}
DEFAULT_VARIANT = {"cpu": "prange", "gpu": "fused"}  # cpu: measured in bench/results/cpu-2core; gpu: by design
SOURCES = tuple(f"python/lenet/backends/{name}.py" for name in (
    "numba", "_numba_net", "_numba_cpu", "_numba_cpu_kernels", "_numba_gpu", "_numba_gpu_kernels"))


def unavailable(device: str) -> str | None:
    if device == "gpu" and (reason := cuda_unavailable()):
        return reason
    if importlib.util.find_spec("numba") is None:
        return "numba not installed (pip install numba)"
    return None


def create(device: str, params: dict, variant: str | None = None) -> Net:
    reason = unavailable(device)
    if reason:
        raise UnavailableError(f"numba on {device}: {reason}")
    variant = variant or DEFAULT_VARIANT[device]
    if device == "cpu":
        from ._numba_cpu import CpuNet
        return CpuNet(params, variant)
    from ._numba_gpu import GpuNet
    return GpuNet(params, variant)
