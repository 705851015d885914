"""Running a few launches of the .cu kernels on any launcher (the emulator or a GPU), for the
kernel tests and the emulator's planted-bug tests."""
from __future__ import annotations

import numpy as np

from lenet.backends import _cuda_kernels as ck
from lenet.backends import _cuda_net as cn

B = ck.Buf


def run_launches(gpu, launches, inputs, outputs):
    """Upload `inputs` {name: array}, poison `outputs` {name: shape} with NaN, run, download them."""
    bufs = {k: gpu.to_device(np.ascontiguousarray(v).ravel()) for k, v in inputs.items()}
    for k, shape in outputs.items():
        bufs[k] = gpu.empty(int(np.prod(shape)), np.float32)
        gpu.fill(bufs[k], np.nan)
    gpu.run(cn.bind(gpu, launches, bufs))
    return {k: gpu.download(bufs[k], int(np.prod(s))).reshape(s) for k, s in outputs.items()}


def ints(rng, shape, lo=-3, hi=3):
    return rng.integers(lo, hi + 1, shape).astype(np.float32)
