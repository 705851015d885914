"""The raw-kernel forward at batch 1, 7 and 64, for compute-sanitizer (bench/gpu-check.sh): every
GPU variant of the cupy backend (the hand-written CUDA C kernels) and of numba, each checked
against the float64 reference (lenet.check).

    compute-sanitizer --tool memcheck --error-exitcode 1 python bench/sanitize_forward.py

The variants are read from the backends, so a renamed one is never missed. One line per run and
batch; exit status 1 when a run is unavailable or disagrees with the reference.
"""
import sys

import numpy as np

import lenet
from lenet.check import logits_reason, reference_logits, relative_error

BACKENDS = ("cupy", "numba")
BATCHES = (1, 7, 64)


def runs() -> list[tuple[str, str]]:
    """(backend, variant) for every GPU variant of BACKENDS."""
    return [(backend, variant) for backend in BACKENDS for variant in lenet.backends.variants(backend, "gpu")]


def check_forward(name: str, net, params, images) -> int:
    """The forward of `net` at each of BATCHES against the reference, one line each; the failures."""
    failures = 0
    for batch in BATCHES:
        x = np.ascontiguousarray(images[:batch])
        got, want = net.predict(x), reference_logits(params, x)
        reason = logits_reason(got, want)
        err = relative_error(got, want) if np.shape(got) == want.shape else float("nan")
        print(f"{name} batch {batch}: max|Δ|/max|ref| {err:.2e} "
              f"{'ok' if reason is None else 'WRONG: ' + reason}", flush=True)
        failures += reason is not None
    net.synchronize()
    return failures


def main() -> int:
    params, images = lenet.weights.load(), lenet.data.embedded().test_x
    failures = 0
    for backend, variant in runs():
        reason = lenet.backends.unavailable(backend, "gpu")
        if reason:
            print(f"{backend} [{variant}]: unavailable: {reason}", flush=True)
            failures += 1
            continue
        failures += check_forward(f"{backend} [{variant}]", lenet.load(backend, "gpu", params, variant), params, images)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
