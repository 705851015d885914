"""The raw-kernel forward at batch 1, 7 and 64, for compute-sanitizer (bench/gpu-check.sh): every
GPU variant of the cupy backend (the hand-written CUDA C kernels) and of numba, each checked
against the float64 reference (lenet.check).

    compute-sanitizer --tool memcheck --error-exitcode 1 python bench/sanitize_forward.py
    python bench/sanitize_forward.py --emu --batches 1,7      # cupy's kernel versions on the CPU emulator

The variants are read from the backends, so a renamed one is never missed. CuPy's memory pool is
turned off first: inside one pooled block memcheck cannot see an overrun. --emu runs the kernel
versions through the CPU emulator of CUDA semantics instead (lenet.emu, whose own race, bounds and
barrier checks stand in for the sanitizer; cupy's graph variants replay the same kernels and numba's
run on numba's simulator elsewhere); never timed. One line per run and batch; exit status 1 when a
run is unavailable or disagrees with the reference, 2 for bad arguments.
"""
import argparse
import sys

import numpy as np

import lenet
from lenet.check import logits_reason, reference_logits, relative_error

BACKENDS = ("cupy", "numba")
BATCHES = (1, 7, 64)


def runs(names=BACKENDS) -> list[tuple[str, str]]:
    """(backend, variant) for every GPU variant of `names`."""
    return [(backend, variant) for backend in names for variant in lenet.backends.variants(backend, "gpu")]


def plain_allocations() -> bool:
    """CuPy's device and pinned memory pools off, so each allocation is its own cudaMalloc that the
    sanitizer bounds; False where CuPy is not installed."""
    try:
        import cupy
    except ImportError:
        return False
    cupy.cuda.set_allocator(None)
    cupy.cuda.set_pinned_memory_allocator(None)
    return True


def check_forward(name: str, net, params, images, batches=BATCHES) -> int:
    """The forward of `net` at each of `batches` against the reference, one line each; the failures."""
    failures = 0
    for batch in batches:
        x = np.ascontiguousarray(images[:batch])
        got, want = net.predict(x), reference_logits(params, x)
        reason = logits_reason(got, want)
        err = relative_error(got, want) if np.shape(got) == want.shape else float("nan")
        print(f"{name} batch {batch}: max|Δ|/max|ref| {err:.2e} "
              f"{'ok' if reason is None else 'WRONG: ' + reason}", flush=True)
        failures += reason is not None
    net.synchronize()
    return failures


def on_emulator(params, images, batches) -> int:
    """cupy's kernel versions through the emulator's launcher (EmuGPU); the failures."""
    from lenet.backends import _cuda_kernels, _cuda_net
    from lenet.emu import build
    from lenet.emu.launcher import EmuGPU

    if reason := build.unavailable():
        print(f"emulator: unavailable: {reason}", flush=True)
        return 1
    gpu = EmuGPU()
    return sum(check_forward(f"cupy [{v}] on the CPU emulator", _cuda_net.CudaNet("emu", gpu, params, v), params, images,
                             batches) for backend, v in runs() if backend == "cupy" and v in _cuda_kernels.VERSIONS)


def parse_batches(text: str) -> tuple:
    try:
        batches = tuple(int(b) for b in text.split(","))
    except ValueError:
        batches = ()
    if not batches or min(batches) < 1 or max(batches) > 1000:
        raise argparse.ArgumentTypeError(f"expected comma-separated batch sizes from 1 to 1000, got {text!r}")
    return batches


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="bench/sanitize_forward.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--emu", action="store_true", help="cupy's kernel versions on the CPU emulator (no GPU needed)")
    p.add_argument("--batches", type=parse_batches, default=BATCHES, help="default: 1,7,64")
    p.add_argument("--backend", choices=BACKENDS, default=None, help="one of them only (default: both)")
    args = p.parse_args(argv)
    params, images = lenet.weights.load(), lenet.data.embedded().test_x
    if args.emu:
        return 1 if on_emulator(params, images, args.batches) else 0
    plain_allocations()
    failures = 0
    for backend, variant in runs((args.backend,) if args.backend else BACKENDS):
        reason = lenet.backends.unavailable(backend, "gpu")
        if reason:
            print(f"{backend} [{variant}]: unavailable: {reason}", flush=True)
            failures += 1
            continue
        failures += check_forward(f"{backend} [{variant}]", lenet.load(backend, "gpu", params, variant), params, images,
                                  args.batches)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
