"""Floors: what no LeNet backend on this machine can beat, measured in the same run, one module
per device (cpu.py, gpu.py; gpu.py's kernels in ptx.py).

Run as `python -m lenet.bench.floors [--quick] [--no-gpu]` it prints the results.Floors as JSON.
"""
from __future__ import annotations

from ...model import MULTIPLY_ADDS, NUM_PARAMS
from ..results import Floors

IMAGE_BYTES = 1 * 28 * 28 * 4      # 3 136 B
LOGITS_BYTES = 10 * 4              # 40 B
WEIGHT_BYTES = NUM_PARAMS * 4      # 1 724 320 B
__all__ = ["IMAGE_BYTES", "LOGITS_BYTES", "MULTIPLY_ADDS", "WEIGHT_BYTES", "measure"]


def measure(quick: bool = False, gpu: bool = True) -> Floors:
    """The CPU floor, and the GPU floors where a GPU can be used (else why not)."""
    from ...backends._cuda_driver import cuda_unavailable
    from . import cpu, gpu as gpu_floors

    floors = Floors(cpu=cpu.floor(quick))
    floors.gpu_reason = cuda_unavailable() if gpu else "no GPU backend in this run"
    if floors.gpu_reason:
        return floors
    try:
        floors.gpu = gpu_floors.floor(quick)
    except (OSError, RuntimeError, AttributeError) as exc:
        floors.gpu_reason = " ".join(str(exc).split())
    return floors
