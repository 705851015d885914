"""fork() and the backends whose thread pools do not survive it.

A net whose `fork_safe` is False (torch, TensorFlow, Keras and numba on the CPU, measured: the
child hangs, or numba's OpenMP layer kills it; every GPU net, by CUDA's rule that a context does
not survive fork()) marks its backend as loaded. In a fork() child of that process the backend is
refused, its old nets and new ones alike, with one clear error instead of a hang.
"""
from __future__ import annotations

import os

from .errors import UnavailableError

loaded: set[str] = set()       # backends with a fork-unsafe net loaded in this process
refused: set[str] = set()      # in a fork() child: those its parent (or theirs) had loaded


def note_loaded(net) -> None:
    if not net.fork_safe:
        loaded.add(net.backend)


def check(backend: str) -> None:
    """An UnavailableError when `backend` cannot run in this fork() child."""
    if backend in refused:
        raise UnavailableError(
            f"{backend}: cannot be used in a fork() child of a process that loaded it (its thread pools or "
            f"device context do not survive fork()); use multiprocessing's 'spawn' or 'forkserver' start method")


def _in_child() -> None:
    refused.update(loaded)


os.register_at_fork(after_in_child=_in_child)
