"""Test apparatus, checkout only: a C++ stand-in for the CUDA runtime, cuDNN and cuBLAS on the CPU
(the files beside this one, docs/cudnn-standin.md), and its builder. The builder compiles the
checkout's csrc/cudnn_net.cu and cudnn_bind.cpp with g++ against the real CUDA, cuDNN and cuBLAS
headers and links them, as the module `_native_emu`, with the stand-in and with the runtime of the
checkout's CUDA C emulator (python/lenet/emu), which runs the one kernel, xent_grad, and holds every
device buffer under its checks. cudnn_net.cu is compiled as the emulator compiles CUDA C (its
prelude, every load and store instrumented). Cached by content (lenet.emu.build); never installed:
what it tests, csrc/, exists only in a checkout.

  standin.h               the shared internals: refusals, the object ledger, memory and stream helpers
  core.cpp                refusal messages, the ledger of live objects
  memory.cpp              cudaMalloc and friends on the emulator's device memory, copies
  streams.cpp             streams, events, capture, graphs, cudaLaunchKernel, errors
  cudnn_types.h, cudnn_handles.cpp   the cuDNN handle and descriptors, the checks its calls share
  cudnn_conv.cpp          convolutions forward and backward, Find*, workspace sizes
  cudnn_ops.cpp           pooling, ReLU, softmax, add-tensor
  cublas.cpp              handle, stream, workspace, math mode, Sgemm
  cudnn_net_kernels.cpp   csrc/cudnn_net.cu compiled as the emulator compiles CUDA C; xent_grad registered
  module.cpp              the `_native_emu` pybind11 module: the real cudnn_bind.cpp plus the ledger
"""
from __future__ import annotations

import ctypes
import functools
import importlib.util
import os
import sysconfig
from pathlib import Path

from lenet.emu import build, modules, runtime

HERE = Path(__file__).resolve().parent
CHECKOUT = HERE.parents[1]                   # tests/cudnn_standin/ -> the checkout
CSRC = CHECKOUT / "csrc"                     # what is tested: cudnn_net.cu, cudnn_bind.cpp
EMU = CHECKOUT / "python" / "lenet" / "emu"  # the emulator's runtime and prelude, cuemu_api.h among them
SOURCES = (CSRC / "cudnn_bind.cpp", *(HERE / f for f in ("module.cpp", "core.cpp", "memory.cpp", "streams.cpp",
           "cudnn_handles.cpp", "cudnn_conv.cpp", "cudnn_ops.cpp", "cublas.cpp")))
KERNELS = HERE / "cudnn_net_kernels.cpp"     # #includes cudnn_net.cu: compiled as the emulator compiles CUDA C
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


def include_dirs() -> list[Path] | str:
    """The header directories of every unit of the build (the emulator's once, for its cuemu_api.h),
    or why it cannot be made here (one line)."""
    if reason := build.unavailable():
        return reason
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
    return [CSRC, HERE, EMU, cuda, cudnn, cublas, Path(pybind11.get_include()), python]


def unavailable() -> str | None:
    """Why the stand-in build cannot be made here (one line), or None."""
    found = include_dirs()
    return found if isinstance(found, str) else None


def build_module(cudnn_net: str | None = None) -> Path:
    """The path of `_native_emu` built from the checkout's csrc/, the stand-in and the emulator;
    `cudnn_net` is the text to compile instead of csrc/cudnn_net.cu (a planted bug). Each object is
    cached by content."""
    includes = include_dirs()
    if isinstance(includes, str):
        raise build.BuildError(includes)
    include_flags = [f"-I{d}" for d in includes]
    headers = sorted([*CSRC.glob("*.h"), *HERE.glob("*.h")])
    lib = runtime.library(EMU)

    def plain(source: Path):     # the stand-in's own C++, and cudnn_bind.cpp
        return lambda: build.object_file(source.name, source.read_text(), flags=[*FLAGS, *include_flags],
                                         depends=[*headers, *runtime.prelude(EMU)])

    def kernels():      # csrc/cudnn_net.cu through -I csrc, or the planted text written beside the unit
        planted = {} if cudnn_net is None else {"cudnn_net.cu": cudnn_net}
        return build.object_file(KERNELS.name, KERNELS.read_text(), headers=planted,
                                 flags=[*modules.KERNEL_FLAGS, *modules.compile_flags((), EMU), "-DCUEMU_CUDA_RUNTIME",
                                        *include_flags],
                                 depends=[*headers, *runtime.prelude(EMU), *([] if planted else [CSRC / "cudnn_net.cu"])])

    objects = build.compile_all([kernels, *map(plain, SOURCES)])
    # -Bsymbolic: the stand-in's own cuda*/cudnn*/cublas* calls bind to it, whatever else is loaded
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
    """The same module as a C library: the stand-in's API functions, for calls the net never makes wrongly."""
    return ctypes.CDLL(str(path))
