"""The project's file access: regular files only, read without blocking on a FIFO (every reader
goes through open_regular), JSON parsed with one rule for malformed and too deeply nested text,
written atomically (a failed export never destroys the previous file), and every OS error said
plainly."""
from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import BinaryIO

from .errors import InputError, LenetError

NOT_REGULAR = {stat.S_IFDIR: "a directory", stat.S_IFIFO: "a FIFO (named pipe)", stat.S_IFCHR: "a character device",
               stat.S_IFBLK: "a block device", stat.S_IFSOCK: "a socket"}
PLAIN = {errno.EACCES: "permission denied", errno.EPERM: "permission denied",
         errno.ELOOP: "a symlink loop (too many levels of symbolic links)", errno.ENAMETOOLONG: "file name too long",
         errno.ENOTDIR: "a part of its path is not a directory", errno.EEXIST: "a part of its path is not a directory"}


def os_reason(exc: OSError, path=None, missing: str = "no such file") -> str:
    """What went wrong, in a few plain words (`missing` for ENOENT); a relative path under a
    deleted working directory says so."""
    if path is not None and not Path(path).is_absolute() and not cwd_exists():
        return "the working directory no longer exists"
    return missing if exc.errno == errno.ENOENT else PLAIN.get(exc.errno) or exc.strerror or str(exc)


def write_reason(exc: OSError, directory: Path) -> str:
    """os_reason for a file being made in `directory` (made first where missing); but ENOENT where
    the nearest directory that exists takes no new files either (/proc) says so, not "no such file"."""
    if exc.errno == errno.ENOENT and cwd_exists():
        existing = next((d for d in (directory, *directory.parents) if d.exists()), None)
        try:
            if existing is not None and existing.is_dir():
                tempfile.TemporaryFile(dir=existing).close()
        except FileNotFoundError:
            return f"{existing} takes no new files"
        except OSError:
            pass
    return os_reason(exc, directory)


def cwd_exists() -> bool:
    try:
        os.getcwd()
    except FileNotFoundError:
        return False
    return True


def not_regular(mode: int) -> str | None:
    """What a file of this st_mode is, when it is not a regular file; else None."""
    return None if stat.S_ISREG(mode) else NOT_REGULAR.get(stat.S_IFMT(mode), "not a regular file")


def open_regular(path, error: type[LenetError]) -> BinaryIO:
    """`path` opened for binary reading if it is a regular file, else `error("<path>: why")`.
    Checked before opening (a FIFO or device is never opened) and again on the open file."""
    path = Path(path)
    try:
        kind = not_regular(os.stat(path).st_mode)
        if kind is None:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)   # never waits for a writer
            kind = not_regular(os.fstat(fd).st_mode)                          # swapped in since the stat
            if kind is not None:
                os.close(fd)
    except OSError as exc:
        raise error(f"{path}: {os_reason(exc, path)}") from None
    if kind is not None:
        raise error(f"{path}: is {kind}, not a regular file")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def read_regular(path, error: type[LenetError], limit: int | None = None) -> bytes:
    """The bytes of regular file `path` of at most `limit` bytes (checked before reading); else
    `error("<path>: why")` (open_regular's checks)."""
    with open_regular(path, error) as f:
        try:
            size = os.fstat(f.fileno()).st_size
            if limit is not None and size > limit:
                raise error(f"{path}: {size:,} bytes, more than the {limit:,} this reader accepts")
            return f.read()
        except OSError as exc:
            raise error(f"{path}: cannot read it ({os_reason(exc)})") from None


MAX_JSON_DEPTH = 64             # the project's own files nest 5 deep at most
MAX_JSON_BYTES = 256 * 2**20    # a whole benchmark run's results.json is 4 MB


def parse_json(text: bytes | str):
    """The value of a JSON text; ValueError saying what is wrong, also for invalid UTF-8 and for
    nesting deeper than MAX_JSON_DEPTH (which would otherwise fail as a RecursionError when it is
    parsed or written out again)."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise ValueError(f"nested more than {MAX_JSON_DEPTH} levels deep") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    pending = [(value, 1)]
    while pending:                      # iteratively: the check itself must not recurse
        item, depth = pending.pop()
        if isinstance(item, (dict, list)):
            if depth > MAX_JSON_DEPTH:
                raise ValueError(f"nested more than {MAX_JSON_DEPTH} levels deep")
            pending += [(v, depth + 1) for v in (item.values() if isinstance(item, dict) else item)
                        if isinstance(v, (dict, list))]
    return value


def read_json(path, error: type[LenetError]):
    """The JSON value in regular file `path`; else `error("<path>: why")`: not a regular file,
    unreadable, larger than MAX_JSON_BYTES, empty, malformed or nested too deep."""
    text = read_regular(path, error, MAX_JSON_BYTES)
    if not text.strip():
        raise error(f"{path}: empty file")
    try:
        return parse_json(text)
    except ValueError as exc:
        raise error(f"{path}: not valid JSON ({' '.join(str(exc).split())})") from None


def atomic_write(path, data: bytes) -> Path:
    """Write `data` to `path` through a temporary file in the same directory, then rename.
    The new file gets the old file's permissions, or the umask's, not mkstemp's 0600.
    An existing `path` that is not a regular file (a device, a FIFO, ...) is never replaced."""
    path = Path(path)
    refuse_non_regular(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise OSError(exc.errno, f"cannot write {path}: {write_reason(exc, path.parent)}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, path.stat().st_mode & 0o777 if path.exists() else 0o666 & ~_umask())
        os.replace(tmp, path)
    except OSError as exc:                 # named by the file asked for, never the temporary one
        Path(tmp).unlink(missing_ok=True)
        raise OSError(exc.errno, f"cannot write {path}: {write_reason(exc, path.parent)}") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def check_writable(path, size: int = 0) -> Path:
    """`path` if a file of `size` bytes can be written there (its directory exists or is created,
    is writable and has room for it, and `path` is absent or a regular file); else an InputError
    saying why. Before long work."""
    path = Path(path)
    refuse_non_regular(path)
    try:
        _probe(path.parent)
        free = shutil.disk_usage(path.parent).free
    except OSError as exc:
        raise InputError(f"cannot write {path}: {write_reason(exc, path.parent)}") from None
    if free < size:
        raise InputError(f"cannot write {path}: {free:,} bytes free on its file system, {size:,} needed")
    return path


def writable_directory(path) -> Path:
    """`path` if new files can be written in it (made, with its parents, where missing); else an
    InputError saying why. Before long work."""
    directory = Path(path)
    try:
        _probe(directory)
    except OSError as exc:
        raise InputError(f"cannot write to output directory {path}: {write_reason(exc, directory)}") from None
    return directory


def writable_outputs(directory, file=None, take=None) -> tuple[Path, object]:
    """check_writable(file) where one is given, writable_directory(directory), then take(directory)
    where given (a lock on it), all or nothing: where a step fails, the directories the steps before
    it made are removed again. Returns the directory and what take returned."""
    directory = Path(directory)
    made = set(_absent(directory)) | (set(_absent(Path(file).parent)) if file is not None else set())
    try:
        if file is not None:
            check_writable(file)
        writable_directory(directory)
        return directory, take(directory) if take is not None else None
    except InputError:
        for absent in sorted(made, key=lambda d: len(d.parts), reverse=True):   # deepest first; only empty ones go
            with contextlib.suppress(OSError):
                absent.rmdir()
        raise


def _absent(directory: Path) -> list[Path]:
    """`directory` and those of its parents that do not exist, deepest first."""
    return [d for d in (directory, *directory.parents) if not d.exists()]


def _probe(directory: Path) -> None:
    """Make `directory` where missing and a temporary file in it: an OSError where either fails."""
    directory.mkdir(parents=True, exist_ok=True)
    tempfile.TemporaryFile(dir=directory).close()


def refuse_non_regular(path: Path) -> None:
    """An InputError if `path` exists and is not a regular file: a write would replace it."""
    try:
        kind = not_regular(os.stat(path).st_mode)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise InputError(f"cannot write {path}: {os_reason(exc, path)}") from None
    if kind is not None:
        raise InputError(f"cannot write {path}: it is {kind}, not a regular file")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
