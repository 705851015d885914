"""The CPU emulator of CUDA semantics (lenet.emu) checked itself: planted bugs, each a string edit
of a real .cu file into a temporary copy, must produce the report of their kind, naming the file
and line; launch limits are those of sm_90; fused.cu's emulator branch has no inline PTX; the C++
interface works in a unit that includes the real cuda_runtime.h; builds are cached by content and
atomic; `python -m lenet.emu` prints its verdict, and bad input is one line. (The kernels
themselves are executed on the emulator by test_cuda_kernels.py.)"""
from __future__ import annotations

import collections
import ctypes
import os
import re
import shutil
import site
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import lenet
from lenet.backends import _cuda_kernels as ck
from lenet.backends import _cuda_net as cn
from lenet.emu import __main__ as emu_main
from lenet.emu import build, launcher, modules, runtime
from lenet.emu.launcher import NEVER_TIMED, EmuGPU
from lenet.emu.runtime import EmuError

from conftest import CHECKOUT, emu_gpu
from kernel_runs import B, ints, run_launches

pytestmark = pytest.mark.emu
KERNELS = CHECKOUT / "python" / "lenet" / "kernels"


def planted(tmp_path, file, old, new):
    """An EmuGPU over a copy of the checkout's kernels with `old` replaced by `new` (once) in `file`."""
    emu_gpu()                                           # skips where the emulator cannot be built
    copy = tmp_path / "kernels"
    shutil.copytree(KERNELS, copy)
    text = (copy / file).read_text()
    assert text.count(old) == 1, f"{file}: the text to plant the bug in is not there once: {old!r}"
    (copy / file).write_text(text.replace(old, new))
    return EmuGPU(copy, CHECKOUT / "python" / "lenet" / "emu")


def line_of(file, text):
    """The line number of the one line of the checkout's `file` that contains `text`."""
    lines = [i for i, line in enumerate((KERNELS / file).read_text().splitlines(), 1) if text in line]
    assert len(lines) == 1, (file, text, lines)
    return lines[0]


def reports(gpu, launches, inputs, outputs):
    with pytest.raises(EmuError) as err:
        run_launches(gpu, launches, inputs, outputs)
    return err.value.reports


def kinds(found):
    return {r.kind for r in found}


def dense(n=7, IN=800, OUT=500):
    rng = np.random.default_rng(0)
    x, w, b = ints(rng, (n, IN)), ints(rng, (OUT, IN)), ints(rng, OUT)
    return [ck.dense_forward("2", B("x"), B("w"), B("b"), B("y"), n, IN, OUT, True)], dict(x=x, w=w, b=b), dict(y=(n, OUT))


def fused(n=1):
    rng = np.random.default_rng(1)
    params = {k: ints(rng, s, -1, 1) for k, s in lenet.model.PARAM_SHAPES.items()}
    x = rng.integers(0, 2, (n, 1, 28, 28)).astype(np.float32)
    return [ck.fused_forward(B("x"), B("z"), n)], dict(x=x, params=ck.flatten(params)), dict(z=(n, 10))


def conv(n=1, v="2", C=20, H=12, O=50):
    rng = np.random.default_rng(2)
    x, w, b = ints(rng, (n, C, H, H)), ints(rng, (O, C, 5, 5)), ints(rng, O)
    return [ck.conv_forward(v, B("x"), B("w"), B("b"), B("y"), n, C, H, O)], dict(x=x, w=w, b=b), dict(y=(n, O, H - 4, H - 4))


def pool(nc=140, H=24):
    x = np.random.default_rng(3).integers(0, 2, (nc, H, H)).astype(np.float32)
    return [ck.maxpool_forward(B("x"), B("y"), nc, H)], dict(x=x), dict(y=(nc, H // 2, H // 2))


def loss(n=7):
    rng = np.random.default_rng(4)
    z, y = rng.normal(0, 3, (n, 10)).astype(np.float32), rng.integers(0, 10, n).astype(np.int32)
    return [ck.softmax_xent(B("z"), B("y"), B("dz"), B("loss"), n)], dict(z=z, y=y), dict(dz=(n, 10), loss=(1,))


def sgd(n=1000):
    rng = np.random.default_rng(5)
    return ([ck.sgd(B("p"), B("g"), 0.05, n)], dict(p=rng.normal(size=n).astype(np.float32), g=rng.normal(size=n).astype(np.float32)),
            dict(unused=(1,)))


# (name, file, text, its replacement, the run, the report kind it must produce, the text of the line
# named [, that line's offset from the one named])
PLANTED = [
    ("removed __syncthreads", "dense.cu", "        __syncthreads();\n    }\n    int m = m0", "\n    }\n    int m = m0",
     dense, "race", "acc += As[ty][kk] * Bs[kk][tx];"),
    ("removed final cluster barrier", "fused.cu", "    cluster_sync();                                    // 8.", "    //",
     fused, "dsmem", "s += load_remote(&partial[t], q);"),
    ("wrong DSMEM owner", "fused.cu", "p1[e] = load_remote(&p1[e], owner);", "p1[e] = load_remote(&p1[e], (owner + 1) % CLUSTER);",
     fused, "uninitialised", "if (owner != r) p1[e] = load_remote(&p1[e], owner);"),
    ("divergent shuffle", "fused.cu",
     "for (int off = 16; off > 0; off /= 2) s += __shfl_down_sync(0xffffffffu, s, off);\n        if (lane == 0) partial",
     "if (lane < 16) for (int off = 16; off > 0; off /= 2) s += __shfl_down_sync(0xffffffffu, s, off);\n        if (lane == 0) partial",
     fused, "sync", "if (lane == 0) partial[warp] = s;", -1),
    ("dropped bounds check", "dense.cu", "m0 + ar < M && k0 + aq < K ?", "m0 + ar < M ?",
     lambda: dense(IN=500, OUT=10), "out-of-bounds", "As[ar][aq] = m0 + ar < M && k0 + aq < K ?"),
    ("misaligned float4", "fused.cu", "(f1w + (row0 + k) * FLAT)", "(f1w + 2 + (row0 + k) * FLAT)",
     fused, "misaligned", "float4 a = __ldg(wr + j), v = xv[j];"),
    ("missing __align__", "fused.cu", "__shared__ __align__(16) float p2[FLAT];", "__shared__ float p2[FLAT];",
     fused, "misaligned", "float4 a = __ldg(wr + j), v = xv[j];"),
    ("index off by one", "pool.cu", "    if (idx >= (long)NC * PH * PW) return;\n    int j = idx % PW, i = (idx / PW) % PH;\n    long p = idx / ((long)PW * PH);\n    const float* xp = x + (p * H + 2 * i) * W + 2 * j;\n    y[idx]",
     "    if (idx > (long)NC * PH * PW) return;\n    int j = idx % PW, i = (idx / PW) % PH;\n    long p = idx / ((long)PW * PH);\n    const float* xp = x + (p * H + 2 * i) * W + 2 * j;\n    y[idx]",
     pool, "out-of-bounds", "y[idx] = fmaxf(fmaxf(xp[0], xp[1]), fmaxf(xp[W], xp[W + 1]));"),
    ("removed barrier in conv", "conv.cu", "        __syncthreads();                       // previous channel fully consumed", "",
     conv, "race", "xs[e] = x[((long)n * C + c) * H * W + e];"),
    ("removed barrier in the loss", "loss.cu", "        if (threadIdx.x < s) sums[threadIdx.x] += sums[threadIdx.x + s];\n        __syncthreads();",
     "        if (threadIdx.x < s) sums[threadIdx.x] += sums[threadIdx.x + s];\n", loss, "race",
     "if (threadIdx.x < s) sums[threadIdx.x] += sums[threadIdx.x + s];"),
    ("grid-stride loop off by one", "sgd.cu", "i < n;", "i <= n;", sgd, "out-of-bounds", "        p[i] -= lr * g[i];"),
    ("read one past a shared array", "fused.cu", "for (int k = lane; k < rows; k += 32) s += f2w",
     "for (int k = lane; k <= rows; k += 32) s += f2w", fused, "out-of-bounds",
     "for (int k = lane; k < rows; k += 32) s += f2w"),
    ("launch over its bounds", "fused.cu", "__launch_bounds__(FUSED_THREADS, 1)", "__launch_bounds__(512, 1)",
     fused, "launch", "lenet_forward_v3(const float* __restrict__ x,", 4),      # the kernel's opening brace
    ("removed barrier after the gather", "fused.cu", "        if (owner != r) p1[e] = load_remote(&p1[e], owner);\n    }\n    __syncthreads();",
     "        if (owner != r) p1[e] = load_remote(&p1[e], owner);\n    }\n", fused, "race",
     "if (owner != r) p1[e] = load_remote(&p1[e], owner);"),
]


NEEDS_NVCC = {"missing __align__": "shared-variable alignments come from nvcc's PTX (x86 over-aligns arrays)",
              "launch over its bounds": "launch bounds and registers come from nvcc's PTX and ptxas' resource report"}


@pytest.mark.parametrize("name,file,old,new,run,kind,line,offset", [p if len(p) == 8 else (*p, 0) for p in PLANTED],
                         ids=[p[0] for p in PLANTED])
def test_a_planted_bug_is_reported_with_its_kind_file_and_line(name, file, old, new, run, kind, line, offset, tmp_path):
    if name in NEEDS_NVCC and (missing := modules.sm90(KERNELS / file).missing):
        pytest.skip(f"{missing}: {NEEDS_NVCC[name]}")
    found = reports(planted(tmp_path, file, old, new), *run())
    mine = [r for r in found if r.kind == kind]
    assert mine, f"{name}: no {kind} report among {found}"
    where = f"{file}:{line_of(file, line) + offset}"
    assert any(where in r.text for r in mine), f"{name}: no {kind} report names {where}: {mine}"
    assert all(re.search(r"block \(\d+,\d+,\d+\)( thread \(\d+,\d+,\d+\))?", r.text) or r.kind == "launch"
               for r in found), found


def test_a_wrong_value_is_named_by_the_first_launch_that_computes_it(tmp_path, params, dataset):
    """An SGD step with its sign flipped is no emulator report, only a wrong value: the step's check
    fails and first divergence names the launch, kernel, file, buffer and index (every launch
    before it matched its NumPy model)."""
    gpu = planted(tmp_path, "sgd.cu", "        p[i] -= lr * g[i];", "        p[i] += lr * g[i];")
    (_, forward), (_, sgd) = emu_main.check_variant("1", params, dataset, 1, gpu=lambda: gpu)
    assert forward is None
    assert sgd.splitlines()[-1].startswith(f"  first divergence: launch {len(ck.train_step('1', 7, 0.01))} of "
                                           f"{len(ck.train_step('1', 7, 0.01))}, sgd_update (sgd.cu) wrote params: "
                                           "conv1.weight[0] = "), sgd


def test_the_unchanged_kernels_run_clean():
    """The same runs on the checkout's kernels produce no report (what makes the plants meaningful)."""
    gpu = emu_gpu()
    for run in (dense, fused, conv, pool, loss, sgd, lambda: dense(IN=500, OUT=10)):
        run_launches(gpu, *run())


def test_an_over_launch_reads_out_of_bounds():
    launches, inputs, outputs = pool(nc=140)
    found = reports(emu_gpu(), [ck.maxpool_forward(B("x"), B("y"), 141, 24)], inputs, outputs)
    assert kinds(found) == {"out-of-bounds"} and f"pool.cu:{line_of('pool.cu', 'y[idx] = fmaxf')}" in found[0].text


@pytest.mark.parametrize("grid,block,why", [
    ((20, 50, 1), (1056, 1, 1), "exceeds sm_90's limits"),
    ((20, 50, 1), (32, 1, 65), "exceeds sm_90's limits"),
    ((1, 70000, 1), (256, 1, 1), "exceeds sm_90's limits"),
])
def test_launch_limits_are_sm90s(grid, block, why):
    rng = np.random.default_rng(6)
    launch = ck.Launch("conv_backward_filter_v2", grid, block,
                       (B("dy"), B("x"), B("dw"), np.int32(1), np.int32(20), np.int32(12), np.int32(12), np.int32(50)))
    found = reports(emu_gpu(), [launch], dict(dy=ints(rng, (1, 50, 8, 8)), x=ints(rng, (1, 20, 12, 12))), dict(dw=(50, 20, 5, 5)))
    assert kinds(found) == {"launch"} and why in found[0].text and "conv.cu:" in found[0].text


def test_registers_per_block_are_checked_against_an_sm90_sm():
    """nvcc's register count (64 for conv_backward_filter_v2) times 1024 threads fills an SM's 65536
    exactly; 72 per thread would not fit, and the launch is refused before it runs."""
    gpu = emu_gpu()
    module = modules.load("conv.cu", gpu.kernel_dir, gpu.runtime_dir)
    if module.sm90.missing:
        pytest.skip(f"{module.sm90.missing}: registers come from ptxas' resource report")
    args = (0, 0, 0, 1, 20, 12, 12, 50)
    launch = modules.Launch(module, "conv_backward_filter_v2", (20, 50, 1), (1024, 1, 1), args, "PPPiiiii")
    assert launch.desc.registers == module.sm90.kernels["conv_backward_filter_v2"].registers > 0
    launch.desc.registers = 72
    with pytest.raises(EmuError, match=r"launch: launch of the kernel at conv.cu:\d+ \(conv_backward_filter_v2\) refused: "
                                       r"32 warps x 72 registers per thread \(nvcc's resource report\) need 73728 registers"):
        launch()


def test_without_nvcc_the_launch_limits_it_gives_are_said_to_be_unchecked(monkeypatch):
    monkeypatch.setattr(modules.shutil, "which", lambda tool: None)
    assert modules.sm90(KERNELS / "fused.cu") == modules.Sm90({}, {}, "nvcc not found on PATH")
    assert emu_main.unchecked_limits() == ("launch limits from nvcc (registers per block, __launch_bounds__) not "
                                           "checked: nvcc not found on PATH; shared-memory alignments are x86's")


def test_a_fused_launch_that_is_not_whole_clusters_is_refused():
    launches, inputs, outputs = fused()
    launch = launches[0]._replace(grid=(12, 1, 1))
    found = reports(emu_gpu(), [launch], inputs, outputs)
    assert kinds(found) == {"launch"} and "not a multiple of the cluster (8,1,1)" in found[0].text


def test_a_full_mask_shuffle_in_a_partial_warp_is_refused():
    rng = np.random.default_rng(7)
    launch = ck.Launch("conv_backward_filter_v2", (20, 50, 1), (240, 1, 1),
                       (B("dy"), B("x"), B("dw"), np.int32(1), np.int32(20), np.int32(12), np.int32(12), np.int32(50)))
    found = reports(emu_gpu(), [launch], dict(dy=ints(rng, (1, 50, 8, 8)), x=ints(rng, (1, 20, 12, 12))), dict(dw=(50, 20, 5, 5)))
    assert kinds(found) == {"sync"} and "partial warp of 16 threads" in found[0].text
    assert f"conv.cu:{line_of('conv.cu', '__shfl_down_sync')}" in found[0].text


def test_fused_cu_keeps_its_ptx_for_nvcc_and_has_none_for_the_emulator():
    text = (KERNELS / "fused.cu").read_text()
    ptx, emu = re.search(r"#ifndef LENET_CUEMU\n(.*?)#else(.*?)#endif", text, re.S).groups()
    assert ptx.count("asm volatile") == 5 and "asm" not in emu
    assert {"cluster_rank", "cluster_sync", "load_remote"} <= set(re.findall(r"define (\w+)\(", emu))


# --- the C++ interface other modules use (csrc/cudnn_net.cu's xent_grad, through cudaLaunchKernel) -------
CUDA_UNIT = r"""
#include <cuda_runtime.h>
namespace {
__global__ void scale(float* x, int n, float a) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}
__global__ void total(const float* x, int n, double* out) {          // a shared-memory tree sum
    __shared__ double part[256];
    double s = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += x[i];
    part[threadIdx.x] = s;
    __syncthreads();
    for (int k = blockDim.x / 2; k > 0; k /= 2) {
        if (threadIdx.x < k) part[threadIdx.x] += part[threadIdx.x + k];
        __syncthreads();
    }
    if (threadIdx.x == 0) *out = part[0];
}
}  // namespace
extern "C" int launch_scale(float* x, int n, float a) {          // as cudnn_net.cu would write it
    void* args[] = {&x, &n, &a};
    return cudaLaunchKernel(scale, dim3(1), dim3(256), args, 0, cudaStream_t(0));
}
extern "C" int launch_total(const float* x, int n, double* out) {
    return cuemu::launch(total, dim3(1), dim3(256), x, n, out);
}
"""


def cuda_include():
    for root in [Path("/usr/local/cuda/include"), *(Path(p) / "nvidia" / "cu13" / "include" for p in site.getsitepackages())]:
        if (root / "cuda_runtime.h").is_file():
            return root
    pytest.skip("cuda_runtime.h not found (CUDA toolkit or the nvidia-cuda-runtime wheel)")


def test_a_unit_that_includes_cuda_runtime_h_launches_through_cuda_launch_kernel():
    include, emu = cuda_include(), CHECKOUT / "python" / "lenet" / "emu"
    emu_gpu()
    rt = runtime.load(emu)
    so = build.shared_object("cuda-unit-test", {"unit.cpp": CUDA_UNIT}, flags=modules.KERNEL_FLAGS,
                             compile_flags=[*modules.compile_flags((), emu), "-DCUEMU_CUDA_RUNTIME", "-DCUEMU_LAUNCH_NOW",
                                            "-I", str(include)],
                             link_flags=[str(rt.path), "-Wl,--no-undefined"], depends=[*runtime.prelude(emu), rt.path])
    lib = ctypes.CDLL(str(so))
    lib.launch_scale.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_float]
    lib.launch_total.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
    x = np.arange(200, dtype=np.float32)
    buf, out = rt.malloc(x.nbytes), rt.malloc(8)
    rt.htod(buf, x)
    assert lib.launch_scale(buf, 200, 2.0) == 0                            # cudaSuccess
    assert lib.launch_total(buf, 200, out) == 0
    got, total = np.empty_like(x), np.empty(1, np.float64)
    rt.dtoh(got, buf)
    rt.dtoh(total, out)
    np.testing.assert_array_equal(got, 2 * x)
    assert total[0] == 2 * x.sum()
    assert lib.launch_scale(buf, 300, 2.0) == 719                          # cudaErrorLaunchFailure
    found = rt.take_reports()
    assert [r.kind for r in found] == ["out-of-bounds"] and "unit.cpp:6" in found[0].text
    # host code writing device memory itself (a CPU reference of a library call) must say so
    fresh = rt.malloc(x.nbytes)
    ctypes.memmove(fresh, x.ctypes.data, x.nbytes)
    assert lib.launch_total(fresh, 200, out) >= 1                          # cuemu::launch: the new reports
    assert {r.kind for r in rt.take_reports()} == {"uninitialised"}
    assert rt.lib.cuemu_mark_written(ctypes.c_void_p(fresh), ctypes.c_size_t(x.nbytes)) == 0
    assert lib.launch_total(fresh, 200, out) == 0
    for pointer in (buf, out, fresh):
        rt.free(pointer)


# --- the build cache -----------------------------------------------------------------------------------
PROBE = 'extern "C" int probe() { return %d; }\n'
OTHER = 'extern "C" int other() { return 7; }\n'


def builds(cache):
    """The cache's builds by name, digests left out: {'obj-p': 1, 'probe': 1, ...}."""
    return collections.Counter(p.name.rsplit("-", 1)[0] for p in cache.iterdir())


def test_builds_are_cached_by_content_and_safe_when_two_processes_race(tmp_path, monkeypatch):
    emu_gpu()
    monkeypatch.setenv("LENET_EMU_CACHE", str(tmp_path))
    sources = {"p.cpp": PROBE % 1, "q.cpp": OTHER}
    script = f"from lenet.emu import build; print(build.shared_object('probe', {sources!r}))"
    racers = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True) for _ in range(2)]
    paths = {p.communicate()[0].strip() for p in racers}
    assert all(p.returncode == 0 for p in racers) and len(paths) == 1
    assert ctypes.CDLL(paths.pop()).probe() == 1
    assert builds(tmp_path) == {"obj-p": 1, "obj-q": 1, "probe": 1}       # one object per source, one module
    assert build.shared_object("probe", sources) == next(tmp_path.glob("probe-*")) / "probe.so"
    changed = build.shared_object("probe", {**sources, "p.cpp": PROBE % 2})
    assert ctypes.CDLL(str(changed)).probe() == 2
    assert builds(tmp_path) == {"obj-p": 2, "obj-q": 1, "probe": 2}       # q.cpp was not compiled again


def test_a_compile_error_names_the_file_and_the_error(tmp_path, monkeypatch):
    emu_gpu()
    monkeypatch.setenv("LENET_EMU_CACHE", str(tmp_path))
    with pytest.raises(build.BuildError, match=r"^g\+\+ failed on bad.cpp: bad.cpp:1:18: error: expected primary-expression"):
        build.shared_object("bad", {"bad.cpp": "int f() { return }\n"})
    assert [p.name for p in tmp_path.iterdir()] == []                    # no half build left behind


def test_a_cache_path_that_is_no_directory_is_one_line_naming_it(tmp_path, monkeypatch):
    emu_gpu()
    (tmp_path / "file").write_text("")
    (tmp_path / "dangling").symlink_to(tmp_path / "gone")
    for path, why in [("file", "is a file, not a directory"), ("dangling", f"is a symbolic link to {tmp_path / 'gone'}, "
                                                                          "which does not exist"),
                      ("file/sub", "cannot be created: Not a directory")]:
        monkeypatch.setenv("LENET_EMU_CACHE", str(tmp_path / path))
        with pytest.raises(build.BuildError, match=f"^LENET_EMU_CACHE={re.escape(str(tmp_path / path))} {why}") as err:
            build.shared_object("probe", {"p.cpp": PROBE % 1})
        assert "\n" not in str(err.value)


def test_a_damaged_cached_build_is_built_again_once_then_names_the_cache(tmp_path, monkeypatch):
    emu_gpu()
    monkeypatch.setenv("LENET_EMU_CACHE", str(tmp_path))
    make = lambda: build.shared_object("probe", {"p.cpp": PROBE % 3})       # noqa: E731
    path = make()
    path.write_bytes(path.read_bytes()[:100])                             # truncated
    with pytest.raises(OSError):
        ctypes.CDLL(str(path))
    assert build.open_built(make, lambda p: ctypes.CDLL(str(p))).probe() == 3
    junk = lambda: build.cached("junk", "0", lambda work: (work / "junk.so").write_bytes(b"junk")) / "junk.so"  # noqa: E731
    with pytest.raises(build.BuildError, match=rf"junk.so was built again and still fails to load \(.*\); the build "
                                               rf"cache can be deleted, always safely: rm -r {re.escape(str(tmp_path))}$"):
        build.open_built(junk, lambda p: ctypes.CDLL(str(p)))


# --- python -m lenet.emu -------------------------------------------------------------------------------
def emu_cli(*args, **env):
    return subprocess.run([sys.executable, "-m", "lenet.emu", *args], capture_output=True, text=True,
                          env={**os.environ, **env}, cwd=CHECKOUT)


def test_the_command_prints_the_verdict_and_says_it_is_never_timed():
    emu_gpu()
    done = emu_cli("--variant", "1", "--batch", "1")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[:2] == ["v1 forward, batch 1: agrees with the NumPy reference",
                         "v1 SGD step, batch 7: agrees with the NumPy reference"]
    assert lines[2].startswith("v1 forward, batch 1, what each layer's threads load and store (kB")
    assert [line.split()[:2] for line in lines[3:9]] == [[layer, "1"] for layer in lenet.model.LAYERS]
    assert lines[3].split()[2:5] == ["2,350.1", "/", "46.1"]       # conv1 (below)
    assert lines[9].startswith("verdict: 2 of 2 checks agree") and lines[10] == NEVER_TIMED


# --- what each layer loads and stores (counts, never times) ---------------------------------------------
OUTPUT_FLOATS = {"conv1": 20 * 24 * 24, "pool1": 20 * 12 * 12, "conv2": 50 * 8 * 8, "pool2": 50 * 4 * 4,
                 "fc1": 500, "fc2": 10}                                  # per image, lenet.model's shapes


@pytest.mark.parametrize("variant", ck.VERSIONS)
def test_each_layer_stores_its_output_once_and_the_fused_forward_only_the_logits(variant, params, dataset):
    n = 3
    counts = launcher.layer_traffic(cn.CudaNet("emu", emu_gpu(), params, variant), dataset.test_x[:n])
    if variant == "3":
        assert list(counts) == ["+".join(lenet.model.LAYERS)]
        fused, = counts.values()
        assert fused["launches"] == 1 and fused["global_written"] == n * 10 * 4      # the logits, nothing else
        assert fused["shared_written"] > 0 and fused["global_read"] > n * 28 * 28 * 4
        return
    assert list(counts) == list(lenet.model.LAYERS)
    for layer, c in counts.items():
        assert c["launches"] == 1 and c["global_written"] == n * OUTPUT_FLOATS[layer] * 4, (layer, c)
    if variant == "1":                   # one thread per output, every operand from device memory
        assert counts["conv1"]["global_read"] == n * OUTPUT_FLOATS["conv1"] * (25 + 25 + 1) * 4
        assert all(c["shared_read"] == c["shared_written"] == 0 for c in counts.values())
    else:                                # the tiled convolutions and GEMMs stage their operands in shared memory
        assert all(counts[layer]["shared_read"] > 0 for layer in ("conv1", "conv2", "fc1", "fc2"))
        assert counts["conv2"]["global_read"] < counts["conv2"]["shared_read"]


def test_traffic_counts_every_access_of_a_launch(params, dataset):
    """The same forward twice counts the same bytes: counts are exact, not sampled."""
    net = cn.CudaNet("emu", emu_gpu(), params, "2")
    assert launcher.layer_traffic(net, dataset.test_x[:2]) == launcher.layer_traffic(net, dataset.test_x[2:4])


@pytest.mark.parametrize("args,env,message", [
    (("--batch", "0"), {}, "error: argument --batch: expected an integer in 1..64, got '0'"),
    (("--batch", "1e9"), {}, "error: argument --batch: expected an integer in 1..64, got '1e9'"),
    (("--variant", "4"), {}, "error: argument --variant: invalid choice"),
    ((), {"CXX": "no-such-g++"}, "error: no-such-g++ not found on PATH: the CPU emulator of CUDA semantics compiles with it"),
])
def test_bad_input_is_one_line_and_exit_2(args, env, message):
    done = emu_cli(*args, **env)
    assert done.returncode == 2 and done.stdout == "" and done.stderr.startswith(message) and done.stderr.count("\n") == 1


# --- bad input to the emulator --------------------------------------------------------------------------
def test_hold_cu_is_not_emulated():
    with pytest.raises(lenet.errors.UnavailableError, match=r"^hold.cu is not emulated: a timing spin"):
        emu_gpu().function("hold.cu", "hold_ns")


def test_arguments_of_the_wrong_types_are_refused_before_the_launch():
    gpu = emu_gpu()
    x, y = gpu.empty(4, np.float32), gpu.empty(1, np.float32)
    launch = ck.Launch("maxpool_forward", (1, 1, 1), (32, 1, 1), (B("x"), B("y"), np.float32(1), np.int32(2), np.int32(2)))
    with pytest.raises(TypeError, match=r"^maxpool_forward takes \(PPiii\), launched with \(PPfii\)$"):
        cn.bind(gpu, [launch], {"x": x, "y": y})


def test_a_host_copy_outside_its_buffer_is_reported():
    gpu = emu_gpu()
    buf = gpu.empty(4, np.float32)
    with pytest.raises(EmuError, match=r"out-of-bounds: host-to-device copy of 16 bytes at \d+ is not inside one device buffer"):
        gpu.rt.htod(buf.ptr + 4, np.zeros(4, np.float32))


def test_another_machine_is_one_line(monkeypatch):
    monkeypatch.setattr(build.platform, "machine", lambda: "aarch64")
    assert build.unavailable() == ("the CPU emulator of CUDA semantics needs Linux on x86-64 "
                                   "(this is Linux aarch64)")


def test_a_read_past_a_parameter_tensor_names_the_tensor_argument(tmp_path):
    """The parameters are one flat buffer, tensors side by side: fc1 rows read past fc1.weight land
    in fc1.bias and fc2.weight, written memory of the same buffer. Each tensor argument is checked
    against its own extent (the launch plan's, cuemu_arg_extent): out-of-bounds, naming it."""
    gpu = planted(tmp_path, "fused.cu", "rows = min(FC1_ROWS, FC1_OUT - row0);", "rows = FC1_ROWS;")
    found = [r for r in reports(gpu, *fused()) if r.kind == "out-of-bounds"]
    where = f"fused.cu:{line_of('fused.cu', 'float4 a = __ldg(wr + j), v = xv[j];')}"
    named = rf"\d+ bytes past the end of argument params\[fc1\.weight\] \({500 * 800 * 4} bytes\), at .*{where} "
    assert any(re.search(named, r.text) for r in found), found
