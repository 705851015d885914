"""Child processes that die with their parent: a benchmark killed by SIGKILL or SIGTERM leaves
no worker running on alone.
"""
from __future__ import annotations

import ctypes
import os
import signal

PR_SET_PDEATHSIG = 1       # <linux/prctl.h>


def die_with_parent():
    """A preexec_fn for subprocess: the child gets SIGKILL when the process that started it ends
    (Linux prctl); if that has already happened, it exits at once."""
    parent = os.getpid()              # this process: the child's parent

    def preexec():
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0 or os.getppid() != parent:
            os._exit(1)
    return preexec
