"""The hand-written CUDA C kernels (python/lenet/kernels/*.cu) and their cupy / pycuda launchers.

Without a GPU: every .cu file compiles for sm_90 (nvcc, and NVRTC when importable) with the -D
constants of _cuda_kernels and fails without any one of them, every CuPy call is on the backend's
stream, the staging cache and the timing loops behave on models of their inputs, every kernel
the launch sequences name exists with the argument count and types they pass, the device-time
names follow the launch count, and asking for the gpu without one is one clear error.
Executed, on every launcher: each kernel alone against the reference op (exact on small
integers), whole-network forward and one SGD step against the reference, for every kernel
version, with outputs poisoned with NaN before each run. The launcher "emu" (marked emu) is the
CPU emulator of CUDA semantics (lenet.emu), built from this checkout, which runs everywhere and
turns any race, out-of-bounds access or barrier error into a failure; "cupy" and "pycuda" are
marked gpu.
"""
from __future__ import annotations

import ast
import ctypes
import re
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

import lenet
from lenet.backends import _cuda_driver, _cuda_kernels as ck
from lenet.backends import _cuda_net as cn
from lenet.backends import _device_timing
from lenet.backends import numpy as ref
from lenet.errors import UnavailableError
from agree import assert_logits_agree, assert_step_agrees, require
from lenet.emu import divergence
from lenet.emu.launcher import NEVER_TIMED

from conftest import emu_gpu
from kernel_runs import B, ints, run_launches

LAUNCHERS = (pytest.param("emu", marks=pytest.mark.emu), pytest.param("cupy", marks=pytest.mark.gpu),
             pytest.param("pycuda", marks=pytest.mark.gpu))
BATCHES = (1, 3, 7, 64)         # the whole network's forward


def kernel_batches():
    """(launcher, n) for each kernel alone: batches 1, 7, 64; on the emulator 1, 3, 7 (the whole
    forward at 64 runs there too: 64 here would add ~15 s to CI and run no new code)."""
    return [pytest.param(*l.values, n, marks=l.marks) for l in LAUNCHERS
            for n in ((1, 3, 7) if l.values[0] == "emu" else (1, 7, 64))]
PTX_TYPE = {ck.Buf: ".u64", np.int32: ".u32", np.float32: ".f32", np.uint64: ".u64"}


def all_launches():
    """Every Launch the backends can issue, over versions and a few batch sizes."""
    return [l for v in ck.VERSIONS for n in (1, 7, 64)
            for l in ck.forward(v, n) + ck.train_step(v, n, 0.05)] + [ck.hold(1000)]


# --- no GPU needed ---------------------------------------------------------------------------
@pytest.fixture(scope="session")
def ptx(tmp_path_factory):
    """{file: PTX text} from nvcc -arch=sm_90, after ptxas has also assembled it for sm_90."""
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not found on PATH: cannot compile-check the CUDA kernels")
    out, tmp = {}, tmp_path_factory.mktemp("ptx")     # --keep leaves the PTX next to the cubin
    for file in ck.KERNEL_FILES:
        cubin = tmp / file.replace(".cu", ".cubin")
        run = subprocess.run(["nvcc", "-arch=sm_90", *ck.OPTIONS, "-cubin", "--keep", f"--keep-dir={tmp}",
                              "-o", str(cubin), str(ck.KERNEL_DIR / file)], capture_output=True, text=True)
        assert run.returncode == 0, f"nvcc failed on {file}:\n{run.stderr}"
        out[file] = (tmp / file.replace(".cu", ".ptx")).read_text()
    return out


def test_every_cu_file_is_listed():
    assert sorted(p.name for p in ck.KERNEL_DIR.glob("*.cu")) == sorted(ck.KERNEL_FILES)


def test_every_cu_file_compiles_with_nvcc(ptx):
    for file, text in ptx.items():
        assert ".visible .entry" in text, file


def test_every_launched_kernel_exists_with_matching_parameters(ptx):
    entries = {}
    for file, text in ptx.items():
        for name, params in re.findall(r"\.visible \.entry (\w+)\(([^)]*)\)", text):
            entries[name] = (file, re.findall(r"\.param (\.\w+) ", params))
    for name, file in ck.FILE_OF.items():
        assert name in entries and entries[name][0] == file, f"kernel {name} not compiled from {file}"
    for launch in all_launches():
        _, types = entries[launch.kernel]
        passed = [PTX_TYPE[type(a)] for a in launch.args]
        assert passed == types, f"{launch.kernel}: launched with {passed}, declared {types}"
        assert np.prod(launch.block) <= 1024 and all(g >= 1 for g in launch.grid), launch


def test_fused_kernel_is_a_cluster_kernel(ptx):
    assert re.search(r"\.reqnctapercluster\s+8", ptx["fused.cu"]), "lenet_forward_v3 lost its 8-CTA cluster"


@pytest.fixture(scope="session")
def nvrtc():
    """libnvrtc through ctypes, found the way CUDA's own Python packages find it (cuda-pathfinder:
    the nvidia-cuda-nvrtc wheel, then the toolkit), else the toolkit's libnvrtc.so on the loader path.
    Loading libnvrtc by path is not enough: at compile time it dlopens its sibling
    libnvrtc-builtins by name, which the loader finds only if it is already loaded, so that is
    loaded first from the same directory."""
    try:
        from cuda.pathfinder import load_nvidia_dynamic_lib
        candidates = [load_nvidia_dynamic_lib("nvrtc").abs_path]
    except Exception:                   # not installed, or no NVRTC where it looks
        candidates = []
    for path in candidates + ["libnvrtc.so"]:
        for builtins in sorted(Path(path).parent.glob("libnvrtc-builtins.so.*")) if "/" in path else []:
            ctypes.CDLL(str(builtins), mode=ctypes.RTLD_GLOBAL)
        try:
            return ctypes.CDLL(path)
        except OSError:
            pass
    pytest.skip("libnvrtc not found (pip install nvidia-cuda-nvrtc, or a CUDA toolkit on the loader path)")


def nvrtc_compile(nvrtc, file, options):
    """(status, log, cubin size) of NVRTC compiling `file` for sm_90 with `options`."""
    prog, size = ctypes.c_void_p(), ctypes.c_size_t()
    assert nvrtc.nvrtcCreateProgram(ctypes.byref(prog), ck.source(file).encode(), file.encode(), 0, None, None) == 0
    argv = [b"-arch=sm_90", *(o.encode() for o in options)]
    status = nvrtc.nvrtcCompileProgram(prog, len(argv), (ctypes.c_char_p * len(argv))(*argv))
    nvrtc.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    nvrtc.nvrtcGetProgramLog(prog, log)
    nvrtc.nvrtcGetCUBINSize(prog, ctypes.byref(size))
    nvrtc.nvrtcDestroyProgram(ctypes.byref(prog))
    return status, log.value.decode(), size.value


@pytest.mark.parametrize("file", ck.KERNEL_FILES)
def test_every_cu_file_compiles_with_nvrtc(file, nvrtc):
    """The runtime compile path of the cupy backend: NVRTC has no math.h and no default includes."""
    status, log, size = nvrtc_compile(nvrtc, file, ck.OPTIONS)
    assert status == 0, f"NVRTC failed on {file}:\n{log}"
    assert size > 0


def used_defines(file):
    """The names of ck.DEFINES that `file` uses outside its comments."""
    code = re.sub(r"//[^\n]*", "", ck.source(file))
    return [name for name in ck.DEFINES if re.search(rf"\b{name}\b", code)]


def test_launch_constants_are_defined_only_in_python():
    """No .cu file #defines a constant of ck.DEFINES (no fallback that could drift), and every
    constant is used by some file."""
    for file in ck.KERNEL_FILES:
        defined = re.findall(r"#\s*(?:define|ifndef|ifdef)\s+(\w+)", ck.source(file))
        assert not set(defined) & set(ck.DEFINES), (file, defined)
    assert {name for file in ck.KERNEL_FILES for name in used_defines(file)} == set(ck.DEFINES)


@pytest.mark.parametrize("file", [f for f in ck.KERNEL_FILES if used_defines(f)])
def test_a_cu_file_without_its_constants_does_not_compile(file, nvrtc):
    """Leaving out any one -D option the file uses is a compile error, not a silent default."""
    for name in used_defines(file):
        status, log, _ = nvrtc_compile(nvrtc, file, [o for o in ck.OPTIONS if not o.startswith(f"-D{name}=")])
        assert status != 0 and name in log, f"{file} compiled without -D{name}"


def test_param_layout_round_trips_and_is_aligned():
    params = lenet.model.init_params(3)
    back = ck.unflatten(ck.flatten(params))
    assert all(np.array_equal(back[k], params[k]) for k in params)
    assert all(off % ck.ALIGN == 0 for off in ck.PARAM_OFFSETS.values())


def test_cuda_problem_names_the_driver_version_and_the_cuinit_result():
    problem = _cuda_driver.cuda_problem
    assert problem(0, 13000, 1) is None and problem(0, 13020, 2) is None
    assert problem(0, 12040, 1) == "CUDA driver 12.4 is older than CUDA 13.0 needs (update the NVIDIA driver)"
    assert problem(35, 11080) == "CUDA driver 11.8 is older than CUDA 13.0 needs (update the NVIDIA driver)"
    assert problem(100, 13000) == "no CUDA device (cuInit returned CUDA_ERROR_NO_DEVICE 100)"
    assert problem(35, 0).startswith("the NVIDIA driver is too old (cuInit returned CUDA_ERROR_INSUFFICIENT_DRIVER 35")
    assert problem(34, 0).startswith("libcuda.so.1 is the toolkit's stub")
    assert problem(12345, 13000) == "the CUDA driver failed (cuInit returned CUresult 12345)"
    assert problem(0, 13000, 0) == "no CUDA device (the driver reports none)"
    for status in [*_cuda_driver.CU_RESULT, 1]:
        assert "\n" not in problem(status, 0)


class Event:
    """What Staging needs of an event: synchronize(), counted."""

    def __init__(self):
        self.waits = 0

    def synchronize(self):
        self.waits += 1


def test_staging_keeps_one_pinned_buffer_per_device_buffer_and_evicts_the_oldest():
    made = []
    staging = cn.Staging(lambda key: made.append(key) or (np.zeros(key[2], key[1]), Event()), keep=3)
    first = staging.get((0x100, "<f4", 784))
    assert staging.get((0x100, "<f4", 784)) is first and first[1].waits == 2     # reused, waited on
    for n in (7, 64, 128):                                                       # growing batches
        staging.get((0x200 + n, "<f4", 784 * n))
    assert len(staging.entries) == 3 and (0x100, "<f4", 784) not in staging.entries
    assert first[1].waits == 3                          # evicted only after its last copy finished
    staging.get((0x100, "<f4", 784))
    assert len(made) == 5 and len(staging.entries) == 3 and (0x207, "<f4", 5488) not in staging.entries


# CuPy calls that neither allocate, copy, fill nor launch (so take no stream), or pass self.stream
NOT_ON_A_STREAM = ("self.cp.cuda.Stream", "self.cp.cuda.Device", "self.cp.cuda.Event",
                   "self.cp.cuda.alloc_pinned_memory", "self.cp.cuda.get_elapsed_time", "self.cp.RawModule")


def test_every_cupy_call_runs_on_the_backend_stream():
    """By construction, in backends/cupy.py: every call into CuPy that allocates, copies, fills or
    launches sits inside `with self.stream:` or passes self.stream explicitly; the shared launch
    loop (Launcher.run, the only caller of launch) runs inside it too."""
    tree = ast.parse((Path(ck.__file__).parent / "cupy.py").read_text())
    on_stream = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.With) and [ast.unparse(i.context_expr) for i in node.items] == ["self.stream"]:
            on_stream |= {id(n) for n in ast.walk(node)}
    gpu = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "GPU")
    launch = next(f for f in gpu.body if isinstance(f, ast.FunctionDef) and f.name == "launch")
    in_launch = {id(n) for n in ast.walk(launch)}       # runs on whatever stream its caller set
    checked = 0
    for node in ast.walk(gpu):
        if not isinstance(node, ast.Call) or id(node) in in_launch:
            continue
        callee, args = re.sub(r"^cupy\.", "self.cp.", ast.unparse(node.func)), [ast.unparse(a) for a in node.args]
        stream_work = (callee.startswith("self.cp.") and not callee.startswith(NOT_ON_A_STREAM)
                       or callee in ("buf.fill", "super().run", "self.run"))
        if stream_work:
            checked += 1
            assert id(node) in on_stream or {"self.stream", "self.stream.ptr"} & set(args), \
                f"cupy.py line {node.lineno}: {ast.unparse(node)} is not on the backend's stream"
    assert checked >= 7
    launcher = ast.parse(Path(cn.__file__).read_text())
    callers = {f.name for f in ast.walk(launcher) if isinstance(f, ast.FunctionDef)
               for c in ast.walk(f) if isinstance(c, ast.Call) and ast.unparse(c.func) == "self.launch"}
    assert callers == {"run"}


class Stream:
    """A stream model for the timing loops: commands run in order, each starting when both the
    device is free and the host has enqueued it (perf_counter); events take the time then."""

    def __init__(self, kernel_us):
        self.free, self.kernel_us = 0.0, kernel_us

    def _start(self):
        self.free = max(self.free, time.perf_counter())

    def event(self):
        return [None]

    def record(self, event):
        self._start()
        event[0] = self.free

    def elapsed_ms(self, start, end):
        time.sleep(max(0.0, end[0] - time.perf_counter()))     # synchronize: the host waits for the device
        return (end[0] - start[0]) * 1e3

    def hold(self, ns):
        self._start()
        self.free += ns * 1e-9

    def kernel(self, us, host_us=0.0):
        def launch():
            time.sleep(host_us * 1e-6)            # the host's launch cost
            self._start()
            self.free += us * 1e-6
        return launch


def test_kernel_times_exclude_host_gaps_and_forward_times_include_them(monkeypatch):
    durations = [5.0, 2.0, 8.0]
    stream = Stream(durations)
    launches = [stream.kernel(us, host_us=300) for us in durations]
    with monkeypatch.context() as m:   # doublings to spare: a loaded 2-core runner can stall the host for ms
        m.setattr(_device_timing, "ATTEMPTS", 12)
        kernels = _device_timing.kernels_us(stream, launches, 3)
    np.testing.assert_allclose(kernels, sum(durations), rtol=1e-6)     # the hold grew to cover 900 us
    forward = _device_timing.forward_us(stream, lambda: [f() for f in launches], 3)
    assert min(forward) > 900
    slow = [stream.kernel(1.0, host_us=_device_timing.HOLD_NS * 2 ** _device_timing.ATTEMPTS / 1e3)]
    with pytest.raises(RuntimeError, match="longer than"):
        _device_timing.kernels_us(stream, slow, 1)


def test_layer_times_assign_each_launch_by_its_kernel_name(monkeypatch):
    """The per-launch event pairs of device_times's kernel timing, assigned to layers (GPU layer_times_us)."""
    # a first hold of 20 ms: a host stalled 24 ms on a loaded CI runner outlasted all eight of 0.1-12.8 ms
    monkeypatch.setattr(_device_timing, "HOLD_NS", 2 * 10 ** 7)
    durations = {"conv_forward_v2": 5.0, "maxpool_forward": 1.0, "gemm_v2": 2.0}
    names = ["conv_forward_v2", "maxpool_forward", "conv_forward_v2", "maxpool_forward", "gemm_v2", "gemm_v2"]
    stream = Stream(durations)
    times = _device_timing.layer_times_us(stream, [stream.kernel(durations[n]) for n in names], names, 2)
    assert list(times) == list(lenet.model.LAYERS)
    for layer, name in zip(lenet.model.LAYERS, names):
        np.testing.assert_allclose(times[layer], durations[name], rtol=1e-3, atol=0.5)
    fused = _device_timing.layer_times_us(stream, [stream.kernel(9.0)], ["lenet_forward_v3"], 2)
    assert list(fused) == ["+".join(lenet.model.LAYERS)]


class TimingModel:
    """The launcher interface for the timing loops alone: host buffers, launches that do nothing,
    and the stream model's events (device time passes only in holds). No kernel is modelled: the
    kernels themselves are executed by the tests below."""

    free = 0.0
    event, record, elapsed_ms, hold, _start = Stream.event, Stream.record, Stream.elapsed_ms, Stream.hold, Stream._start

    def compute_capability(self):
        return (9, 0)

    def empty(self, count, dtype):
        return np.zeros(count, dtype)

    zeros = empty

    def to_device(self, host):
        return np.array(host).ravel()

    def pointer(self, buf, offset):
        return buf[offset:]

    def upload(self, buf, x):
        buf[:x.size] = x.ravel()

    def function(self, file, name):
        return name

    def bind(self, fn, grid, block, args, extents):
        return fn

    def capture(self, bound):
        return bound

    def run(self, bound):
        pass


def timing_model_net(variant, request, monkeypatch):
    """(a CudaNet of `variant` on the TimingModel with a hold long enough for any host, the digits)."""
    monkeypatch.setattr(_device_timing, "HOLD_NS", 2 * 10 ** 8)
    params = request.getfixturevalue("params")
    return cn.CudaNet("model", TimingModel(), params, variant, graphs=variant.endswith("g")), \
        request.getfixturevalue("dataset")


@pytest.mark.parametrize("variant", lenet.backends.variants("cupy"))
def test_device_times_are_named_forward_and_kernels(variant, request, monkeypatch):
    net, dataset = timing_model_net(variant, request, monkeypatch)
    times = net.device_times_us(dataset.test_x[:1], 3)
    assert set(times) == {"forward", "kernels"} and all(len(t) == 3 and min(t) >= 0 for t in times.values())
    one_launch = variant.endswith("g") or variant == "3"    # a graph replay or the fused kernel
    assert (times["kernels"] is times["forward"]) == one_launch


@pytest.mark.parametrize("variant", lenet.backends.variants("cupy"))
def test_layer_times_name_every_layer(variant, request, monkeypatch):
    """Per-launch events assigned to layers by kernel name; the fused v3 is one group."""
    net, dataset = timing_model_net(variant, request, monkeypatch)
    times = net.layer_times_us(dataset.test_x[:1], 2)
    assert list(times) == (["+".join(lenet.model.LAYERS)] if variant == "3" else list(lenet.model.LAYERS))
    assert all(len(t) == 2 and min(t) >= 0 for t in times.values()) and net.layers_method.startswith("CUDA events")


@pytest.mark.emu
def test_the_emulator_is_never_timed(params, dataset):
    net = cn.CudaNet("emu", emu_gpu(), params, "3")
    with pytest.raises(UnavailableError, match=NEVER_TIMED):
        net.device_times_us(dataset.test_x[:1], 1)
    with pytest.raises(UnavailableError, match=NEVER_TIMED):
        net.layer_times_us(dataset.test_x[:1], 1)


@pytest.mark.parametrize("backend", ("cupy", "pycuda"))
def test_gpu_without_a_gpu_is_one_clear_error(backend):
    if lenet.backends.cuda_unavailable() is None:
        pytest.skip("a CUDA device is present")
    with pytest.raises(UnavailableError) as err:
        lenet.load(backend, "gpu", params=lenet.model.init_params())
    message = str(err.value)
    assert message.startswith(f"{backend} on gpu: ") and "\n" not in message, message


# --- GPU: each kernel alone ------------------------------------------------------------------
def gpu_for(backend):
    if backend == "emu":
        return emu_gpu()
    require(backend, "gpu")
    return lenet.backends.module(backend).GPU()


LAYERS = [(1, 28, 20), (20, 12, 50)]        # (C, H, O) of conv1 and conv2


@pytest.mark.parametrize("backend", LAUNCHERS)
@pytest.mark.parametrize("v", ["1", "2"])
@pytest.mark.parametrize("n", [1, 7])
def test_conv_kernels_exact(backend, v, n):
    gpu, rng = gpu_for(backend), np.random.default_rng(1)
    for C, H, O in LAYERS:
        x, w, b, dy = ints(rng, (n, C, H, H)), ints(rng, (O, C, 5, 5)), ints(rng, O), ints(rng, (n, O, H - 4, H - 4))
        got = run_launches(gpu, [ck.conv_forward(v, B("x"), B("w"), B("b"), B("y"), n, C, H, O)]
                           + ck.conv_backward(v, B("dy"), B("x"), B("w"), B("dx"), B("dw"), B("db"), n, C, H, O),
                           dict(x=x, w=w, b=b, dy=dy),
                           dict(y=dy.shape, dx=x.shape, dw=w.shape, db=b.shape))
        want = dict(zip(("dx", "dw", "db"), ref.conv_backward(dy.astype(float), x.astype(float), w.astype(float))))
        want["y"] = ref.conv(x.astype(float), w.astype(float), b.astype(float))
        for k in want:
            np.testing.assert_array_equal(got[k], want[k], err_msg=f"v{v} {k} (C={C}, H={H}, O={O})")


@pytest.mark.parametrize("backend", LAUNCHERS)
def test_maxpool_kernels_exact_with_ties(backend):
    gpu, rng = gpu_for(backend), np.random.default_rng(2)
    x = rng.integers(0, 2, (7, 20, 24, 24)).astype(np.float32)       # many tied windows
    dy = ints(rng, (7, 20, 12, 12), 1, 5)
    got = run_launches(gpu, [ck.maxpool_forward(B("x"), B("y"), 140, 24), ck.maxpool_backward(B("dy"), B("x"), B("dx"), 140, 24)],
                       dict(x=x, dy=dy), dict(y=dy.shape, dx=x.shape))
    np.testing.assert_array_equal(got["y"], ref.maxpool(x))
    np.testing.assert_array_equal(got["dx"], ref.maxpool_backward(dy, x))


@pytest.mark.parametrize("backend,n", kernel_batches())
@pytest.mark.parametrize("v", ["1", "2"])
def test_dense_kernels_exact(backend, v, n):
    gpu, rng = gpu_for(backend), np.random.default_rng(3)
    for IN, OUT, relu in [(800, 500, True), (500, 10, False)]:
        x, w, b, dy = ints(rng, (n, IN), -2, 2), ints(rng, (OUT, IN), -2, 2), ints(rng, OUT), ints(rng, (n, OUT))
        mask = ints(rng, (n, IN), -1, 1)
        got = run_launches(gpu, [ck.dense_forward(v, B("x"), B("w"), B("b"), B("y"), n, IN, OUT, relu)]
                           + ck.dense_backward(v, B("dy"), B("x"), B("w"), B("dx"), B("dw"), B("db"), n, IN, OUT, mask=B("mask")),
                           dict(x=x, w=w, b=b, dy=dy, mask=mask), dict(y=(n, OUT), dx=x.shape, dw=w.shape, db=b.shape))
        y = ref.dense(x, w, b)
        dx, dw, db = ref.dense_backward(dy, x, w)
        want = dict(y=np.maximum(y, 0) if relu else y, dx=dx * (mask > 0), dw=dw, db=db)
        for k in want:
            np.testing.assert_array_equal(got[k], want[k], err_msg=f"v{v} {k} ({IN}->{OUT})")


@pytest.mark.parametrize("backend,n", kernel_batches())
def test_softmax_xent_and_sgd(backend, n):
    gpu, rng = gpu_for(backend), np.random.default_rng(4)
    z, y = rng.normal(0, 3, (n, 10)).astype(np.float32), rng.integers(0, 10, n).astype(np.int32)
    p, g = rng.normal(size=1000).astype(np.float32), rng.normal(size=1000).astype(np.float32)
    got = run_launches(gpu, [ck.softmax_xent(B("z"), B("y"), B("dz"), B("loss"), n)], dict(z=z, y=y), dict(dz=(n, 10), loss=(1,)))
    loss, dz = ref.softmax_cross_entropy(z.astype(float), y)
    np.testing.assert_allclose(got["loss"][0], loss, rtol=1e-6)
    np.testing.assert_allclose(got["dz"], dz, rtol=1e-5, atol=1e-7)
    bufs = {"p": gpu.to_device(p), "g": gpu.to_device(g)}
    gpu.run(cn.bind(gpu, [ck.sgd(B("p"), B("g"), 0.05, 1000)], bufs))
    np.testing.assert_allclose(gpu.download(bufs["p"], 1000), p - np.float32(0.05) * g, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("backend,n", kernel_batches())
def test_fused_forward_exact(backend, n):
    """Sparse small-integer weights keep every partial sum an exact float32 integer."""
    gpu, rng = gpu_for(backend), np.random.default_rng(5)
    params = {k: (ints(rng, s, -1, 1) * (rng.random(s) < 0.2)).astype(np.float32)
              for k, s in lenet.model.PARAM_SHAPES.items()}
    x = rng.integers(0, 2, (n, 1, 28, 28)).astype(np.float32)
    # the same network on |params| and |x| bounds every partial sum the kernel forms
    bound = ref.Reference({k: np.abs(p) for k, p in params.items()}, np.float64).forward(x, keep=True)
    assert max(np.abs(a).max() for a in bound.values()) < 2 ** 24
    acts = ref.Reference(params, np.float64).forward(x, keep=True)
    got = run_launches(gpu, [ck.fused_forward(B("x"), B("z"), n)], dict(x=x, params=ck.flatten(params)), dict(z=(n, 10)))
    np.testing.assert_array_equal(got["z"], acts["logits"])


# --- the whole network: through the public API on a GPU, through CudaNet on the emulator ----------
def network(request, backend, variant):
    """(net, params, dataset): skip without the device first, then build the (possibly slow) fixtures."""
    gpu = emu_gpu() if backend == "emu" else require(backend, "gpu")
    params, dataset = request.getfixturevalue("params"), request.getfixturevalue("dataset")
    if backend == "emu":
        return cn.CudaNet("emu", gpu, params, variant), params, dataset
    return lenet.load(backend, "gpu", params=params, variant=variant), params, dataset


def poison(net):
    """Fill every activation and gradient buffer with NaN: a forgotten element shows up."""
    for name, buf in net.bufs.items():
        if name not in ("params", "labels"):
            net.gpu.fill(buf, np.nan)


def variants():
    """(launcher, variant) pairs; the emulator runs the kernel versions (graph capture is CuPy's own)."""
    return ([pytest.param("emu", v, marks=pytest.mark.emu) for v in ck.VERSIONS]
            + [pytest.param(b, v, marks=pytest.mark.gpu) for b in ("cupy", "pycuda") for v in lenet.backends.variants(b)])


def naming_the_first_divergence(backend, check, find_divergence):
    """Run `check`; where it fails on the emulator, say which launch first computed a wrong value."""
    try:
        check()
    except AssertionError as err:
        if backend != "emu":
            raise
        raise AssertionError(f"{err}\n{find_divergence() or divergence.NO_DIVERGENCE}") from None


@pytest.mark.parametrize("backend,variant", variants())
def test_forward_agrees(backend, variant, request):
    net, params, dataset = network(request, backend, variant)
    for n in BATCHES:
        if backend == "emu" and n == 64 and variant != "2":
            continue        # on the emulator 64 is v2's alone: its GEMM's several row tiles; no new code elsewhere
        x = dataset.test_x[:n]
        for _ in range(2 if backend != "emu" or n < 64 else 1):   # the second run replays bound launches / the graph
            net._sequence(("forward", n))       # allocate, so that everything can be poisoned
            poison(net)
            naming_the_first_divergence(
                backend, lambda: assert_logits_agree(net.download(net.forward(net.upload(x))), params, x),
                lambda: divergence.forward_divergence(cn.CudaNet("emu", emu_gpu(), params, variant), x))
        if backend != "emu" or n < 64:
            assert_logits_agree(net.predict(dataset.test_x[n:2 * n]), params, dataset.test_x[n:2 * n])
    if backend == "emu":
        return                                  # never timed
    times = net.device_times_us(dataset.test_x[:1], 5)
    assert set(times) == {"forward", "kernels"}
    assert all(len(t) == 5 and min(t) > 0 for t in times.values())
    assert np.median(times["kernels"]) <= np.median(times["forward"]) * 1.1, times


def step_cases():
    """The SGD step at batch 7 everywhere and 64 on a GPU; the emulator runs no version twice: 64
    runs no new code there, and v3 trains with v2's launches (test_v3_trains_with_the_v2_launches)."""
    return [pytest.param(*v.values, n, marks=v.marks) for v in variants() for n in (7, 64)
            if v.values[0] != "emu" or (n == 7 and v.values[1] != "3")]


def test_v3_trains_with_the_v2_launches():
    assert ck.train_step("3", 7, 0.05) == ck.train_step("2", 7, 0.05)


@pytest.mark.parametrize("backend,variant,n", step_cases())
def test_sgd_step_agrees(backend, variant, n, request):
    net, params, dataset = network(request, backend, variant)
    x, y = dataset.train_x[-n:], dataset.train_y[-n:]
    net._sequence(("train", n, 0.05))           # allocate, so that everything can be poisoned
    poison(net)
    naming_the_first_divergence(
        backend, lambda: assert_step_agrees(net, params, x, y, 0.05),
        lambda: divergence.step_divergence(cn.CudaNet("emu", emu_gpu(), params, variant), x, y, 0.05))
