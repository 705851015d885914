"""Atomic file writes: a failed export never destroys the previous file."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .errors import InputError


def atomic_write(path, data: bytes) -> Path:
    """Write `data` to `path` through a temporary file in the same directory, then rename.
    The new file gets the old file's permissions, or the umask's, not mkstemp's 0600."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise OSError(exc.errno, f"cannot write {path}: {exc.strerror}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, path.stat().st_mode & 0o777 if path.exists() else 0o666 & ~_umask())
        os.replace(tmp, path)
    except OSError as exc:                 # named by the file asked for, never the temporary one
        Path(tmp).unlink(missing_ok=True)
        raise OSError(exc.errno, f"cannot write {path}: {exc.strerror}") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def check_writable(path) -> Path:
    """`path` if a file can be written there (its directory exists or is created, is writable,
    and `path` is not a directory); else an InputError saying why. For checks before long work."""
    path = Path(path)
    if path.is_dir():
        raise InputError(f"cannot write {path}: it is a directory")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=path.parent).close()
    except OSError as exc:
        raise InputError(f"cannot write {path}: {exc.strerror or exc}") from None
    return path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
