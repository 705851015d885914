"""Compile C++ sources into a shared object, cached by content: the emulator's runtime, each
kernel module, and any other module that links the runtime (the cuDNN stand-in of the tests, tests/cudnn_standin).

The cache lives in $LENET_EMU_CACHE, else $XDG_CACHE_HOME/lenet/emu, else ~/.cache/lenet/emu,
one directory per object file and one per shared object, named by a SHA-256 over everything that
goes in: the compiler and its version, every flag, the source text and every file it includes
that the caller names (for a link: the objects, whose names carry their digests). Sources compile
side by side, one per core, each into its own object, so an edit recompiles only its file. Each
build happens in a temporary directory renamed into place when complete, so a reader never sees
half a build, and two processes building the same thing at once both succeed (the second rename
loses and its copy is dropped).
"""
from __future__ import annotations

import functools
import hashlib
import os
import platform
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from ..errors import LenetError, UnavailableError


T = TypeVar("T")


class BuildError(LenetError, RuntimeError):
    """The compiler rejected a source; the message carries its first errors."""


def compiler() -> str:
    return os.environ.get("CXX", "g++")


def unavailable() -> str | None:
    """Why the emulator cannot be built here (one line), or None."""
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        return f"the CPU emulator of CUDA semantics needs Linux on x86-64 (this is {platform.system()} {platform.machine()})"
    if shutil.which(compiler()) is None:
        return f"{compiler()} not found on PATH: the CPU emulator of CUDA semantics compiles with it (apt-get install g++)"
    return None


def require() -> None:
    if reason := unavailable():
        raise UnavailableError(reason)


@functools.cache
def _version(tool: str) -> str:
    """The first line of `tool --version`: part of every cache key that tool's output goes into."""
    done = subprocess.run([tool, "--version"], capture_output=True, text=True)
    return f"{shutil.which(tool)}: {(done.stdout or done.stderr).strip()}"


def cache_root() -> Path:
    if root := os.environ.get("LENET_EMU_CACHE"):
        return Path(root)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "lenet" / "emu"


def _cache_named(root: Path) -> str:
    return f"LENET_EMU_CACHE={root}" if os.environ.get("LENET_EMU_CACHE") else f"the emulator's build cache {root}"


def _make_root(root: Path) -> None:
    """Create the cache directory, or say in one line what is wrong with its path."""
    if root.is_symlink() and not root.exists():
        raise BuildError(f"{_cache_named(root)} is a symbolic link to {os.readlink(root)}, which does not exist: "
                         "create its target or point LENET_EMU_CACHE at a directory")
    if root.exists() and not root.is_dir():
        raise BuildError(f"{_cache_named(root)} is a file, not a directory: point LENET_EMU_CACHE at a directory")
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise BuildError(f"{_cache_named(root)} cannot be created: {err.strerror}"
                         + (f" ({err.filename})" if err.filename and Path(err.filename) != root else "")) from None


def key(*parts: str | bytes | Path) -> str:
    """A digest of strings, bytes and files (by name and content)."""
    h = hashlib.sha256()
    for part in parts:
        data = (str(part).encode() + b"\0" + part.read_bytes()) if isinstance(part, Path) else \
            part if isinstance(part, bytes) else part.encode()
        h.update(len(data).to_bytes(8, "little") + data)
    return h.hexdigest()[:24]


def cached(name: str, digest: str, make: Callable[[Path], None]) -> Path:
    """The directory `name-digest` of the cache, made by `make(directory)` if it is not there yet."""
    root = cache_root()
    final = root / f"{name}-{digest}"
    if final.is_dir():
        return final
    _make_root(root)
    work = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=root))
    try:
        make(work)
        try:
            os.rename(work, final)
        except OSError:                     # another process finished the same build first
            if not final.is_dir():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return final


def run(command: list[str], what: str, work: Path | None = None) -> None:
    """Run a compiler; on failure raise BuildError with its error lines (paths in `work` made relative)."""
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        text = done.stderr.replace(f"{work}/", "") if work else done.stderr
        errors = [line for line in text.splitlines() if re.search(r"\berror\b:|undefined reference", line)]
        raise BuildError(f"{Path(command[0]).name} failed on {what}: " + "\n".join((errors or text.splitlines())[:20]))


def object_file(source: str, text: str, *, headers: Mapping[str, str] = {}, flags: Iterable[str] = (),
                depends: Iterable[Path] = ()) -> Path:
    """`text` (the C++ of file `source`) compiled with `flags` into a cached object file. `headers`
    {file name: text} are written beside it (for it to #include); `depends` are other files it
    includes. Both are hashed into the key, not compiled."""
    require()
    cxx, flags = compiler(), list(flags)
    digest = key(_version(cxx), "\0".join(flags), f"{source}\0{text}",
                 *(f"{file}\0{header}" for file, header in sorted(headers.items())), *sorted(depends))

    def make(work: Path) -> None:
        for file, header in headers.items():
            (work / file).write_text(header)
        (work / source).write_text(text)
        # the temporary directory is renamed when done: files written into it are named without it
        run([cxx, *flags, f"-ffile-prefix-map={work}/=", "-c", str(work / source), "-o", str(work / f"{source}.o")],
            source, work)

    return cached(f"obj-{Path(source).stem}", digest, make) / f"{source}.o"


def link(name: str, objects: Iterable[Path], *, flags: Iterable[str] = (), link_flags: Iterable[str] = ()) -> Path:
    """`name.so` linked from cached object files (each named by its content's digest) and `link_flags`."""
    require()
    cxx, objects, flags, link_flags = compiler(), [str(o) for o in objects], list(flags), list(link_flags)
    digest = key(_version(cxx), "\0".join(flags), "\0".join(link_flags), *objects)

    def make(work: Path) -> None:
        run([cxx, *flags, "-shared", *objects, "-o", str(work / f"{name}.so"), *link_flags], f"{name}.so", work)

    return cached(name, digest, make) / f"{name}.so"


def open_built(build_it: Callable[[], Path], opener: Callable[[Path], T]) -> T:
    """opener(build_it()): a cached build that fails to load (truncated, corrupt) is built again
    once; if that fails to load too, the error says the cache can be deleted."""
    path = build_it()
    try:
        return opener(path)
    except (OSError, ImportError):
        shutil.rmtree(path.parent, ignore_errors=True)      # this build's own directory only
    path = build_it()
    try:
        return opener(path)
    except (OSError, ImportError) as err:
        raise BuildError(f"{path} was built again and still fails to load ({str(err).splitlines()[0]}); "
                         f"the build cache can be deleted, always safely: rm -r {cache_root()}") from None


def compile_all(jobs: Iterable[Callable[[], Path]]) -> list[Path]:
    """Run compile jobs (each returning its object file) side by side, one per CPU core."""
    jobs = list(jobs)
    with ThreadPoolExecutor(max_workers=max(1, min(len(jobs), os.cpu_count() or 1))) as pool:
        return list(pool.map(lambda job: job(), jobs))


def shared_object(name: str, sources: Mapping[str, str], *, headers: Mapping[str, str] = {}, flags: Iterable[str] = (),
                  compile_flags: Iterable[str] = (), link_flags: Iterable[str] = (),
                  depends: Iterable[Path] = ()) -> Path:
    """`name.so` built from `sources` {file name: C++ text}: each compiled with `flags` and
    `compile_flags` into its own cached object (so an edit recompiles one file), then linked with
    `flags` and `link_flags`. `headers` and `depends` as for object_file."""
    flags, depends = list(flags), list(depends)
    compile_with = [*flags, *compile_flags]
    objects = compile_all(functools.partial(object_file, source, text, headers=headers, flags=compile_with,
                                            depends=depends) for source, text in sources.items())
    return link(name, objects, flags=flags, link_flags=link_flags)
