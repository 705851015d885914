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
import zipfile
from pathlib import Path

import pytest
from lenet.backends import cuda_unavailable

ROOT = Path(__file__).resolve().parents[1]
CHECK, WHEELS = ROOT / "bench" / "gpu-check.sh", ROOT / "bench" / "gpu-wheels.sh"
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "python"), os.environ.get("PYTHONPATH", "")])}
no_gpu = pytest.mark.skipif(cuda_unavailable() is None, reason="a GPU is present: the no-GPU stop cannot be seen")


def run(cmd, timeout=120, **env):
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, check=False,
                          env={**ENV, **env}, cwd=ROOT)


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
