"""The raw-kernel forward at batch 1, 7 and 64, for compute-sanitizer (bench/gpu-check.sh):
CuPy variants 1, 2, 3 and Numba's GPU variants per-layer and fused, each checked against the float64
reference.

    compute-sanitizer --tool memcheck --error-exitcode 1 python bench/sanitize_forward.py

Exit status 1 when a run is unavailable or disagrees with the reference.
"""
import sys

import lenet
import numpy as np
from lenet.backends.numpy import FORWARD_RTOL, Reference, relative_error

RUNS = [("cupy", v) for v in ("1", "2", "3")] + [("numba", v) for v in ("per-layer", "fused")]
BATCHES = (1, 7, 64)


def main() -> int:
    params = lenet.weights.load()
    images = lenet.data.embedded().test_x
    reference = Reference(params, np.float64)
    bad = 0
    for backend, variant in RUNS:
        reason = lenet.backends.unavailable(backend, "gpu")
        if reason:
            print(f"{backend} [{variant}]: unavailable: {reason}")
            bad += 1
            continue
        net = lenet.load(backend, "gpu", params, variant)
        for batch in BATCHES:
            x = np.ascontiguousarray(images[:batch])
            got, want = net.predict(x), reference.forward(x)
            err = relative_error(got, want)
            ok = err <= FORWARD_RTOL and (got.argmax(1) == want.argmax(1)).all()
            print(f"{backend} [{variant}] batch {batch}: max|Δ|/max|ref| {err:.2e} {'ok' if ok else 'WRONG'}")
            bad += not ok
        net.synchronize()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
