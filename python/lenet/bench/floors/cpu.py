"""The CPU floor: a roofline per image, for one core and for all usable cores, the larger of

  arithmetic  2 293 000 multiply-adds at the measured SGEMM rate: numpy float32 (n x n) @ (n x n),
              best of several, in a child process whose BLAS is held to one thread, and in one
              with all its threads (the all-cores rate is the better of the two). The children
              run with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE cleared, so that OpenBLAS picks the
              kernel for this CPU (a machine may force an older one for old builds' sake; tests
              and CI keep them: LENET_KEEP_BLAS_ENV or CI set), and report which kernel ran
              (threadpoolctl);
  bandwidth   the 1 724 320 B of float32 weights (fc1 alone 1.6 MB) read once, at the rate one
              core reads a buffer of that size over and over (from the cache level it fits in),
              or all cores each reading their share of it (a numba loop whose running sums stay
              in vector registers, no call overhead inside the timed loop). LLVM's vectors, not
              hand-tuned ones: a measured rate, not the hardware's peak. Without numba: no term.

Beside the floor, how contended the host was while it was measured (contention): on each usable
core in turn, many windows of a register-only loop of about one image's time, and the share of them
that ran well over that core's fastest. A busy host (on a VM, most likely another guest on the
core's other hyperthread) slows that share of the work, and a single image split over two cores
waits for both of its halves; SGEMM's millisecond runs average it (csrc/NOTES.md v38). The same
windows of a pass over one core's half of fc1's weights see what the register-only loop cannot: a
host that shares the caches or the memory (v42).

That floor lets fc1's weight reads overlap the convolutions, as batches and training can. One image
cannot: fc1 waits for conv2's output. Its bound is the chained floor, the layers in sequence: conv1,
conv2 and fc2's multiply-adds at the SGEMM rate plus fc1 at the slower of its multiply-adds and its
1.6 MB of weights read (layer_bounds: each layer's term).
"""
from __future__ import annotations

import ctypes
import json
import mmap
import os
import subprocess
import sys
import time
from dataclasses import replace

import numpy as np

from ...model import LAYER_MULTIPLY_ADDS, MULTIPLY_ADDS, NUM_PARAMS, PARAM_SHAPES
from ..child import die_with_parent
from ..results import CpuFloor, PerCores
from . import WEIGHT_BYTES

BLAS_ENV = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")     # cleared for the SGEMM's children
THREAD_ENV = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
FC1_BYTES = 4 * sum(int(np.prod(PARAM_SHAPES[f'fc1.{t}'])) for t in ('weight', 'bias'))   # 1 602 000
READ_LOOP = "sums in registers"    # read.loop in the results; absent: the older loop, its sums in memory
READ_ALIGN = 16                    # floats in a 64 B cache line: where each core's share of the read begins
CONTENTION_WINDOW_US = 16          # a contention window: about one image's forward on two cores
CONTENTION_SLOWER = 1.1            # a window this many times its core's fastest, or more, was slowed
CONTENTION_READ_BYTES = FC1_BYTES // 2 // 64 * 64   # a read window: one pass over one core's half of fc1's weights


def cores() -> int:
    """Cores this process may run on (its CPU affinity)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def blas_info() -> dict | None:
    """threadpoolctl's record of numpy's BLAS: library, version, kernel (architecture), threads."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return None
    for pool in threadpool_info():
        if pool.get("user_api") == "blas":
            return {k: pool.get(k) for k in ("internal_api", "version", "architecture", "num_threads", "prefix")}
    return None


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
    return {"n": n, "runs": runs, "gmacs_per_s": n ** 3 / best / 1e9, "blas": blas_info()}


def blas_env_to_clear(environ=os.environ) -> list[str]:
    """The BLAS-forcing variables the SGEMM's children run without: none in tests or CI."""
    if environ.get("LENET_KEEP_BLAS_ENV") or environ.get("CI"):
        return []
    return [k for k in BLAS_ENV if k in environ]


def sgemm_child(quick: bool, threads: int | None) -> dict:
    """sgemm() in a child process (numpy's BLAS pool is fixed at import), `threads` BLAS threads
    (None: its default), the BLAS-forcing variables cleared; if it fails so, once more with them."""
    cleared = blas_env_to_clear()
    env = {k: v for k, v in os.environ.items() if k not in cleared}
    if threads:
        env.update({k: str(threads) for k in THREAD_ENV})
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__)))),
                                         env.get("PYTHONPATH", "")])
    code = f"import json; from lenet.bench.floors.cpu import sgemm; print(json.dumps(sgemm({quick!r})))"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          preexec_fn=die_with_parent())
    if done.returncode != 0 and cleared:                    # a build that cannot run its own choice
        env.update({k: os.environ[k] for k in cleared})
        cleared = []
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                              preexec_fn=die_with_parent())
    if done.returncode != 0:
        raise RuntimeError(f"SGEMM child failed: {(done.stderr.strip().splitlines() or ['no output'])[-1]}")
    return {**json.loads(done.stdout), "env_cleared": cleared}


def huge_page_array(shape) -> np.ndarray:
    """A float32 array on a 2 MB boundary of memory advised to use transparent huge pages, as cblas
    holds fc1's weights: with 4 KB pages a buffer near the L2's size overflows some of its sets, and
    the read rate would measure that rather than the cache. Plain memory where madvise is missing."""
    size, huge = int(np.prod(shape)) * 4, 2 << 20
    span = -(-size // huge) * huge
    buf = mmap.mmap(-1, span + huge, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    start = -ctypes.addressof(ctypes.c_char.from_buffer(buf)) % huge
    if hasattr(mmap, "MADV_HUGEPAGE"):
        buf.madvise(mmap.MADV_HUGEPAGE, start, span)
    return np.frombuffer(buf, np.float32, int(np.prod(shape)), start).reshape(shape)


def huge_pages(a: np.ndarray) -> bool | None:
    """Whether the memory under `a` is backed by huge pages (Linux's /proc/self/smaps; None elsewhere)."""
    try:
        lines = open("/proc/self/smaps", encoding="ascii").read().splitlines()
    except OSError:
        return None
    addr, mapped = a.__array_interface__["data"][0], None
    for line in lines:
        first = line.split()[0]
        if "-" in first and not first.endswith(":"):
            lo, hi = (int(v, 16) for v in first.split("-"))
            mapped = lo <= addr < hi
        elif mapped and first == "AnonHugePages:":
            return int(line.split()[1]) > 0
    return None


def read_kernels():
    """loops.read and loops.read_shares (one share; all cores' shares at once). Raises ImportError
    without numba."""
    from . import loops
    return loops.read, loops.read_shares


def read_bandwidth(quick: bool = False) -> dict:
    """Bytes/s at which one core, and all usable cores together (each its own share), read a float32
    buffer of the model's weight size over and over (read_kernels). Each share starts on a cache
    line (READ_ALIGN floats): a share off the line splits every other vector load in two. The
    repeats are inside the numba call, best of many short calls. Raises ImportError without numba."""
    import numba
    read, read_shares = read_kernels()
    flat = huge_page_array((NUM_PARAMS,))
    flat[:] = np.random.default_rng(0).random(flat.shape, dtype=np.float32)
    n = max(1, min(cores(), numba.config.NUMBA_NUM_THREADS))
    numba.set_num_threads(n)
    share = NUM_PARAMS // n // READ_ALIGN * READ_ALIGN
    reps, calls = (30, 10) if quick else (30, 40)   # short calls (~1 ms), many: the best one saw the least contention
    out = {"cores": n, "bytes": flat.nbytes, "loop": READ_LOOP, "reps_per_call": reps, "calls": calls,
           "huge_pages": huge_pages(flat)}
    for key, fn, nbytes in (("one_core", lambda r: read(flat, r), flat.nbytes),
                            ("all_cores", lambda r: read_shares(flat, n, share, r), share * n * 4)):
        fn(1)                                # compile and warm the caches
        best = float("inf")
        for _ in range(calls):
            start = time.perf_counter()
            fn(reps)
            best = min(best, time.perf_counter() - start)
        out[f"{key}_bytes_per_s"] = nbytes * reps / best
    return out


def spin_kernel():
    """loops.spin: a loop whose work stays in registers. Raises ImportError without numba."""
    from . import loops
    return loops.spin


def slowed(window_ns: np.ndarray) -> dict:
    """One core's contention from its windows' times: the fastest window (µs), the share of windows
    at CONTENTION_SLOWER times it or more, and the median window over the fastest."""
    best = float(window_ns.min())
    return {"best_us": best / 1e3, "slowed_share": float(np.mean(window_ns >= CONTENTION_SLOWER * best)),
            "p50_over_best": float(np.median(window_ns)) / best}


def contention(quick: bool = False) -> dict:
    """The module docstring's contention: the calling thread pinned to each usable core in turn,
    `windows` timed calls of spin_kernel (3 000 a core, fewer on more than 4 cores) sized to
    CONTENTION_WINDOW_US at its fastest, each core's slowed() (where pinning is refused, or there is
    no affinity, one reading unpinned: cpu None); then as many windows of one pass of the read loop
    over one core's share of fc1's weights (CONTENTION_READ_BYTES, read from the cache levels one
    image reads them from), each core's slowed() of those in its `read`. The spin loop sees what
    shares the core's ports or lowers its clock; the read also what shares its caches and memory
    (csrc/NOTES.md v42). Raises ImportError without numba."""
    spin, clock = spin_kernel(), time.perf_counter_ns
    read, _ = read_kernels()
    share = huge_page_array((CONTENTION_READ_BYTES // 4,))
    share[:] = 1.0

    def timed(fn, *args):                                        # ns, one call
        start = clock()
        fn(*args)
        return clock() - start

    timed(spin, 1), timed(read, share, 1)                        # compile (or load), warm
    affinity = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    windows = 300 if quick else min(3000, max(300, 12_000 // len(affinity or [0])))   # ~0.2 s in all
    n = max(1, int(100_000 * CONTENTION_WINDOW_US * 1e3 / min(timed(spin, 100_000) for _ in range(5))))

    def reading(cpu):
        spun = slowed(np.array([timed(spin, n) for _ in range(windows)], dtype=float))
        reads = np.array([timed(read, share, 1) for _ in range(windows)], dtype=float)
        return {"cpu": cpu, **spun, "read": slowed(reads)}

    per_core = []
    try:
        for cpu in sorted(affinity or ()):
            os.sched_setaffinity(0, {cpu})                       # this thread only
            per_core.append(reading(cpu))
    except OSError:                                              # pinning refused here: one reading, unpinned
        per_core = []
    finally:
        if affinity:
            os.sched_setaffinity(0, affinity)
    per_core = per_core or [reading(None)]
    return {"window_us": CONTENTION_WINDOW_US, "slower": CONTENTION_SLOWER, "windows": windows,
            "iterations": n, "read_bytes": share.nbytes, "cores": per_core}


def layer_bounds(gmacs: float, read_bytes_per_s: float | None) -> dict[str, float]:
    """Each layer's own bound for one image, µs: its multiply-adds at `gmacs` GMAC/s; fc1 the slower
    of that and its weights read at `read_bytes_per_s` (without a read rate, its multiply-adds)."""
    bounds = {name: macs / (gmacs * 1e3) for name, macs in LAYER_MULTIPLY_ADDS.items()}
    if read_bytes_per_s:
        bounds["fc1"] = max(bounds["fc1"], FC1_BYTES / read_bytes_per_s * 1e6)
    return bounds


def roofline(sgemm_gmacs: PerCores, read_bytes_per_s: PerCores | None) -> dict:
    """The floor's terms from the measured rates (the all-cores rates as measured; all cores may
    use one, so the better of one core's and all cores' counts): arithmetic_us, weights_read_us,
    floor_us (the larger of the two: the bound for batches and training, where fc1's reads can
    overlap other images' arithmetic), chained_us (one image, the layers in sequence: the sum of
    layer_bounds_us, all cores' kept), images_per_s_ceiling and the rates used."""
    gmacs = PerCores(sgemm_gmacs.one_core, max(sgemm_gmacs.one_core, sgemm_gmacs.all_cores))
    arithmetic = PerCores(*(MULTIPLY_ADDS / (g * 1e3) for g in (gmacs.one_core, gmacs.all_cores)))
    reads, read_rate = None, {"one_core": None, "all_cores": None}
    if read_bytes_per_s:
        read_rate = {"one_core": read_bytes_per_s.one_core,
                     "all_cores": max(read_bytes_per_s.one_core, read_bytes_per_s.all_cores)}
        reads = PerCores(*(WEIGHT_BYTES / read_rate[k] * 1e6 for k in ("one_core", "all_cores")))
    floor = PerCores(*(max(getattr(arithmetic, k), getattr(reads, k) if reads else 0.0)
                       for k in ("one_core", "all_cores")))
    bounds = {k: layer_bounds(getattr(gmacs, k), read_rate[k]) for k in ("one_core", "all_cores")}
    return {"sgemm_gmacs_per_s": gmacs, "arithmetic_us": arithmetic, "weights_read_us": reads, "floor_us": floor,
            "chained_us": PerCores(*(sum(bounds[k].values()) for k in ("one_core", "all_cores"))),
            "layer_bounds_us": bounds["all_cores"], "images_per_s_ceiling": gmacs.all_cores * 1e9 / MULTIPLY_ADDS}


def rates(f: CpuFloor) -> dict:
    """The rates a floor was computed from: GMAC/s one core and all threads, bytes/s one core and all cores."""
    read = f.read or {}
    return {"sgemm_one_core": f.sgemm_gmacs_per_s.one_core,
            "sgemm_all_threads": f.sgemm_threads_gmacs_per_s or f.sgemm_gmacs_per_s.all_cores,
            "read_one_core": read.get("one_core_bytes_per_s"), "read_all_cores": read.get("all_cores_bytes_per_s")}


def best_of(before: CpuFloor, after: CpuFloor) -> CpuFloor:
    """One floor from two measurements of the same run (before and after its workers): each rate the
    better of the two, so a measurement slowed by a busy moment does not lower the bar; both kept
    in `measured`."""
    a, b = rates(before), rates(after)
    best = {k: max((v for v in (a[k], b[k]) if v is not None), default=None) for k in a}
    reads, read = None, before.read
    if best["read_one_core"] is not None and best["read_all_cores"] is not None:
        reads = PerCores(best["read_one_core"], best["read_all_cores"])
        read = {**(before.read or after.read), "one_core_bytes_per_s": reads.one_core,
                "all_cores_bytes_per_s": reads.all_cores}
    contended = [{**c, "when": when} for when, f in (("before", before), ("after", after)) for c in f.contention or []]
    return replace(before, **roofline(PerCores(best["sgemm_one_core"], best["sgemm_all_threads"]), reads),
                   sgemm_threads_gmacs_per_s=best["sgemm_all_threads"], read=read, contention=contended or None,
                   measured=[{"when": "before", **a}, {"when": "after", **b}],
                   how="; ".join(filter(None, [before.how, "measured before and after the run's workers, each rate "
                                                                  "the better of the two"])))


MOVED_NOTE = 0.05   # the two readings of a floor apart by more than this: said beside the floor (docs/measuring.md)


def moved(f: CpuFloor) -> float | None:
    """How far a run's floor moved between its two measurements (best_of): of the all-threads SGEMM
    and all-cores read rates, the larger 1 - slower / faster; None where it was measured once."""
    if not f.measured or len(f.measured) != 2:
        return None
    pairs = [[m.get(k) for m in f.measured] for k in ("sgemm_all_threads", "read_all_cores")]
    return max((1 - min(p) / max(p) for p in pairs if all(p)), default=None)


def floor(quick: bool = False) -> CpuFloor:
    """The CPU roofline floor per image, one core and all cores (module docstring)."""
    one_core, all_cores = sgemm_child(quick, threads=1), sgemm_child(quick, threads=None)
    try:
        contended = [contention(quick)]        # first: no thread of this process's numba pool spins yet
        bw, bw_reason = read_bandwidth(quick), None
        reads = PerCores(bw["one_core_bytes_per_s"], bw["all_cores_bytes_per_s"])
    except ImportError as exc:
        bw, reads, bw_reason = None, None, f"weights-read term not measured: numba not installed ({exc})"
        contended = None
    return CpuFloor(
        multiply_adds_per_image=MULTIPLY_ADDS, weight_bytes=WEIGHT_BYTES, cores=cores(),
        sgemm_n=all_cores["n"], sgemm_runs=all_cores["runs"], sgemm_threads_gmacs_per_s=all_cores["gmacs_per_s"],
        blas=all_cores["blas"], blas_env_cleared=all_cores["env_cleared"], read=bw, read_reason=bw_reason,
        contention=contended,
        **roofline(PerCores(one_core["gmacs_per_s"], all_cores["gmacs_per_s"]), reads),
        how="floor = max(arithmetic, weights read), per image. arithmetic: multiply-adds at the best numpy "
            "float32 (n x n) @ (n x n) rate, its BLAS on one thread or the better of that and all its threads "
            "(child processes, BLAS-forcing variables cleared: blas_env_cleared; the kernel that ran: blas). "
            "weights read: weight bytes at the rate one core (or the better of that and all cores, each its "
            "share) re-reads a buffer of that size (numba loop, best call). chained_us (one image, the layers in "
            "sequence): conv1, conv2 and fc2's multiply-adds at the SGEMM rate plus fc1 at the slower of its "
            "multiply-adds and its weights read, since fc1 needs conv2's output (layer_bounds_us: each term, all "
            "cores)")
