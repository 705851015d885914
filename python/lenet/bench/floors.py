"""Floors: what no LeNet backend on this machine can beat, measured in the same run.

cpu  the arithmetic floor: the model's 2 293 000 multiply-adds per image at the best measured
     SGEMM rate (numpy float32 matmul, i.e. its OpenBLAS, all threads it uses).
gpu  an empty kernel launch + synchronize, a 3 136 B (one image) host->device copy and a 40 B
     (ten logits) device->host copy, from pageable host memory as `predict` does, through the
     CUDA driver API (ctypes on libcuda; no Python GPU package needed). Their p50s add up to
     the single-image round-trip floor.

Run as `python -m lenet.bench.floors [--quick]` it prints the JSON object.
"""
from __future__ import annotations

import ctypes
import json
import sys
import time

import numpy as np

from ..model import MULTIPLY_ADDS
from .stats import summary

IMAGE_BYTES = 1 * 28 * 28 * 4      # 3 136 B
LOGITS_BYTES = 10 * 4              # 40 B
EMPTY_PTX = b"""
.version 6.0
.target sm_50
.address_size 64
.visible .entry lenet_empty()
{
    ret;
}
"""


def cpu_floor(quick: bool = False) -> dict:
    """Best SGEMM rate over several square products, and the per-image arithmetic floor."""
    n, runs = (512, 5) if quick else (1024, 10)
    rng = np.random.default_rng(0)
    a, b = rng.random((n, n), np.float32), rng.random((n, n), np.float32)
    a @ b                                                    # warm-up (thread pool start)
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    macs_per_s = n ** 3 / best
    return {"sgemm_n": n, "sgemm_runs": runs, "sgemm_gmacs_per_s": macs_per_s / 1e9,
            "multiply_adds_per_image": MULTIPLY_ADDS,
            "arithmetic_floor_us": MULTIPLY_ADDS / macs_per_s * 1e6,
            "images_per_s_ceiling": macs_per_s / MULTIPLY_ADDS,
            "how": "best of runs of numpy float32 (n x n) @ (n x n)"}


class _Driver:
    """The few CUDA driver calls the GPU floors need; every status checked."""

    def __init__(self):
        self.lib = ctypes.CDLL("libcuda.so.1")

    def __call__(self, name: str, *args):
        status = getattr(self.lib, name)(*args)
        if status != 0:
            text = ctypes.c_char_p()
            self.lib.cuGetErrorString(status, ctypes.byref(text))
            raise RuntimeError(f"{name} failed: CUresult {status} ({(text.value or b'?').decode()})")


def _time(fn, warmup: int, n: int) -> dict:
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e6)
    return summary(samples)


def gpu_floor(quick: bool = False) -> dict:
    cu = _Driver()
    n, warmup = (200, 20) if quick else (2000, 200)
    cu("cuInit", 0)
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    cu("cuDeviceGet", ctypes.byref(dev), 0)
    name = ctypes.create_string_buffer(256)
    cu("cuDeviceGetName", name, 256, dev)
    cu("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), dev)
    cu("cuCtxSetCurrent", ctx)
    mod, fn = ctypes.c_void_p(), ctypes.c_void_p()
    cu("cuModuleLoadData", ctypes.byref(mod), ctypes.c_char_p(EMPTY_PTX))
    cu("cuModuleGetFunction", ctypes.byref(fn), mod, b"lenet_empty")
    dptr = ctypes.c_uint64()
    cu("cuMemAlloc_v2", ctypes.byref(dptr), ctypes.c_size_t(IMAGE_BYTES))
    image = np.zeros(IMAGE_BYTES // 4, np.float32)            # pageable, like a numpy input
    logits = np.zeros(LOGITS_BYTES // 4, np.float32)
    one = ctypes.c_uint(1)
    null = ctypes.c_void_p()

    def launch():
        cu("cuLaunchKernel", fn, one, one, one, one, one, one, ctypes.c_uint(0), null, null, null)
        cu("cuCtxSynchronize")

    try:
        out = {
            "device_name": name.value.decode(),
            "launch_sync_us": _time(launch, warmup, n),
            "h2d_3kb_us": _time(lambda: cu("cuMemcpyHtoD_v2", dptr, image.ctypes.data_as(ctypes.c_void_p),
                                           ctypes.c_size_t(IMAGE_BYTES)), warmup, n),
            "d2h_40b_us": _time(lambda: cu("cuMemcpyDtoH_v2", logits.ctypes.data_as(ctypes.c_void_p), dptr,
                                           ctypes.c_size_t(LOGITS_BYTES)), warmup, n),
            "how": "CUDA driver API via ctypes: empty PTX kernel + cuCtxSynchronize; synchronous "
                   "cuMemcpy from/to pageable host memory",
        }
    finally:
        cu("cuMemFree_v2", dptr)
        cu("cuModuleUnload", mod)
        cu("cuDevicePrimaryCtxRelease", dev)
    out["round_trip_us"] = sum(out[k]["p50"] for k in ("launch_sync_us", "h2d_3kb_us", "d2h_40b_us"))
    return out


def measure(quick: bool = False, gpu: bool = True) -> dict:
    """{"cpu": {...}, "gpu": {...} | None, "gpu_reason": str | None}."""
    from ..backends import cuda_unavailable

    floors = {"cpu": cpu_floor(quick), "gpu": None, "gpu_reason": None}
    reason = cuda_unavailable() if gpu else "no GPU backend in this run"
    if reason:
        floors["gpu_reason"] = reason
        return floors
    try:
        floors["gpu"] = gpu_floor(quick)
    except (OSError, RuntimeError, AttributeError) as exc:
        floors["gpu_reason"] = " ".join(str(exc).split())
    return floors


if __name__ == "__main__":
    print(json.dumps(measure(quick="--quick" in sys.argv, gpu="--no-gpu" not in sys.argv)))
