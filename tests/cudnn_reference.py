"""Builds and loads `_native_emu`: the checkout's csrc/cudnn_net.cu and cudnn_bind.cpp compiled by g++
against the real CUDA, cuDNN and cuBLAS headers and linked with the reference implementation of the
calls they make (csrc/emu/, docs/cudnn-reference.md), for the `emu` tests. Nothing is installed: the
module is built from the checkout the tests run in, cached by content under the user's cache directory.
"""
from __future__ import annotations

import ctypes
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CSRC = ROOT / "csrc"
SOURCES = ("emu/cudnn_net_kernels.cpp", "cudnn_bind.cpp", "emu/module.cpp", "emu/core.cpp", "emu/memory.cpp",
           "emu/streams.cpp", "emu/cudnn_handles.cpp", "emu/cudnn_conv.cpp", "emu/cudnn_ops.cpp", "emu/cublas.cpp")
FLAGS = ("-std=c++20", "-O2", "-fPIC", "-Wall", "-Wno-attributes", "-Wno-sign-compare")
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "lenet" / "emu-cudnn"


def _nvidia_include(package: str, header: str) -> Path | None:
    spec = importlib.util.find_spec("nvidia")
    for base in (spec.submodule_search_locations or []) if spec else []:
        path = Path(base) / package / "include"
        if (path / header).is_file():
            return path
    return None


def include_dirs() -> list[Path] | str:
    """The header directories, or why the reference build cannot be made here (one line)."""
    if shutil.which("g++") is None:
        return "g++ not found"
    cuda = next((Path(p) / "include" for p in (os.environ.get("CUDA_HOME"), "/usr/local/cuda")
                 if p and (Path(p) / "include/crt/host_defines.h").is_file()), None)
    if cuda is None:
        return "the CUDA toolkit headers (cuda_runtime.h with crt/) are not found: set CUDA_HOME"
    cudnn = _nvidia_include("cudnn", "cudnn.h")
    cublas = _nvidia_include("cu13", "cublas_v2.h")
    if cudnn is None or cublas is None:
        return "the cuDNN/cuBLAS headers are not installed (pip install nvidia-cudnn-cu13 nvidia-cublas)"
    try:
        import pybind11
    except ImportError:
        return "pybind11 is not installed (pip install pybind11; it is in the test extra)"
    python = Path(sysconfig.get_paths()["include"])
    return [CSRC, CSRC / "emu", cuda, cudnn, cublas, Path(pybind11.get_include()), python]


def _digest(*parts: bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(len(part).to_bytes(8, "little") + part)
    return h.hexdigest()[:20]


def _compiler() -> bytes:
    return subprocess.run(["g++", "--version"], capture_output=True, check=True).stdout


def _compile(source: Path, includes: list[Path], headers: bytes, out_dir: Path) -> Path:
    """source -> cached object file, keyed by the source, every header of csrc/, flags and compiler."""
    flags = [*FLAGS, *(f"-I{d}" for d in includes)]
    key = _digest(source.read_bytes(), headers, " ".join(flags).encode(), _compiler())
    obj = out_dir / f"{source.stem}-{key}.o"
    if not obj.exists():
        tmp = obj.with_suffix(f".{os.getpid()}.tmp")
        result = subprocess.run(["g++", *flags, "-c", str(source), "-o", str(tmp)], capture_output=True, text=True)
        if result.returncode:
            raise RuntimeError(f"g++ failed on {source.name}:\n{result.stderr[-4000:]}")
        os.replace(tmp, obj)   # atomic: a concurrent build finds a whole file or none
    return obj


def build(cudnn_net: Path | None = None) -> Path:
    """The module's path, built if needed; `cudnn_net` replaces csrc/cudnn_net.cu (a planted bug)."""
    includes = include_dirs()
    if isinstance(includes, str):
        raise RuntimeError(includes)
    net_includes = includes if cudnn_net is None else [cudnn_net.parent, *includes]   # ahead of csrc/
    headers = b"".join(p.read_bytes() for p in sorted([*CSRC.glob("*.h"), *CSRC.glob("emu/*.h")]))
    net = (cudnn_net or CSRC / "cudnn_net.cu").read_bytes()   # included by the first source only
    objects_dir = CACHE / "objects"
    objects_dir.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        objects = list(pool.map(lambda s: _compile(CSRC / s, net_includes, headers + net, objects_dir) if s == SOURCES[0]
                                else _compile(CSRC / s, includes, headers, objects_dir), SOURCES))
    key = _digest(*(o.name.encode() for o in objects))
    module = CACHE / key / f"_native_emu{sysconfig.get_config_var('EXT_SUFFIX')}"
    if not module.exists():
        module.parent.mkdir(parents=True, exist_ok=True)
        tmp = module.with_name(f"{module.name}.{os.getpid()}.tmp")
        # -Bsymbolic: the reference's own cuda*/cudnn*/cublas* calls bind to it, whatever else is loaded
        result = subprocess.run(["g++", "-shared", "-Wl,-Bsymbolic", *map(str, objects), "-o", str(tmp), "-lpthread"],
                                capture_output=True, text=True)
        if result.returncode:
            raise RuntimeError(f"linking _native_emu failed:\n{result.stderr[-4000:]}")
        os.replace(tmp, module)
    return module


def load(path: Path):
    """The built module, imported from its cache path (not installed, not in sys.modules)."""
    spec = importlib.util.spec_from_file_location("_native_emu", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def library(path: Path) -> ctypes.CDLL:
    """The same module as a C library: the reference's API functions, for calls the net never makes wrongly."""
    return ctypes.CDLL(str(path))


if __name__ == "__main__":   # python tests/cudnn_reference.py: build and print the module's path
    sys.exit(print(build()))
