"""The CPU floor's numba loops, at module level so that numba's disk cache keeps their machine code
between processes (a closure's is compiled again in each: csrc/NOTES.md v42). Every bench run and
every CPU latency worker would otherwise pay their compile (about 3 s a run, 0.5 s a worker).
Imported by cpu.py only when numba is there; the cache sits beside this file (NUMBA_CACHE_DIR if
set), keyed by the CPU, so another machine's is never used.

  read         one running sum over a contiguous share; LLVM keeps it in vector registers as
               several independent sums (fastmath), so the loop issues loads and adds and stores
               nothing
  read_shares  every core its share at once (prange)
  spin         16 independent multiply-add chains in registers, enough to keep the core's
               floating-point ports busy, so that whatever shares the core slows it
"""
import numpy as np
from numba import njit, prange


@njit(fastmath=True, cache=True)
def read(x, reps):                       # x: one contiguous share -> the sum of what it read
    total = np.float32(0)
    for _ in range(reps):
        for k in range(x.size):
            total += x[k]
    return total


@njit(fastmath=True, parallel=True, cache=True)
def read_shares(x, parts, share, reps):
    sums = np.zeros(parts, np.float32)
    for p in prange(parts):
        sums[p] = read(x[p * share:(p + 1) * share], reps)
    return sums.sum()


@njit(cache=True)
def spin(n):
    a0, a1, a2, a3, a4, a5, a6, a7 = 1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7
    b0, b1, b2, b3, b4, b5, b6, b7 = 1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7
    for _ in range(n):
        a0, a1, a2, a3 = a0 * 0.999 + 0.001, a1 * 0.999 + 0.001, a2 * 0.999 + 0.001, a3 * 0.999 + 0.001
        a4, a5, a6, a7 = a4 * 0.999 + 0.001, a5 * 0.999 + 0.001, a6 * 0.999 + 0.001, a7 * 0.999 + 0.001
        b0, b1, b2, b3 = b0 * 0.998 + 0.002, b1 * 0.998 + 0.002, b2 * 0.998 + 0.002, b3 * 0.998 + 0.002
        b4, b5, b6, b7 = b4 * 0.998 + 0.002, b5 * 0.998 + 0.002, b6 * 0.998 + 0.002, b7 * 0.998 + 0.002
    return a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + b0 + b1 + b2 + b3 + b4 + b5 + b6 + b7
