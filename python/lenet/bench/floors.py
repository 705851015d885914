"""Floors: what no LeNet backend on this machine can beat, measured in the same run.

cpu  a roofline per image, for one core and for all cores: the larger of
       arithmetic  2 293 000 multiply-adds at the measured SGEMM rate (numpy float32 matmul, its
                   OpenBLAS on one thread, in a child process, and on all the threads it uses);
       bandwidth   the 1 724 320 B of float32 weights (fc1 alone 1.6 MB) read once, at the rate
                   one core reads a buffer of that size over and over (from the cache level it
                   fits in), or all cores each reading their share of it (a vectorised numba
                   loop, no call overhead inside the timed loop). A simple loop: a hand-tuned one
                   may read faster, so this term is a measured rate, not the hardware's peak.
gpu  host->host: an empty kernel launch + synchronize, a 3 136 B (one image) host->device and a
     40 B (ten logits) device->host copy, from pageable host memory as `predict` does; their
     p50s add up to the single-image host->host floor.
     kernel-only: the larger of 2 293 000 FP32 FMAs at the FMA rate measured by a PTX kernel
     (8 independent FMA chains per thread over the whole GPU) and the weights read once at the
     device bandwidth measured by a large device-to-device copy (bytes read + written).
     All through the CUDA driver API (ctypes on libcuda; no Python GPU package needed).

Run as `python -m lenet.bench.floors [--quick] [--no-gpu]` it prints the JSON object.
"""
from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import time

import numpy as np

from ..model import MULTIPLY_ADDS, NUM_PARAMS
from .stats import summary

IMAGE_BYTES = 1 * 28 * 28 * 4      # 3 136 B
LOGITS_BYTES = 10 * 4              # 40 B
WEIGHT_BYTES = NUM_PARAMS * 4      # 1 724 320 B
EMPTY_PTX = b"""
.version 6.0
.target sm_50
.address_size 64
.visible .entry lenet_empty()
{
    ret;
}
"""
FMA_CHAINS, FMA_UNROLL = 8, 8      # FMAs per loop iteration = 64


def _fma_ptx() -> bytes:
    """lenet_fma(float *out, u32 iters): each thread runs FMA_CHAINS independent chains
    x = x * m + m, FMA_UNROLL times per iteration, and stores their sum (nothing is dead code)."""
    regs = [f"x{k}" for k in range(FMA_CHAINS)]
    init = "\n".join(f"    add.f32 {r}, x0, 0f{0x3F800000 + k:08X};" for k, r in enumerate(regs) if k)
    body = "\n".join(f"    fma.rn.f32 {r}, {r}, m, m;" for _ in range(FMA_UNROLL) for r in regs)
    total = "\n".join(f"    add.f32 x0, x0, {r};" for r in regs[1:])
    return f"""
.version 6.0
.target sm_50
.address_size 64
.visible .entry lenet_fma(.param .u64 out, .param .u32 iters)
{{
    .reg .pred p;
    .reg .b32 i, n, b, t;
    .reg .f32 x<{FMA_CHAINS}>, m;
    .reg .b64 a, o;
    mov.u32 b, %ctaid.x;
    mov.u32 n, %ntid.x;
    mov.u32 t, %tid.x;
    mad.lo.u32 t, b, n, t;
    cvt.rn.f32.u32 x0, t;
{init}
    mov.f32 m, 0f3F7FFFEF;
    ld.param.u32 n, [iters];
    mov.u32 i, 0;
LOOP:
{body}
    add.u32 i, i, 1;
    setp.lt.u32 p, i, n;
    @p bra LOOP;
{total}
    ld.param.u64 a, [out];
    cvta.to.global.u64 a, a;
    mul.wide.u32 o, t, 4;
    add.u64 a, a, o;
    st.global.f32 [a], x0;
    ret;
}}
""".encode()


# FP32 FMA lanes per multiprocessor per clock, by compute capability (CUDA C programming guide,
# arithmetic instruction throughput); the peak is a cross-check of the measured rate.
FMA_PER_CLK_PER_SM = {(6, 0): 64, (7, 0): 64, (7, 5): 64, (8, 0): 64, (8, 6): 128, (8, 7): 128, (8, 9): 128,
                      (9, 0): 128, (10, 0): 128, (12, 0): 128}


# --- CPU ------------------------------------------------------------------------------

def sgemm(quick: bool = False) -> dict:
    """Best rate of numpy float32 (n x n) @ (n x n) over several runs, with the threads its BLAS uses."""
    n, runs = (512, 5) if quick else (1024, 10)
    rng = np.random.default_rng(0)
    a, b = rng.random((n, n), np.float32), rng.random((n, n), np.float32)
    a @ b                                                    # warm-up (thread pool start)
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return {"n": n, "runs": runs, "gmacs_per_s": n ** 3 / best / 1e9}


def sgemm_one_core(quick: bool = False) -> dict:
    """sgemm() in a child process whose BLAS is held to one thread (numpy's pool is fixed at import)."""
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(os.path.dirname(os.path.dirname(__file__))),
                                         env.get("PYTHONPATH", "")])
    code = f"import json; from lenet.bench.floors import sgemm; print(json.dumps(sgemm({quick!r})))"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


READ_ROW = 256                     # floats per row of the read loop's buffer (its accumulator row)


def read_bandwidth(quick: bool = False) -> dict:
    """Bytes/s at which one core, and all usable cores together (each its own rows), read a float32
    buffer of the model's weight size over and over: rows of READ_ROW floats added into one
    accumulator row (vectorised, independent lanes; a single running sum would be bound by the add
    latency, not the reads), the repeats inside the numba call, best of many short calls.
    Raises ImportError without numba."""
    import numba
    from numba import njit, prange

    @njit(fastmath=True, cache=False)
    def read(rows, lo, hi, reps):            # -> the sum of what it read (so nothing is dead code)
        acc = np.zeros(rows.shape[1], np.float32)
        for _ in range(reps):
            for i in range(lo, hi):
                acc += rows[i]
        return acc.sum()

    @njit(fastmath=True, parallel=True, cache=False)
    def read_shares(rows, parts, reps):
        share = rows.shape[0] // parts
        sums = np.zeros(parts, np.float32)
        for p in prange(parts):
            sums[p] = read(rows, p * share, (p + 1) * share, reps)
        return sums.sum()

    rows = np.random.default_rng(0).random((-(-NUM_PARAMS // READ_ROW), READ_ROW), dtype=np.float32)
    cores = max(1, min(len(os.sched_getaffinity(0)), numba.config.NUMBA_NUM_THREADS))
    numba.set_num_threads(cores)
    reps, calls = (30, 10) if quick else (30, 40)   # short calls (~1 ms), many: the best one saw the least contention
    share_bytes = rows.shape[0] // cores * cores * rows.shape[1] * 4
    out = {"cores": cores, "bytes": rows.nbytes, "reps_per_call": reps, "calls": calls}
    for key, fn, nbytes in (("one_core", lambda r: read(rows, 0, rows.shape[0], r), rows.nbytes),
                            ("all_cores", lambda r: read_shares(rows, cores, r), share_bytes)):
        fn(1)                                # compile and warm the caches
        best = float("inf")
        for _ in range(calls):
            start = time.perf_counter()
            fn(reps)
            best = min(best, time.perf_counter() - start)
        out[f"{key}_bytes_per_s"] = nbytes * reps / best
    return out


def cpu_floor(quick: bool = False) -> dict:
    """The CPU roofline floor per image, one core and all cores (module docstring)."""
    one_core, all_cores = sgemm_one_core(quick), sgemm(quick)
    # all cores may use one: the all-cores floor takes the better of the two rates
    rates = {"one_core": one_core["gmacs_per_s"] * 1e9,
             "all_cores": max(one_core["gmacs_per_s"], all_cores["gmacs_per_s"]) * 1e9}
    try:
        bw, bw_reason = read_bandwidth(quick), None
        reads = {"one_core": bw["one_core_bytes_per_s"],
                 "all_cores": max(bw["one_core_bytes_per_s"], bw["all_cores_bytes_per_s"])}
    except ImportError as exc:
        bw, bw_reason = None, f"weights-read term not measured: numba not installed ({exc})"
    out = {"multiply_adds_per_image": MULTIPLY_ADDS, "weight_bytes": WEIGHT_BYTES,
           "sgemm_n": all_cores["n"], "sgemm_runs": all_cores["runs"],
           "sgemm_gmacs_per_s": {k: v / 1e9 for k, v in rates.items()},
           "sgemm_threads_gmacs_per_s": all_cores["gmacs_per_s"],
           "read": bw, "read_reason": bw_reason,
           "arithmetic_us": {k: MULTIPLY_ADDS / v * 1e6 for k, v in rates.items()},
           "weights_read_us": {k: WEIGHT_BYTES / reads[k] * 1e6 for k in rates} if bw else None}
    out["floor_us"] = {k: max(out["arithmetic_us"][k], (out["weights_read_us"] or {}).get(k, 0.0)) for k in rates}
    out["images_per_s_ceiling"] = rates["all_cores"] / MULTIPLY_ADDS
    out["how"] = ("floor = max(arithmetic, weights read), per image. arithmetic: multiply-adds at the best "
                  "numpy float32 (n x n) @ (n x n) rate, its BLAS on one thread (child process) or the better of "
                  "that and all its threads. weights read: weight bytes at the rate one core (or the better of "
                  "that and all cores, each its share) re-reads a buffer of that size (numba loop, best call)")
    return out


# --- GPU ------------------------------------------------------------------------------

class Driver:
    """The few CUDA driver calls the GPU floors need; every status checked."""

    def __init__(self):
        self.lib = ctypes.CDLL("libcuda.so.1")

    def __call__(self, name: str, *args):
        status = getattr(self.lib, name)(*args)
        if status != 0:
            text = ctypes.c_char_p()
            self.lib.cuGetErrorString(status, ctypes.byref(text))
            raise RuntimeError(f"{name} failed: CUresult {status} ({(text.value or b'?').decode()})")

    def attribute(self, attr: int, dev) -> int:
        value = ctypes.c_int()
        self("cuDeviceGetAttribute", ctypes.byref(value), attr, dev)
        return value.value

    def event_ms(self, fn, runs: int) -> float:
        """Best of `runs` CUDA-event timings (ms) of fn()'s work on the default stream, after one warm-up."""
        start, stop = ctypes.c_void_p(), ctypes.c_void_p()
        self("cuEventCreate", ctypes.byref(start), 0)
        self("cuEventCreate", ctypes.byref(stop), 0)
        try:
            fn()
            best = float("inf")
            for _ in range(runs):
                self("cuEventRecord", start, None)
                fn()
                self("cuEventRecord", stop, None)
                self("cuEventSynchronize", stop)
                ms = ctypes.c_float()
                self("cuEventElapsedTime", ctypes.byref(ms), start, stop)
                best = min(best, ms.value)
            return best
        finally:
            self("cuEventDestroy_v2", start)
            self("cuEventDestroy_v2", stop)


def _time(fn, warmup: int, n: int) -> dict:
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e6)
    return summary(samples)


def _function(cu: Driver, ptx: bytes, name: bytes, modules: list):
    mod, fn = ctypes.c_void_p(), ctypes.c_void_p()
    cu("cuModuleLoadData", ctypes.byref(mod), ctypes.c_char_p(ptx))
    modules.append(mod)
    cu("cuModuleGetFunction", ctypes.byref(fn), mod, name)
    return fn


def _alloc(cu: Driver, nbytes: int, buffers: list) -> ctypes.c_uint64:
    ptr = ctypes.c_uint64()
    cu("cuMemAlloc_v2", ctypes.byref(ptr), ctypes.c_size_t(nbytes))
    buffers.append(ptr)
    return ptr


def gpu_floor(quick: bool = False) -> dict:
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
        empty = _function(cu, EMPTY_PTX, b"lenet_empty", modules)
        fma = _function(cu, _fma_ptx(), b"lenet_fma", modules)
        one, null = ctypes.c_uint(1), ctypes.c_void_p()

        # host->host floor: launch + sync, and the two copies of predict(one image)
        dptr = _alloc(cu, IMAGE_BYTES, buffers)
        image = np.zeros(IMAGE_BYTES // 4, np.float32)        # pageable, like a numpy input
        logits = np.zeros(LOGITS_BYTES // 4, np.float32)

        def launch():
            cu("cuLaunchKernel", empty, one, one, one, one, one, one, ctypes.c_uint(0), null, null, null)
            cu("cuCtxSynchronize")

        out = {"device_name": name.value.decode(), "compute_capability": f"{cc[0]}.{cc[1]}",
               "sm_count": sms, "clock_mhz": clock_khz / 1000,
               "launch_sync_us": _time(launch, warmup, n),
               "h2d_3kb_us": _time(lambda: cu("cuMemcpyHtoD_v2", dptr, image.ctypes.data_as(ctypes.c_void_p),
                                              ctypes.c_size_t(IMAGE_BYTES)), warmup, n),
               "d2h_40b_us": _time(lambda: cu("cuMemcpyDtoH_v2", logits.ctypes.data_as(ctypes.c_void_p), dptr,
                                              ctypes.c_size_t(LOGITS_BYTES)), warmup, n)}

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
        out["fp32_fma_per_s_measured"] = blocks * threads * iters * FMA_CHAINS * FMA_UNROLL / (ms / 1e3)
        out["fp32_fma_per_clk_per_sm"] = per_clk
        out["fp32_fma_per_s_peak"] = sms * per_clk * clock_khz * 1e3 if per_clk else None
    finally:
        for ptr in buffers:
            cu("cuMemFree_v2", ptr)
        for mod in modules:
            cu("cuModuleUnload", mod)
        cu("cuDevicePrimaryCtxRelease", dev)
    out["host_to_host_floor_us"] = sum(out[k]["p50"] for k in ("launch_sync_us", "h2d_3kb_us", "d2h_40b_us"))
    out["kernel_arithmetic_us"] = MULTIPLY_ADDS / out["fp32_fma_per_s_measured"] * 1e6
    out["kernel_weights_read_us"] = WEIGHT_BYTES / out["dtod_bytes_per_s"] * 1e6
    out["kernel_floor_us"] = max(out["kernel_arithmetic_us"], out["kernel_weights_read_us"])
    out["how"] = ("CUDA driver API via ctypes. host->host floor: p50 of empty PTX kernel + cuCtxSynchronize, plus "
                  "p50 of synchronous cuMemcpy of 3 136 B in and 40 B out (pageable host memory). kernel floor: "
                  "max(multiply-adds / measured FP32 FMA rate (PTX kernel, 8 independent chains per thread, "
                  "8 blocks of 256 per SM, CUDA events, best of 5), weight bytes / device bandwidth (cuMemcpyDtoD, "
                  "bytes read + written, CUDA events, best run)); peak FMA rate = SMs x FMA/clk/SM x max clock")
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
