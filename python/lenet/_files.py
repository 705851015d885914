"""Atomic file writes: a failed export never destroys the previous file."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path


def atomic_write(path, data: bytes) -> Path:
    """Write `data` to `path` through a temporary file in the same directory, then rename.
    The new file gets the old file's permissions, or the umask's, not mkstemp's 0600."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, path.stat().st_mode & 0o777 if path.exists() else 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
