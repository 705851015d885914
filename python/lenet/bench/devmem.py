"""Device memory over many predictions: the leak check for every GPU backend.

    python -m lenet.bench.devmem [--backend NAME|all] [--predictions 10000] [--bound-mib 4] [--json FILE]

Each backend runs in a fresh process with its default variant: load, warm up, read the device's
free memory (cuMemGetInfo, CUDA driver API), run the single-image predictions on real digits,
synchronize, read it again (and at ten points between). Flat: free memory fell by no more than
the bound (device memory comes in 2 MiB pages). Exit status: 0 all flat, 1 a backend grew or
failed, 2 bad arguments or no GPU.
"""
from __future__ import annotations

import argparse
import ctypes
import gc
import json
import subprocess
import sys

from .. import backends, data, load, weights
from .._cli import Parser, guarded, number
from .._files import atomic_write, check_writable
from ..errors import UnavailableError
from ..backends._cuda_driver import Driver, cuda_unavailable

WARMUP = 200
CHECKPOINTS = 10


class FreeMemory:
    """Free memory of device 0, read in its primary context (the one the frameworks share), which
    it holds from creation to close() so that reading does not create or destroy a context."""

    def __init__(self):
        self.cu = Driver()
        self.cu("cuInit", 0)
        self.dev, self.ctx = ctypes.c_int(), ctypes.c_void_p()
        self.cu("cuDeviceGet", ctypes.byref(self.dev), 0)
        self.cu("cuDevicePrimaryCtxRetain", ctypes.byref(self.ctx), self.dev)

    def __call__(self) -> int:
        self.cu("cuCtxPushCurrent_v2", self.ctx)
        try:
            free, total = ctypes.c_size_t(), ctypes.c_size_t()
            self.cu("cuMemGetInfo_v2", ctypes.byref(free), ctypes.byref(total))
            return free.value
        finally:
            self.cu("cuCtxPopCurrent_v2", ctypes.byref(ctypes.c_void_p()))

    def close(self) -> None:
        self.cu("cuDevicePrimaryCtxRelease", self.dev)


def measure_one(name: str, predictions: int) -> dict:
    """One backend in this process: free device memory before and after `predictions` predictions."""
    xs = data.embedded().test_x
    net = load(name, "gpu", weights.load())
    free = FreeMemory()
    try:
        for i in range(WARMUP):
            net.predict(xs[i % len(xs):i % len(xs) + 1])
        net.synchronize()
        gc.collect()
        before, trace = free(), []
        every = max(1, predictions // CHECKPOINTS)
        for i in range(predictions):
            net.predict(xs[i % len(xs):i % len(xs) + 1])
            if (i + 1) % every == 0 or i + 1 == predictions:
                net.synchronize()
                trace.append(before - free())
    finally:
        free.close()
    return {"backend": name, "variant": net.variant, "predictions": predictions, "free_before_bytes": before,
            "growth_bytes": trace[-1], "growth_trace_bytes": trace}


def measure_in_child(name: str, predictions: int, bound: int, timeout: float) -> dict:
    """measure_one in a fresh process; its row, with "flat" and "reason"."""
    cmd = [sys.executable, "-m", "lenet.bench.devmem", "--one", name, "--predictions", str(predictions)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"backend": name, "flat": False, "reason": f"timed out after {timeout:g} s"}
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        return {"backend": name, "flat": False, "reason": last}
    row = json.loads(done.stdout.strip().splitlines()[-1])
    row["flat"] = row["growth_bytes"] <= bound
    row["reason"] = None if row["flat"] else f"device memory grew by {row['growth_bytes'] / 2**20:.1f} MiB"
    return row


def show(row: dict) -> str:
    grown = f"{row['growth_bytes'] / 2**20:+.2f} MiB over {row['predictions']} predictions" if "growth_bytes" in row else ""
    return f"{row['backend']:12} {'flat' if row['flat'] else 'FAIL'}  {grown}  {row['reason'] or ''}".rstrip()


def parser() -> Parser:
    p = Parser(prog="python -m lenet.bench.devmem", description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", default="all", help="a backend name or 'all' GPU backends that can run here")
    p.add_argument("--predictions", type=number(int, 1, 10_000_000), default=10_000,
                   help="single-image predictions per backend, 1..10000000 (default 10000)")
    p.add_argument("--bound-mib", type=number(float, 0, 1024), default=4.0,
                   help="largest growth that counts as flat, in [0, 1024] MiB (default 4 MiB)")
    p.add_argument("--timeout", type=number(float, 0, 86400, above=True), default=120.0,
                   help="seconds per backend, in (0, 86400] (default 120)")
    p.add_argument("--json", metavar="FILE", default=None, help="also write the rows here")
    p.add_argument("--one", metavar="NAME", default=None, help=argparse.SUPPRESS)   # the child process of one backend
    return p


def main(argv=None) -> int:
    args = parser().parse_args(sys.argv[1:] if argv is None else argv)
    if args.one:
        print(json.dumps(measure_one(args.one, args.predictions)))
        return 0
    if args.json:
        check_writable(args.json)                    # before the checks, not after
    reason = cuda_unavailable()
    if reason:
        raise UnavailableError(f"no GPU to check: {reason}")
    if args.backend == "all":
        names = [n for n in backends.names() if not backends.unavailable(n, "gpu")]
    else:
        why = backends.unavailable(args.backend, "gpu")
        if why:
            raise UnavailableError(f"{args.backend} on gpu: {why}")
        names = [args.backend]
    rows = []
    for name in names:          # each row shown and written as it ends: a cut run keeps the backends it finished
        rows.append(measure_in_child(name, args.predictions, int(args.bound_mib * 2**20), args.timeout))
        print(show(rows[-1]), flush=True)
        if args.json:
            atomic_write(args.json, (json.dumps(rows, indent=1) + "\n").encode())
    return 0 if all(r["flat"] for r in rows) else 1


run = guarded(main)

if __name__ == "__main__":
    sys.exit(run())
