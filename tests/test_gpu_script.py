"""The one-command GPU verification (bench/gpu-check.sh, bench/gpu-wheels.sh) up to where it needs
a GPU, the device-memory check's command line, and the summary it prints last."""
import base64
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
import lenet
from lenet.backends import cuda_unavailable

ROOT = Path(__file__).resolve().parents[1]
CHECK, WHEELS = ROOT / "bench" / "gpu-check.sh", ROOT / "bench" / "gpu-wheels.sh"
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "python"), os.environ.get("PYTHONPATH", "")])}
no_gpu = pytest.mark.skipif(cuda_unavailable() is None, reason="a GPU is present: the no-GPU stop cannot be seen")


def run(cmd, timeout=120, **env):
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, check=False,
                          env={**ENV, **env}, cwd=ROOT)


def bench_script(name: str):
    """A script under bench/, imported as a module."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def probe_wheel(directory: Path) -> Path:
    """A real, minimal pure-Python wheel (one module), built here so the install phase has
    something to install offline without a network or a prepared wheel directory."""
    name, files = "lenet_gpu_check_probe-0.1", {"lenet_gpu_check_probe.py": b"OK = True\n"}
    info = f"{name}.dist-info"
    files[f"{info}/METADATA"] = b"Metadata-Version: 2.1\nName: lenet-gpu-check-probe\nVersion: 0.1\n"
    files[f"{info}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    record = "".join(f"{p},sha256={base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b'=').decode()},{len(d)}\n"
                     for p, d in files.items()) + f"{info}/RECORD,,\n"
    path = directory / f"{name}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for p, d in {**files, f"{info}/RECORD": record.encode()}.items():
            z.writestr(p, d)
    return path


@pytest.mark.parametrize("case, message", [
    ("no arguments", "usage: bench/gpu-check.sh OUT_DIR WHEEL_DIR"),
    ("missing wheel dir", "does not exist (make it with bench/gpu-wheels.sh)"),
    ("empty wheel dir", "holds no wheels"),
    ("unwritable out dir", "cannot write to output directory"),
])
def test_gpu_check_bad_arguments_are_one_line_errors(tmp_path, case, message):
    (tmp_path / "empty").mkdir()
    (tmp_path / "file").write_text("not a directory")
    probe_wheel(tmp_path)
    args = {"no arguments": [],
            "missing wheel dir": [tmp_path / "out", tmp_path / "nowhere"],
            "empty wheel dir": [tmp_path / "out", tmp_path / "empty"],
            "unwritable out dir": [tmp_path / "file" / "out", tmp_path]}[case]
    done = run(["bash", CHECK, *args], timeout=30)
    assert done.returncode == 2
    assert done.stderr.startswith("gpu-check: error: ") and done.stderr.count("\n") == 1 and message in done.stderr


@pytest.mark.parametrize("args", [[], ["a", "b"]])
def test_gpu_wheels_needs_exactly_one_directory(args):
    done = run(["bash", WHEELS, *args], timeout=30)
    assert done.returncode == 2 and done.stderr == "gpu-wheels: error: usage: bench/gpu-wheels.sh WHEEL_DIR\n"


@no_gpu
def test_gpu_check_installs_offline_then_stops_where_it_needs_the_gpu(tmp_path):
    probe_wheel(tmp_path)
    out, work = tmp_path / "out", tmp_path / "work"
    done = run(["bash", CHECK, out, tmp_path], GPU_CHECK_BUILD="0", GPU_CHECK_WORK=str(work),
               GPU_CHECK_PYTHON=sys.executable)
    assert done.returncode == 3, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last == f"gpu-check: error: no usable GPU, stopping before the GPU phases: {cuda_unavailable()}"
    summary = (out / "summary.txt").read_text()
    assert summary.splitlines()[1].split()[:2] == ["install", "ok"], summary
    assert "build" in summary and "NONE" in summary and "pytest" not in summary
    probe = subprocess.run([work / "venv" / "bin" / "python", "-c", "import lenet_gpu_check_probe, numpy"],
                           capture_output=True, text=True, check=False)
    assert probe.returncode == 0, probe.stderr     # the wheel, and the machine's packages beside it


@no_gpu
def test_gpu_check_runs_every_gpu_phase_without_a_gpu_when_told(tmp_path):
    """GPU_CHECK_WITHOUT_GPU=1: past the stop, every phase runs as on a GPU machine and fails or
    skips naming why; the summary, the benchmark's table and the tarball are made; exit 1. (The
    pytest phase looks in three test files only, one without gpu marks, to keep this short; the
    build has its own test.)"""
    probe_wheel(tmp_path)
    out = tmp_path / "out"
    done = run(["bash", CHECK, out, tmp_path], timeout=600, GPU_CHECK_BUILD="0", GPU_CHECK_WORK=str(tmp_path / "work"),
               GPU_CHECK_PYTHON=sys.executable, GPU_CHECK_WITHOUT_GPU="1",
               GPU_CHECK_TESTS="tests/test_floors.py tests/test_gpu_script.py tests/test_check.py")
    assert done.returncode == 1, done.stdout + done.stderr
    summary = (out / "summary.txt").read_text()
    rows = {line.split()[0]: line.split(None, 3)[1:] for line in summary.splitlines()[1:]}
    assert sorted(rows) == sorted(["install", "build", "gpu", "pytest-test_floors", "pytest-test_gpu_script",
                                   "sanitizer-memcheck", "sanitizer-racecheck", "devmem", "bench"]), summary
    assert rows["install"][0] == "ok" and rows["gpu"][0] == "NONE" and rows["gpu"][2] == cuda_unavailable()
    assert rows["pytest-test_floors"][0] == rows["pytest-test_gpu_script"][0] == "ok", summary   # all skipped
    for tool in ("memcheck", "racecheck"):
        assert rows[f"sanitizer-{tool}"][0].startswith("FAIL"), summary
    assert rows["devmem"][0] == "FAIL:2" and rows["devmem"][2] == f"error: no GPU to check: {cuda_unavailable()}"
    assert rows["bench"][0] == "ok", summary
    table = (out / "bench-summary.txt").read_text().splitlines()
    assert table[0].split()[:3] == ["backend", "device", "variant"] and any(r.startswith("cupy ") for r in table)
    assert table[-1].startswith("CPU floor (reference): ") and "GPU floors: none" in table[-2]
    assert done.stdout.rstrip().endswith(summary.rstrip())                        # the summary comes last
    with tarfile.open(out / "gpu-check.tar.gz") as tar:
        assert {"./summary.txt", "./logs/devmem.log", "./bench/results.json"} <= set(tar.getnames())


@pytest.mark.slow
@no_gpu
def test_prepared_wheels_install_offline_and_the_build_runs_before_the_gpu_stop(tmp_path):
    """gpu-wheels.sh for this Python (PyCUDA's build skipped: minutes), then gpu-check.sh on a copy
    of the checkout: offline install from that directory, the LENET_CUDA=ON build, the stop."""
    if not shutil.which("nvcc"):
        pytest.skip("nvcc not installed: the LENET_CUDA=ON build needs it")
    # The GPU image has the build tools (bench/gpu-image-packages.txt), so the wheel directory
    # leaves them out; a machine standing in for it needs them too.
    missing = [t for t in ("cmake", "ninja") if not shutil.which(t)]
    if importlib.util.find_spec("pybind11") is None:
        missing.append("pybind11 (in this Python)")
    if missing:
        pytest.skip(f"the GPU image's build tools are missing here: {', '.join(missing)}")
    wheels = tmp_path / "wheels"
    done = run(["bash", WHEELS, wheels], timeout=600, GPU_PYTHON=sys.executable, GPU_WHEELS_PYCUDA="0")
    assert done.returncode == 0, done.stderr
    names = {p.name.split("-")[0].lower() for p in wheels.glob("*.whl")}
    assert {"keras", "pygount", "jsonschema", "scipy_openblas32"} <= names
    assert "numpy" not in names and "torch" not in names          # the GPU image has those
    assert done.stdout.strip().splitlines()[-1].startswith(f"gpu-wheels: {len(names)} wheels, ")
    repo = tmp_path / "repo"
    shutil.copytree(ROOT, repo, ignore=shutil.ignore_patterns(".git", "build", "*.so", "__pycache__", "bench-out"))
    out = tmp_path / "out"
    done = run(["bash", repo / "bench" / "gpu-check.sh", out, wheels], timeout=900,
               GPU_CHECK_WORK=str(tmp_path / "work"), GPU_CHECK_PYTHON=sys.executable,
               PYTHONPATH=os.environ.get("PYTHONPATH", ""))
    assert done.returncode == 3, done.stderr
    rows = {line.split()[0]: line.split()[1] for line in (out / "summary.txt").read_text().splitlines()[1:]}
    assert rows["install"] == "ok" and rows["build"] == "ok" and rows["gpu"] == "NONE", rows
    assert list((repo / "python" / "lenet").glob("_native*.so"))


@no_gpu
def test_sanitize_forward_runs_up_to_the_device_check():
    """What gpu-check.sh hands to compute-sanitizer starts, asks for every GPU variant of cupy
    and numba by its current name, and stops at the missing GPU with the reason, exit 1."""
    runs = bench_script("sanitize_forward").runs()
    assert {b for b, _ in runs} == {"cupy", "numba"} and ("numba", "fused") in runs and ("cupy", "3") in runs
    done = run([sys.executable, ROOT / "bench" / "sanitize_forward.py"], timeout=120)
    assert done.returncode == 1, done.stderr
    assert done.stdout.splitlines() == [f"{b} [{v}]: unavailable: {lenet.backends.unavailable(b, 'gpu')}"
                                        for b, v in runs], done.stdout


@pytest.mark.emu
def test_sanitize_forward_agrees_on_the_emulator_for_every_raw_kernel_version(params, dataset):
    """What gpu-check.sh hands to compute-sanitizer, for the hand-written CUDA C kernels (kernel
    versions 1, 2, 3 at batches 1, 7 and 64), executed on the CPU emulator of CUDA semantics
    through its launcher, which checks every load and store (races, bounds, barriers); never
    timed. Left out: cupy's graph variants (the same kernels replayed as a CUDA graph: nothing
    more for the emulator to check) and numba's GPU variants (its simulator would take minutes at
    LeNet's full size; test_numba_simulator.py executes those kernels at reduced channel counts)."""
    from conftest import emu_gpu
    from lenet.backends import _cuda_kernels, _cuda_net
    sanitize_forward, gpu = bench_script("sanitize_forward"), emu_gpu()
    versions = [variant for backend, variant in sanitize_forward.runs() if backend == "cupy" and variant in
                _cuda_kernels.VERSIONS]
    assert sorted(versions) == sorted(_cuda_kernels.VERSIONS)
    for version in versions:
        net = _cuda_net.CudaNet("emu", gpu, params, version)
        assert sanitize_forward.check_forward(f"cupy [{version}] on the emulator", net, params, dataset.test_x) == 0


def test_shell_scripts_pass_shellcheck():
    scripts = [ROOT / ".ci" / "run", *sorted((ROOT / "bench").glob("*.sh"))]
    if not shutil.which("shellcheck"):
        pytest.skip("shellcheck is not installed (Debian: apt-get install shellcheck)")
    done = run(["shellcheck", *scripts], timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_devmem_bad_arguments_and_no_gpu_are_one_line_errors():
    done = run([sys.executable, "-m", "lenet.bench.devmem", "--predictions", "0"], timeout=60)
    assert done.returncode == 2 and done.stderr.startswith("error: --predictions must be >= 1")
    if cuda_unavailable():
        done = run([sys.executable, "-m", "lenet.bench.devmem"], timeout=60)
        assert done.returncode == 2 and done.stderr == f"error: no GPU to check: {cuda_unavailable()}\n"


def test_summary_lists_every_row_with_its_gpu_times_and_the_floors(tmp_path):
    from test_floors import gpu_doc

    (tmp_path / "results.json").write_text(json.dumps(gpu_doc()))
    done = run([sys.executable, ROOT / "bench" / "gpu_summary.py", tmp_path / "results.json"], timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["backend", "device", "variant", "p50", "µs", "p90", "µs", "×", "floor",
                                "fwd", "µs", "kern", "µs", "status"]
    assert lines[2].split() == ["cupy", "gpu", "3", "20", "40", "2.5×", "9", "4", "ok"]
    assert lines[4].split()[:3] == ["tensorflow", "gpu", "-"] and lines[4].endswith("TensorFlow has no CUDA build here")
    assert lines[-2] == "GPU floors: host→host 8 µs, kernel-only 0.575 µs"
    assert lines[-1] == "CPU floor (reference): 45.9 µs on one core, 10 µs on all cores"


@pytest.mark.gpu
def test_devmem_is_flat_for_the_raw_kernels():
    if cuda_unavailable():
        pytest.skip(cuda_unavailable())
    done = run([sys.executable, "-m", "lenet.bench.devmem", "--backend", "cupy", "--predictions", "2000"], timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("cupy") and " flat " in done.stdout
