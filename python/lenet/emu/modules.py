"""One kernel module per .cu file: the file compiled unchanged by g++ with the prelude cuemu.h
and exactly the -D options NVRTC and nvcc get (`_cuda_kernels.OPTIONS`), every load and store
instrumented, linked against the runtime and loaded.

A small generated translation unit #includes the .cu and lists each kernel that
`_cuda_kernels.KERNEL_FILES` names with its thunk (a template that deduces the signature, so no
libffi) and its signature letters. Where nvcc is on PATH, each __shared__ variable's alignment
is taken from nvcc's PTX (`.shared .align N`): x86 over-aligns arrays, which would hide a
missing __align__; without nvcc only the natural alignment of each access is checked.
"""
from __future__ import annotations

import ctypes
import functools
import re
import shutil
import subprocess
from pathlib import Path
from typing import NamedTuple

from ..backends import _cuda_kernels as ck
from . import build, runtime
from .runtime import SharedVar

KERNEL_FLAGS = ("-O2", "-gdwarf-4", "-fPIC", "-std=c++17")     # DWARF 4: binutils 2.40 misnames included files in DWARF 5
INSTRUMENT = ("-fsanitize=thread", "--param", "tsan-instrument-func-entry-exit=0", "-ffp-contract=off")


REDZONE = "cuemu_redzone_"      # cuemu.h's space after each __shared__ variable: in no variable


class _Entry(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("kernel", ctypes.c_void_p), ("thunk", ctypes.c_void_p),
                ("codes", ctypes.c_char_p)]


def translation_unit(source: str, kernels: tuple[str, ...]) -> str:
    rows = "".join(f'    {{"{k}", (const void*)&{k}, cuemu::thunk_of(&{k}), cuemu::codes_of(&{k})}},\n' for k in kernels)
    return (f'#include "{source}"\n'
            'extern "C" {\n'
            'struct cuemu_kernel { const char* name; const void* kernel; cuemu_thunk thunk; const char* codes; };\n'
            f'__attribute__((visibility("default"))) cuemu_kernel cuemu_kernels[] = {{\n{rows}'
            '    {nullptr, nullptr, nullptr, nullptr}};\n'
            '__attribute__((visibility("default"))) char* cuemu_section[2] = {__start_cuemu_shared, __stop_cuemu_shared};\n'
            '}\n')


def compile_flags(options=ck.OPTIONS, runtime_dir: Path = runtime.HERE) -> list[str]:
    """What g++ gets for a kernel file: the instrumentation, the prelude, the kernels' -D options."""
    return [*INSTRUMENT, "-DLENET_CUEMU", "-include", str(runtime_dir / "cuemu.h"), *options]


def shared_object(file: str, kernel_dir: Path, runtime_dir: Path, options=ck.OPTIONS) -> Path:
    lib = runtime.load(runtime_dir).path
    stem = Path(file).stem        # the .cu is copied beside the unit: the key is its content, not its path
    return build.shared_object(f"kernels-{stem}", {f"{stem}_emu.cpp": translation_unit(file, ck.KERNEL_FILES[file])},
                               headers={file: (kernel_dir / file).read_text()},
                               flags=KERNEL_FLAGS, compile_flags=compile_flags(options, runtime_dir),
                               link_flags=[str(lib), "-Wl,--no-undefined"], depends=[*runtime.prelude(runtime_dir), lib])


class Resources(NamedTuple):
    """One kernel as nvcc compiles it for sm_90 (ptxas -v and the PTX directives)."""
    registers: int          # per thread
    shared: int             # static shared memory, bytes
    max_threads: int        # __launch_bounds__' first argument (.maxntid), 0 if none


class Sm90(NamedTuple):
    """What nvcc says about a .cu file for sm_90, or why it cannot be asked."""
    aligns: dict[str, int]              # mangled __shared__ name -> its .align
    kernels: dict[str, Resources]
    missing: str | None = None          # why nothing is known (then both are empty)


def _sm90_text(source: Path, options) -> tuple[str, str] | str:
    """(PTX, ptxas -v's report) of `source` for sm_90, cached with the builds; or why not."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        return "nvcc not found on PATH"
    ptxas = Path(nvcc).parent / "ptxas"
    if not ptxas.is_file():
        return f"ptxas not found beside {nvcc}"

    def make(work: Path) -> None:
        build.run([nvcc, "-arch=sm_90", "-ptx", *options, str(source), "-o", str(work / "out.ptx")], source.name)
        done = subprocess.run([str(ptxas), "-arch=sm_90", "-v", str(work / "out.ptx"), "-o", str(work / "out.cubin")],
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise build.BuildError(f"ptxas failed on {source.name}: {done.stderr.strip()[:2000]}")
        (work / "resources.txt").write_text(done.stdout + done.stderr)

    key = build.key(build._version(nvcc), "\0".join(options), source.read_text())
    out = build.cached(f"sm90-{source.stem}", key, make)
    return (out / "out.ptx").read_text(), (out / "resources.txt").read_text()


def sm90(source: Path, options=ck.OPTIONS) -> Sm90:
    """Each __shared__ variable's alignment and each kernel's registers, shared memory and launch
    bounds, as nvcc gives them for sm_90; empty, with the reason, without nvcc."""
    found = _sm90_text(source, options)
    if isinstance(found, str):
        return Sm90({}, {}, found)
    ptx, report = found
    aligns = {name: int(align) for align, name in re.findall(r"\.shared \.align (\d+) \.b8 (\w+)\[", ptx)}
    bounds = {name: int(x) * int(y) * int(z) for name, x, y, z in
              re.findall(r"\.entry (\w+)\((?:[^)]*)\)\s*\.maxntid (\d+), (\d+), (\d+)", ptx)}
    kernels = {}
    for name, body in re.findall(r"Compiling entry function '(\w+)' for 'sm_90'\n(.*?)(?=Compiling entry|\Z)", report, re.S):
        used = re.search(r"Used (\d+) registers(?:.*?(\d+) bytes smem)?", body)
        kernels[name] = Resources(int(used.group(1)), int(used.group(2) or 0), bounds.get(name, 0))
    return Sm90(aligns, kernels)


def _local_static(mangled: str) -> tuple[str, str] | None:
    """'_ZZ16lenet_forward_v3E2p2' -> ('lenet_forward_v3', 'p2'): a static local of an extern "C" function."""
    m = re.match(r"_ZZ(\d+)", mangled)
    if not m:
        return None
    n, at = int(m.group(1)), m.end()
    function, rest = mangled[at:at + n], mangled[at + n:]
    m = re.match(r"E(\d+)", rest)
    return (function, rest[m.end():m.end() + int(m.group(1))]) if m else None


class Module:
    """A loaded kernel module: its kernels by name, and its shared-memory variables."""

    def __init__(self, file: str, kernel_dir: Path, runtime_dir: Path, options=ck.OPTIONS):
        self.rt = runtime.load(runtime_dir)
        self.lib = build.open_built(lambda: shared_object(file, kernel_dir, runtime_dir, options),
                                    lambda path: ctypes.CDLL(str(path)))
        self.path = Path(self.lib._name)
        section = (ctypes.c_void_p * 2).in_dll(self.lib, "cuemu_section")
        self.shared_lo, self.shared_hi = section[0] or 0, section[1] or 0
        entries = ctypes.cast(self.lib.cuemu_kernels, ctypes.POINTER(_Entry))
        self.kernels = {}
        i = 0
        while entries[i].name:
            e = entries[i]
            self.kernels[e.name.decode()] = (e.kernel, e.thunk, e.codes.decode())
            i += 1
        self.sm90 = sm90(kernel_dir / file, options)
        self.static_shared = self._shared_vars(self.sm90.aligns if not self.sm90.missing else None)

    def _shared_vars(self, aligns: dict[str, int] | None) -> dict[str, int]:
        """Register this module's __shared__ variables (with their PTX alignments when known);
        returns each kernel's static shared-memory bytes."""
        if not self.shared_lo:
            return {}
        symbols = self._symbols()
        base = self.shared_lo - next(value for value, _, name in symbols if name == "__start_cuemu_shared")
        per_kernel, rows = {}, []
        for value, size, name in symbols:
            owner = _local_static(name)
            at = base + value - self.shared_lo
            if owner is None or not 0 <= at < self.shared_hi - self.shared_lo or owner[1].startswith(REDZONE):
                continue
            per_kernel[owner[0]] = per_kernel.get(owner[0], 0) + size
            align = aligns.get(name, 16) if aligns is not None else 16     # 16: unknown, not checked
            rows.append(SharedVar(at, size, align, owner[1].encode()))
        self._vars = (SharedVar * len(rows))(*rows)             # kept alive: the runtime keeps the names
        self.rt.lib.cuemu_set_shared_vars(self.shared_lo, self.shared_hi - self.shared_lo, len(rows), self._vars)
        return per_kernel

    def _symbols(self) -> list[tuple[int, int, str]]:
        """(value, size, name) of the module's defined symbols (size 0 where nm gives none)."""
        done = subprocess.run(["nm", "-S", "--defined-only", str(self.path)], capture_output=True, text=True, check=True)
        rows = [line.split() for line in done.stdout.splitlines()]
        return [(int(r[0], 16), int(r[1], 16) if len(r) == 4 else 0, r[-1]) for r in rows if len(r) in (3, 4)]


@functools.cache
def load(file: str, kernel_dir: Path = ck.KERNEL_DIR, runtime_dir: Path = runtime.HERE, options=ck.OPTIONS) -> Module:
    return Module(file, kernel_dir, runtime_dir, options)


CTYPES = {"P": ctypes.c_uint64, "i": ctypes.c_int32, "I": ctypes.c_uint32, "f": ctypes.c_float,
          "d": ctypes.c_double, "q": ctypes.c_int64, "Q": ctypes.c_uint64}


class Launch:
    """One kernel launch with its arguments resolved once: call it to run it (synchronously).
    `codes` are the arguments' signature letters (P pointer, i int32, f float32, Q uint64);
    `extents` {argument index: (name, bytes)} the pointer arguments that stand for one part of a
    larger buffer: an access outside that part is out-of-bounds, naming it."""

    def __init__(self, module: Module, name: str, grid, block, args, codes: str, extents=None):
        kernel, thunk, wanted = module.kernels[name]
        if codes != wanted:
            raise TypeError(f"{name} takes ({wanted}), launched with ({codes})")
        self.module, self.name = module, name
        self.values = [CTYPES[c](int(a) if c in "PiIqQ" else float(a)) for c, a in zip(codes, args)]
        self.argv = (ctypes.c_void_p * max(len(args), 1))(*[ctypes.addressof(v) for v in self.values])
        extents = extents or {}
        self.extents = (runtime.Extent * max(len(extents), 1))(*[runtime.Extent(i, n, label.encode())
                                                                  for i, (label, n) in extents.items()])
        nvcc = module.sm90.kernels.get(name)       # registers and launch bounds where nvcc told them
        self.desc = runtime._Launch(kernel, thunk, self.argv, (ctypes.c_uint * 3)(*grid), (ctypes.c_uint * 3)(*block),
                                    module.shared_lo, module.shared_hi,
                                    nvcc.shared if nvcc else module.static_shared.get(name, 0),
                                    nvcc.registers if nvcc else 0, nvcc.max_threads if nvcc else 0,
                                    self.extents, len(extents))
        self.what = f"{name}<<<{tuple(grid)}, {tuple(block)}>>>"

    def __call__(self) -> None:
        self.module.rt.launch(self.desc, self.what)
