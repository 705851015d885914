"""fork() and the backends whose thread pools do not survive it.

A net whose `fork_safe` is False (torch, TensorFlow, Keras and numba on the CPU, measured: the
child hangs, or numba's OpenMP layer kills it; every GPU net, by CUDA's rule that a context does
not survive fork()) marks its runtime as loaded: the backend itself, or for Keras the framework
under it (Keras on torch shares torch's pools). In a fork() child of that process every net on
that runtime, old or new, is refused with one clear error instead of a hang.
"""
from __future__ import annotations

import os

from .errors import UnavailableError

loaded: set[str] = set()       # runtimes with a fork-unsafe net loaded in this process
refused: set[str] = set()      # in a fork() child: those its parent (or theirs) had loaded


def runtime(backend: str, variant: str | None) -> str:
    """Whose thread pools a net of `backend` and `variant` runs on ("torch/call": Keras on torch)."""
    return variant.split("/")[0] if backend == "keras" and variant else backend


def note_loaded(net) -> None:
    if not net.fork_safe:
        loaded.add(runtime(net.backend, net.variant))


def check(backend: str, variant: str | None) -> None:
    """An UnavailableError when a net of `backend` and `variant` cannot run in this fork() child."""
    used = runtime(backend, variant)
    if used in refused:
        raise UnavailableError(
            f"{backend}: cannot be used in a fork() child of a process that loaded {used} (its thread pools "
            f"or device context do not survive fork()); use multiprocessing's 'spawn' or 'forkserver' start method")


def _in_child() -> None:
    refused.update(loaded)


os.register_at_fork(after_in_child=_in_child)
