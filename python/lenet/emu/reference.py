"""The cudnn backend on the CPU: a checkout's csrc/cudnn_net.cu and cudnn_bind.cpp compiled by g++
against the real CUDA, cuDNN and cuBLAS headers and linked, as the module `_native_emu`, with the
reference implementation of the calls they make (csrc/emu/, docs/cudnn-reference.md) and with the
emulator's runtime, which runs the one kernel, xent_grad, and holds every device buffer under its
checks. cudnn_net.cu is compiled as the emulator compiles CUDA C (its prelude, every load and store
instrumented). Built from the checkout's sources, cached by content (lenet.emu.build); never installed.
"""
from __future__ import annotations

import ctypes
import functools
import importlib.util
import os
import sysconfig
from pathlib import Path

from . import build, modules, runtime

CHECKOUT_CSRC = Path(__file__).resolve().parents[3] / "csrc"     # python/lenet/emu/ -> the checkout's csrc/
SOURCES = ("cudnn_bind.cpp", "emu/module.cpp", "emu/core.cpp", "emu/memory.cpp", "emu/streams.cpp",
           "emu/cudnn_handles.cpp", "emu/cudnn_conv.cpp", "emu/cudnn_ops.cpp", "emu/cublas.cpp")
KERNELS = "emu/cudnn_net_kernels.cpp"      # #includes cudnn_net.cu: compiled as the emulator compiles CUDA C
FLAGS = ("-std=c++20", "-O2", "-fPIC", "-Wall", "-Wno-attributes", "-Wno-sign-compare")


def _cuda_include() -> Path | None:
    roots = (os.environ.get("CUDA_HOME"), "/usr/local/cuda")
    return next((Path(r) / "include" for r in roots if r and (Path(r) / "include/crt/host_defines.h").is_file()), None)


def _nvidia_include(package: str, header: str) -> Path | None:
    spec = importlib.util.find_spec("nvidia")
    for base in (spec.submodule_search_locations or []) if spec else []:
        if (Path(base) / package / "include" / header).is_file():
            return Path(base) / package / "include"
    return None


def include_dirs(csrc: Path = CHECKOUT_CSRC) -> list[Path] | str:
    """The header directories of the build, or why it cannot be made here (one line)."""
    if reason := build.unavailable():
        return reason
    if not (csrc / "cudnn_net.cu").is_file():
        return f"{csrc} has no cudnn_net.cu: the reference build needs a checkout of lenet (csrc/)"
    cuda = _cuda_include()
    if cuda is None:
        return "the CUDA toolkit headers (cuda_runtime.h with crt/) are not found: set CUDA_HOME"
    cudnn, cublas = _nvidia_include("cudnn", "cudnn.h"), _nvidia_include("cu13", "cublas_v2.h")
    if cudnn is None or cublas is None:
        return "the cuDNN/cuBLAS headers are not installed (pip install nvidia-cudnn-cu13 nvidia-cublas)"
    try:
        import pybind11
    except ImportError:
        return "pybind11 is not installed (pip install pybind11; it is in the test extra)"
    python = Path(sysconfig.get_paths()["include"])
    return [csrc, csrc / "emu", cuda, cudnn, cublas, Path(pybind11.get_include()), python]


def unavailable(csrc: Path = CHECKOUT_CSRC) -> str | None:
    """Why the reference build cannot be made here (one line), or None."""
    found = include_dirs(csrc)
    return found if isinstance(found, str) else None


def build_module(csrc: Path = CHECKOUT_CSRC, emu_dir: Path = runtime.HERE, cudnn_net: str | None = None) -> Path:
    """The path of `_native_emu` built from `csrc` and the emulator in `emu_dir`; `cudnn_net` is the
    text to compile instead of csrc/cudnn_net.cu (a planted bug). Each object is cached by content."""
    includes = include_dirs(csrc)
    if isinstance(includes, str):
        raise build.BuildError(includes)
    include_flags = [f"-I{d}" for d in includes]
    headers = sorted([*csrc.glob("*.h"), *csrc.glob("emu/*.h")])
    lib = runtime.library(emu_dir)

    def plain(source: str):     # the reference's own C++ (memory.cpp includes the emulator's cuemu_api.h)
        return lambda: build.object_file(Path(source).name, (csrc / source).read_text(),
                                         flags=[*FLAGS, *include_flags, f"-I{emu_dir}"],
                                         depends=[*headers, *runtime.prelude(emu_dir)])

    def kernels():      # csrc/cudnn_net.cu through -I csrc, or the planted text written beside the unit
        planted = {} if cudnn_net is None else {"cudnn_net.cu": cudnn_net}
        return build.object_file(Path(KERNELS).name, (csrc / KERNELS).read_text(), headers=planted,
                                 flags=[*modules.KERNEL_FLAGS, *modules.compile_flags((), emu_dir), "-DCUEMU_CUDA_RUNTIME",
                                        *include_flags],
                                 depends=[*headers, *runtime.prelude(emu_dir), *([] if planted else [csrc / "cudnn_net.cu"])])

    objects = build.compile_all([kernels, *map(plain, SOURCES)])
    # -Bsymbolic: the reference's own cuda*/cudnn*/cublas* calls bind to it, whatever else is loaded
    return build.link("_native_emu", objects, link_flags=[str(lib), "-Wl,-Bsymbolic", "-lpthread"])


@functools.cache
def load(path: Path):
    """The module at `path`, imported under a name of its own (Python would hand back the first
    `_native_emu` for every later one); not installed, not in sys.modules."""
    spec = importlib.util.spec_from_file_location(f"lenet_emu_{path.parent.name.replace('-', '_')}._native_emu", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def library(path: Path) -> ctypes.CDLL:
    """The same module as a C library: the reference's API functions, for calls the net never makes wrongly."""
    return ctypes.CDLL(str(path))
