"""The GPU floors, through the CUDA driver API (backends/_cuda_driver.py; no Python GPU package):

host->host   the p50 of the least one image's predict must do: a 3 136 B host->device copy, an
             empty kernel launch and a 40 B (ten logits) device->host copy, queued in that order
             from pageable host memory (as a numpy input is) with one wait, the last copy's. Each
             of the three is also timed alone with its own wait (their sum pays three waits).
kernel-only  the larger of 2 293 000 FP32 FMAs at the FMA rate measured by a PTX kernel (ptx.py:
             8 independent FMA chains per thread over the whole GPU) and the weights read once at
             the device bandwidth measured by a large device-to-device copy (bytes read + written).
"""
from __future__ import annotations

import ctypes
import time

import numpy as np

from ...backends._cuda_driver import Driver
from ..results import GpuFloor
from ..stats import summary
from . import IMAGE_BYTES, LOGITS_BYTES, MULTIPLY_ADDS, WEIGHT_BYTES, ptx

# FP32 FMA lanes per multiprocessor per clock, by compute capability (CUDA C programming guide,
# arithmetic instruction throughput); the peak is a cross-check of the measured rate.
FMA_PER_CLK_PER_SM = {(6, 0): 64, (7, 0): 64, (7, 5): 64, (8, 0): 64, (8, 6): 128, (8, 7): 128, (8, 9): 128,
                      (9, 0): 128, (10, 0): 128, (12, 0): 128}


def _time(fn, warmup: int, n: int):
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e6)
    return summary(samples)


def _function(cu: Driver, code: bytes, name: bytes, modules: list):
    mod, fn = ctypes.c_void_p(), ctypes.c_void_p()
    cu("cuModuleLoadData", ctypes.byref(mod), ctypes.c_char_p(code))
    modules.append(mod)
    cu("cuModuleGetFunction", ctypes.byref(fn), mod, name)
    return fn


def _alloc(cu: Driver, nbytes: int, buffers: list) -> ctypes.c_uint64:
    ptr = ctypes.c_uint64()
    cu("cuMemAlloc_v2", ctypes.byref(ptr), ctypes.c_size_t(nbytes))
    buffers.append(ptr)
    return ptr


def floor(quick: bool = False) -> GpuFloor:
    cu = Driver()
    n, warmup = (200, 20) if quick else (2000, 200)
    cu("cuInit", 0)
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    cu("cuDeviceGet", ctypes.byref(dev), 0)
    name = ctypes.create_string_buffer(256)
    cu("cuDeviceGetName", name, 256, dev)
    cc = (cu.attribute(75, dev), cu.attribute(76, dev))      # CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR/MINOR
    sms, clock_khz = cu.attribute(16, dev), cu.attribute(13, dev)   # MULTIPROCESSOR_COUNT, CLOCK_RATE (kHz)
    cu("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), dev)
    modules, buffers = [], []
    try:
        cu("cuCtxSetCurrent", ctx)
        empty = _function(cu, ptx.EMPTY, b"lenet_empty", modules)
        fma = _function(cu, ptx.fma(), b"lenet_fma", modules)
        one, null = ctypes.c_uint(1), ctypes.c_void_p()

        # host->host floor: launch + sync, and the two copies of predict(one image)
        dptr = _alloc(cu, IMAGE_BYTES, buffers)
        image = np.zeros(IMAGE_BYTES // 4, np.float32)        # pageable, like a numpy input
        logits = np.zeros(LOGITS_BYTES // 4, np.float32)

        image_ptr, logits_ptr = image.ctypes.data_as(ctypes.c_void_p), logits.ctypes.data_as(ctypes.c_void_p)

        def launch():
            cu("cuLaunchKernel", empty, one, one, one, one, one, one, ctypes.c_uint(0), null, null, null)

        def launch_sync():
            launch()
            cu("cuCtxSynchronize")

        def chain():          # on the legacy default stream: the blocking copy back waits for the rest
            cu("cuMemcpyHtoDAsync_v2", dptr, image_ptr, ctypes.c_size_t(IMAGE_BYTES), null)
            launch()
            cu("cuMemcpyDtoH_v2", logits_ptr, dptr, ctypes.c_size_t(LOGITS_BYTES))

        out = {"device_name": name.value.decode(), "compute_capability": f"{cc[0]}.{cc[1]}",
               "sm_count": sms, "clock_mhz": clock_khz / 1000,
               "chain_us": _time(chain, warmup, n),
               "launch_sync_us": _time(launch_sync, warmup, n),
               "h2d_3kb_us": _time(lambda: cu("cuMemcpyHtoD_v2", dptr, image_ptr, ctypes.c_size_t(IMAGE_BYTES)),
                                   warmup, n),
               "d2h_40b_us": _time(lambda: cu("cuMemcpyDtoH_v2", logits_ptr, dptr, ctypes.c_size_t(LOGITS_BYTES)),
                                   warmup, n)}

        # device bandwidth: a large device-to-device copy, bytes read + written
        copy_bytes = (64 if quick else 512) << 20
        src, dst = _alloc(cu, copy_bytes, buffers), _alloc(cu, copy_bytes, buffers)
        cu("cuMemsetD8_v2", src, 1, ctypes.c_size_t(copy_bytes))
        ms = cu.event_ms(lambda: cu("cuMemcpyDtoD_v2", dst, src, ctypes.c_size_t(copy_bytes)), 5 if quick else 10)
        out["dtod_copy_bytes"] = copy_bytes
        out["dtod_bytes_per_s"] = 2 * copy_bytes / (ms / 1e3)

        # FP32 FMA rate: the PTX kernel over every multiprocessor
        blocks, threads, iters = sms * 8, 256, (128 if quick else 1024)
        sink = _alloc(cu, blocks * threads * 4, buffers)
        params = (ctypes.c_uint64(sink.value), ctypes.c_uint32(iters))
        args = (ctypes.c_void_p * 2)(*(ctypes.addressof(p) for p in params))
        ms = cu.event_ms(lambda: cu("cuLaunchKernel", fma, ctypes.c_uint(blocks), one, one, ctypes.c_uint(threads),
                                    one, one, ctypes.c_uint(0), null, args, null), 5)
        per_clk = FMA_PER_CLK_PER_SM.get(cc)
        out["fp32_fma_per_s_measured"] = blocks * threads * iters * ptx.FMA_CHAINS * ptx.FMA_UNROLL / (ms / 1e3)
        out["fp32_fma_per_clk_per_sm"] = per_clk
        out["fp32_fma_per_s_peak"] = sms * per_clk * clock_khz * 1e3 if per_clk else None
    finally:
        for ptr in buffers:
            cu("cuMemFree_v2", ptr)
        for mod in modules:
            cu("cuModuleUnload", mod)
        cu("cuDevicePrimaryCtxRelease", dev)
    return GpuFloor(**out, **derived(out["chain_us"].p50, out["fp32_fma_per_s_measured"], out["dtod_bytes_per_s"]),
                    how="CUDA driver API via ctypes. host->host floor: p50 of cuMemcpyHtoDAsync of 3 136 B, an "
                        "empty PTX kernel and a blocking cuMemcpyDtoH of 40 B on the legacy default stream "
                        "(pageable host memory, one wait); each alone with its own wait beside it. kernel "
                        "floor: max(multiply-adds / measured FP32 FMA rate (PTX kernel, 8 independent chains per "
                        "thread, 8 blocks of 256 per SM, CUDA events, best of 5), weight bytes / device bandwidth "
                        "(cuMemcpyDtoD, bytes read + written, CUDA events, best run)); peak FMA rate = SMs x "
                        "FMA/clk/SM x max clock")


def derived(chain_us: float, fma_per_s: float, dtod_bytes_per_s: float) -> dict:
    """The floors from the chain's p50 (µs) and the measured rates: host_to_host_floor_us,
    kernel_arithmetic_us, kernel_weights_read_us, kernel_floor_us."""
    arithmetic, weights = MULTIPLY_ADDS / fma_per_s * 1e6, WEIGHT_BYTES / dtod_bytes_per_s * 1e6
    return {"host_to_host_floor_us": chain_us, "kernel_arithmetic_us": arithmetic,
            "kernel_weights_read_us": weights, "kernel_floor_us": max(arithmetic, weights)}
