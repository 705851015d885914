"""The emulator's C++ runtime (runtime.cpp, sync.cpp, fiber.cpp, shadow.cpp, symbols.cpp) built
into a cached shared object and loaded once per process, with its memory calls and its reports.

A report names its kind (race, out-of-bounds, misaligned, uninitialised, sync, dsmem, launch),
the block and thread, and the source lines: the runtime records code addresses and names them
as file:line with addr2line (inlined frames included, symbols.cpp).
"""
from __future__ import annotations

import ctypes
import functools
from pathlib import Path
from typing import NamedTuple

import numpy as np

from . import build

HERE = Path(__file__).resolve().parent
PRELUDE = ("cuemu.h", "cuemu_api.h")       # what a unit compiled for the emulator includes
SOURCES = ("runtime.cpp", "sync.cpp", "fiber.cpp", "shadow.cpp", "symbols.cpp")
FLAGS = ("-std=c++17", "-O2", "-g", "-fPIC")


class Report(NamedTuple):
    kind: str           # race, out-of-bounds, misaligned, uninitialised, sync, dsmem, launch
    text: str           # one line: what, where (file:line), which block and thread

    def __str__(self):
        return f"{self.kind}: {self.text}"


class EmuError(RuntimeError):
    """A kernel run on the CPU emulator of CUDA semantics produced reports (each one a bug)."""

    def __init__(self, what: str, reports: list[Report]):
        self.reports = reports
        super().__init__(f"{what}: {len(reports)} report(s) from the CPU emulator of CUDA semantics\n"
                         + "\n".join(f"  {r}" for r in reports))


class Extent(ctypes.Structure):       # cuemu_arg_extent
    _fields_ = [("arg", ctypes.c_uint), ("bytes", ctypes.c_size_t), ("name", ctypes.c_char_p)]


class _Launch(ctypes.Structure):
    _fields_ = [("kernel", ctypes.c_void_p), ("thunk", ctypes.c_void_p), ("args", ctypes.POINTER(ctypes.c_void_p)),
                ("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3),
                ("shared_lo", ctypes.c_void_p), ("shared_hi", ctypes.c_void_p), ("static_shared", ctypes.c_size_t),
                ("registers", ctypes.c_uint), ("max_threads", ctypes.c_uint),
                ("extents", ctypes.POINTER(Extent)), ("n_extents", ctypes.c_size_t)]


class SharedVar(ctypes.Structure):
    _fields_ = [("offset", ctypes.c_size_t), ("size", ctypes.c_size_t), ("align", ctypes.c_size_t),
                ("name", ctypes.c_char_p)]


def library(runtime_dir: Path = HERE) -> Path:
    """libcuemu.so built from the runtime sources in `runtime_dir` (a checkout's, in tests)."""
    return build.shared_object("libcuemu", {f: (runtime_dir / f).read_text() for f in SOURCES},
                               flags=FLAGS, compile_flags=["-Wall", "-I", str(runtime_dir)], link_flags=["-ldl"],
                               depends=[runtime_dir / "runtime.h", runtime_dir / "cuemu_api.h"])


def prelude(runtime_dir: Path = HERE) -> list[Path]:
    """The prelude's files in `runtime_dir`: a build that includes them depends on them."""
    return [runtime_dir / name for name in PRELUDE]


TRAFFIC = ("global_read", "global_written", "shared_read", "shared_written")   # Runtime.traffic's order


@functools.cache
def load(runtime_dir: Path = HERE) -> Runtime:
    return build.open_built(lambda: library(runtime_dir), Runtime)


class Runtime:
    """The loaded runtime: device memory, launches and reports."""

    def __init__(self, path: Path):
        self.path = path
        self.lib = lib = ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
        lib.cuemu_malloc.restype = ctypes.c_void_p
        lib.cuemu_malloc.argtypes = [ctypes.c_size_t]
        lib.cuemu_free.argtypes = [ctypes.c_void_p]
        for copy in (lib.cuemu_memcpy_htod, lib.cuemu_memcpy_dtoh):
            copy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
        lib.cuemu_memset32.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_size_t]
        lib.cuemu_launch.argtypes = [ctypes.POINTER(_Launch)]
        lib.cuemu_set_shared_vars.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.POINTER(SharedVar)]
        lib.cuemu_traffic.argtypes = [ctypes.POINTER(ctypes.c_uint64)]
        lib.cuemu_report_count.restype = ctypes.c_size_t
        lib.cuemu_report_at.restype = ctypes.c_char_p
        lib.cuemu_report_at.argtypes = [ctypes.c_size_t]

    # --- device memory: NaN-poisoned, uninitialised until written
    def malloc(self, nbytes: int) -> int:
        return self.lib.cuemu_malloc(nbytes)

    def free(self, address: int) -> None:
        self.lib.cuemu_free(address)

    def htod(self, address: int, host: np.ndarray) -> None:
        self._check(self.lib.cuemu_memcpy_htod(address, host.ctypes.data, host.nbytes), "host-to-device copy")

    def dtoh(self, host: np.ndarray, address: int) -> None:
        self._check(self.lib.cuemu_memcpy_dtoh(host.ctypes.data, address, host.nbytes), "device-to-host copy")

    def memset32(self, address: int, bits: int, count: int) -> None:
        self._check(self.lib.cuemu_memset32(address, bits, count), "memset")

    def _check(self, status: int, what: str) -> None:
        if status != 0:
            raise EmuError(what, self.take_reports())

    # --- launches
    def launch(self, desc: _Launch, what: str) -> None:
        if self.lib.cuemu_launch(ctypes.byref(desc)):
            raise EmuError(what, self.take_reports())

    def traffic(self) -> np.ndarray:
        """Bytes the kernels' threads accessed so far, each access counted (no cache, no coalescing):
        [device memory read, written, shared memory read, written] (TRAFFIC)."""
        out = np.zeros(len(TRAFFIC), np.uint64)
        self.lib.cuemu_traffic(out.ctypes.data_as(ctypes.POINTER(ctypes.c_uint64)))
        return out.astype(np.int64)

    def take_reports(self) -> list[Report]:
        """The reports so far, and forget them."""
        found = [Report(*self.lib.cuemu_report_at(i).decode().split("|", 1)) for i in range(self.lib.cuemu_report_count())]
        self.lib.cuemu_clear_reports()
        return found
