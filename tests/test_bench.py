"""The benchmark: end to end on CPU, correctness gate, statistics, lines of code, bad arguments."""
import json
import os
import re
import signal
import subprocess
import sys
import time
from importlib.util import find_spec
from pathlib import Path

import jsonschema
import pytest
from dataclasses import replace

import lenet
from lenet.bench import loc, markdown, meta, plots, raw, readings, report, results, stats, worker
from lenet.bench.results import Floors, Latency, LogitsCheck, Meta, Plan, Row

FIXTURES = Path(__file__).parent / "fixtures" / "loc"
SCHEMA = results.json_schema()


def bench(*args, cwd=None, env=None):
    proc = subprocess.run([sys.executable, "-m", "lenet.bench", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=600, env=env)
    return proc.returncode, proc.stdout, proc.stderr


def validate(doc):
    jsonschema.validate(doc, SCHEMA)                          # the JSON shape results.py defines


def test_the_committed_schema_is_the_one_results_py_defines():
    committed = json.loads((Path(report.__file__).parent / "schema.json").read_text(encoding="utf-8"))
    assert committed == json.loads(json.dumps(SCHEMA)), \
        "regenerate it: python -m lenet.bench.results > python/lenet/bench/schema.json"


def test_quick_run_end_to_end(tmp_path):
    backends = ["numpy"] + [b for b in ("cblas",) if not lenet.backends.unavailable(b, "cpu")]
    rc, stdout, stderr = bench("--backend", ",".join(backends), "--device", "cpu", "--quick", "--out", str(tmp_path))
    assert rc == 0, stderr
    doc = json.loads((tmp_path / "results.json").read_text())
    validate(doc)
    assert {p.name for p in tmp_path.glob("*.png")} >= {"loc.png", "latency.png", "cost_of_abstraction.png",
                                                        "train.png", "latency_distribution.png", "layers.png"}
    table = (tmp_path / "results.md").read_text()
    assert all(f"| {backend} | cpu |" in table for backend in backends) and "floor" in table
    assert [m["when"] for m in doc["floors"]["cpu"]["measured"]] == ["before", "after"]
    assert doc["floors"]["cpu"]["floor_us"]["all_cores"] >= doc["floors"]["cpu"]["arithmetic_us"]["all_cores"] > 0
    assert [row["backend"] for row in doc["results"]] == backends
    for row in doc["results"]:
        assert row["status"] == "ok", row["reason"]
        assert row["variant"] == lenet.backends.default_variant(row["backend"], "cpu") and "kernel" not in row
        lat = row["latency"]["host_us"]
        assert 0 < lat["p50"] <= lat["p90"] <= lat["p99"] and lat["n"] == len(lat["samples"])
        assert row["accuracy"] == pytest.approx(0.978) and row["train"]["images_per_s"] > 0
        assert row["loc"]["code"] > 0 and set(row["throughput"]["images_per_s"]) == {"1", "64"}
        assert row["layers"]["overhead_from"] == "latency" and row["layers"]["method"]   # layers: a default mode
        assert [layer for group in row["layers"]["us"] for layer in group.split("+")] == list(lenet.model.LAYERS)


class Perturbed(lenet.Net):
    """A test double: a real backend whose logits are nudged, as a subtle bug would."""

    def __init__(self, net, delta):
        self.net, self.delta, self.backend = net, delta, "perturbed"

    def forward(self, x):
        out = self.net.predict(x)
        out[:, 3] += self.delta
        return out

    def parameters(self):
        return self.net.parameters()


@pytest.mark.parametrize("delta", [1e-2, 50.0])           # small error; an argmax-changing one
def test_wrong_logits_fail_and_are_not_timed(params, dataset, delta):
    cfg = worker.Config("numpy", modes=("latency", "throughput"), budget=worker.Budget.quick())
    result = worker.measure(Perturbed(lenet.load("numpy", params=params), delta), cfg, dataset, params)
    assert result.status == "failed" and "reference" in result.reason
    assert result.latency is None and result.throughput is None
    honest = worker.measure(lenet.load("numpy", params=params), cfg, dataset, params)
    assert honest.status == "ok" and honest.latency.host_us.n >= 30


def test_a_gpu_row_keeps_its_device_times_in_its_latency(params, dataset):
    """The worker's GPU path on the CPU: a net that reports CUDA-event times, as the GPU backends do."""
    net = lenet.load("numpy", params=params)
    net.device_times_us = lambda x, n: {"forward": [3.0] * n, "kernels": [2.0] * n}
    cfg = worker.Config("numpy", "gpu", modes=("latency",), budget=worker.Budget.quick())
    runs = [worker.measure(net, cfg, dataset, params).latency for _ in range(2)]
    assert all(set(r.host_enqueue_us) == {"enqueue", "total"} and r.host_enqueue_us["total"].n == min(r.host_us.n, 500)
               for r in runs)
    merged = raw.merge([Row("numpy", "gpu", None, "ok", latency=r) for r in runs]).latency
    assert merged.host_us.n == sum(r.host_us.n for r in runs) and len(merged.host_us.runs) == 2
    assert {k: s.p50 for k, s in merged.device_us.items()} == {"forward": 3.0, "kernels": 2.0}
    assert merged.host_enqueue_us == runs[0].host_enqueue_us              # the first run's, as before
    assert all(r.contention is None for r in runs) and merged.contention is None   # a GPU row: none read


def test_a_cpu_rows_latency_says_how_contended_the_host_was_around_it(params, dataset):
    """Real readings (numba's loop on each usable core in turn, the thread's affinity restored), just
    before the warm-up and after the timed calls; merged, each tagged with its run; in results.md."""
    pytest.importorskip("numba")
    affinity = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else [None]
    cfg = worker.Config("numpy", modes=("latency",), quick=True, budget=worker.Budget.quick())
    runs = [worker.measure(lenet.load("numpy", params=params), cfg, dataset, params).latency for _ in range(2)]
    for lat in runs:
        assert [m["when"] for m in lat.contention] == ["before", "after"]
        assert all([c["cpu"] for c in m["cores"]] == affinity and m["windows"] == 300 for m in lat.contention)
        assert all(0 <= c["slowed_share"] <= 1 <= c["p50_over_best"] for m in lat.contention for c in m["cores"])
        assert all(0 <= c["read"]["slowed_share"] <= 1 for m in lat.contention for c in m["cores"])   # and its reads
    assert affinity == [None] or sorted(os.sched_getaffinity(0)) == affinity
    merged = raw.merge([Row("numpy", "cpu", None, "ok", latency=r) for r in runs])
    assert [(m["run"], m["when"]) for m in merged.latency.contention] == [(1, "before"), (1, "after"),
                                                                           (2, "before"), (2, "after")]
    shares = iter([0.30, 0.25, 0.02, 0.0, 0.5, 1.0, 0.125, 0.875])       # known shares, in reading order
    for m in merged.latency.contention:
        m["cores"] = [{**c, "cpu": cpu, "slowed_share": next(shares)} for cpu, c in enumerate(m["cores"][:1] * 2)]
    for c in merged.latency.contention[-1]["cores"]:                    # the last reading without its reads
        del c["read"]
    assert results.from_json(Row, results.to_json(merged)) == merged      # the typed form holds the readings
    doc = results.Results(Meta(date="2026-12-02", command="x", python="3", cpu="test CPU", cpu_affinity=2),
                          Floors(), [merged])
    lines = markdown.latency_contention_lines(doc)
    assert "each core (cpu 0 / 1) ran at 1.1× its fastest or slower (in brackets: of as many passes" in lines[1]
    assert ", just before the warm-up → after the timed calls" in lines[1]
    reads = [" (" + " / ".join(f"{c['read']['slowed_share']:.0%}" for c in m["cores"]) + ")"
             for m in merged.latency.contention[:3]]
    assert lines[-1] == f"- numpy: 30% / 25%{reads[0]} → 2% / 0%{reads[1]}; 50% / 100%{reads[2]} → 12% / 88%"


def test_without_numba_a_cpu_rows_latency_has_no_contention(params, dataset, monkeypatch):
    def no_numba(quick):
        raise ImportError("No module named 'numba'")
    monkeypatch.setattr(worker, "contention", no_numba)
    cfg = worker.Config("numpy", modes=("latency",), quick=True, budget=worker.Budget.quick())
    lat = worker.measure(lenet.load("numpy", params=params), cfg, dataset, params).latency
    assert lat.host_us.n >= 30 and lat.contention is None


def test_percentiles_against_known_samples():
    samples = list(range(1, 101))                           # 1..100
    assert [stats.percentile(samples, p) for p in (50, 90, 99, 100)] == [50, 90, 99, 100]
    assert stats.percentile([5.0, 1.0, 3.0], 50) == 3.0     # nearest rank: a measured value
    assert stats.percentile([7.0], 99) == 7.0
    s = stats.summary([4, 1, 3, 2], keep_samples=True)
    assert s == results.Summary(n=4, p50=2.0, p90=4.0, p99=4.0, mean=2.5, min=1.0, max=4.0,
                                samples=[4.0, 1.0, 3.0, 2.0])
    assert stats.median([3, 1, 2, 10]) == 2.5
    with pytest.raises(ValueError):
        stats.percentile([], 50)


def test_replacing_committed_results_does_not_make_the_checkout_dirty(tmp_path):
    def git(*args):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tmp_path,
                       check=True, capture_output=True)
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "results.json").write_text("{}")
    (tmp_path / "code.py").write_text("x = 1\n")
    git("init", "-q")
    git("add", ".")
    git("commit", "-q", "-m", "start")
    (tmp_path / "results" / "results.json").unlink()          # a run moves the previous results aside
    assert meta.git(tmp_path, tmp_path / "results")["dirty"] is False
    assert meta.git(tmp_path)["dirty"] is True
    (tmp_path / "code.py").write_text("x = 2\n")
    assert meta.git(tmp_path, tmp_path / "results")["dirty"] is True


def test_lines_of_code_of_a_fixture_tree():
    counts = loc.count_files(["add.py", "scale.cu", "CMakeLists.txt"], FIXTURES)
    by_file = {f.path: (f.code, f.comment, f.blank) for f in counts.files}
    assert by_file == {
        "add.py": (2, 2, 1),            # def, return | docstring, comment | one blank
        "scale.cu": (3, 1, 2),          # three statements | header comment | a blank and a lone brace
        "CMakeLists.txt": (2, 1, 1),    # two commands | one comment | one blank
    }
    assert (counts.code, counts.comment, counts.blank) == (7, 4, 4)
    with pytest.raises(FileNotFoundError, match="missing.py"):
        loc.count_files(["missing.py"], FIXTURES)


def test_every_backend_declares_existing_sources():
    root = Path(__file__).resolve().parents[1]
    for name in lenet.backends.names():
        for rel in lenet.backends.module(name).SOURCES:
            assert (root / rel).is_file(), f"{name}: {rel}"


@pytest.mark.parametrize("args, message", [
    (["--backend", "nonesuch"], "unknown backend 'nonesuch'"),
    (["--mode", "latency,speed"], "unknown mode 'speed'"),
    (["--backend", "numpy", "--device", "gpu"], "numpy has no gpu implementation"),
    (["--backend", "numpy", "--out", "/proc/lenet-bench"], "cannot write to output directory"),
    (["--batch-sizes", "8,x"], "bad batch sizes"),
    (["--timeout", "inf"], "argument --timeout: expected a number in (0, 86400], got 'inf'"),
    (["--repeats", "18446744073709551616"], "argument --repeats: expected an integer in 1..100"),
    (["--backend", "numpy", "--json", "/tmp"], "cannot write /tmp: it is a directory"),
])
def test_bad_arguments_give_one_line_errors(args, message):
    rc, stdout, stderr = bench(*args, "--quick")
    assert rc == 2 and stderr.count("\n") == 1 and stderr.startswith("error: ") and message in stderr, stderr


@pytest.mark.parametrize("args, message", [
    (["--data", "missing-dir"], "missing-dir: no such data directory"),          # under tmp_path, the cwd
    (["--data", ""], ".: no train-images-idx3-ubyte[.gz]"),                      # "": the current directory
    (["--dataset", "mnist", "--data", "."], ".: no train-images-idx3-ubyte[.gz]"),
    (["--weights", "missing.safetensors"], "missing.safetensors: no such file"),
    (["--json", "/proc/lenet-bench/x.json"], "cannot write /proc/lenet-bench/x.json"),
])
def test_bad_inputs_are_refused_before_the_output_directory_is_made(args, message, tmp_path):
    """Data named on the command line is checked even where no run trains (here: latency only)."""
    rc, stdout, stderr = bench("--backend", "numpy", "--mode", "latency", "--quick", *args, cwd=tmp_path)
    assert rc == 2 and stderr.count("\n") == 1 and message in stderr, stderr
    assert not list(tmp_path.iterdir())


def test_lenet_data_is_read_only_where_a_run_trains(tmp_path):
    env = {**os.environ, "LENET_DATA": str(tmp_path / "missing-dir")}
    rc, stdout, stderr = bench("--backend", "numpy", "--mode", "loc", "--quick", "--no-plots", "--out", "o",
                               cwd=tmp_path, env=env)
    assert rc == 0, stderr
    rc, stdout, stderr = bench("--backend", "numpy", "--mode", "train", "--quick", cwd=tmp_path, env=env)
    assert rc == 2 and stderr.count("\n") == 1 and "missing-dir: no such data directory" in stderr, stderr


def test_list_shows_every_backend_and_device():
    rc, stdout, stderr = bench("--list")
    assert rc == 0, stderr
    rows = [line.split() for line in stdout.splitlines()[1:]]
    assert [r[:2] for r in rows] == [[b, d] for b, d, _, _ in lenet.available()]
    assert ["numpy", "cpu"] == rows[0][:2] and rows[0][-1] == "ok"
    for (backend, device, ok, _), line in zip(lenet.available(), stdout.splitlines()[1:]):
        assert line.endswith("ok, inference only") == (ok and backend == "onnxruntime"), line
    for backend, device, variants, *_ in rows:             # each device's default variant first, only its own
        default = lenet.backends.default_variant(backend, device)
        assert variants.split(",")[0] == (default or "-"), (backend, device, variants)
        assert set(variants.split(",")) == set(lenet.backends.variants(backend, device) or ["-"]), (backend, device)
    listed = {(r[0], r[1]): r[2].split(",") for r in rows}
    assert "graph" not in listed["torch", "cpu"] and "fused" not in listed["numba", "cpu"]


@pytest.mark.parametrize("backend, variant, why", [("torch", "graph", "GPU: .*CUDAGraph"),
                                                   ("numba", "fused", "gpu: .*cuda.jit")])
def test_a_gpu_only_variant_on_the_cpu_says_why_before_any_work(backend, variant, why):
    for device in ("cpu", "auto"):
        start = time.monotonic()
        rc, _, stderr = bench("--backend", backend, "--variant", variant, "--device", device, "--quick")
        assert rc == 2 and stderr.count("\n") == 1, stderr
        assert re.search(f"{backend} variant '{variant}' runs on gpu only \\({why}", stderr), stderr
        assert time.monotonic() - start < 20, "refused only after the floors were measured"


def without(tmp_path, blocked=("jsonschema", "pytest", "hypothesis")) -> dict:
    """An environment whose Python cannot import the `blocked` packages (by default the `test`
    extra's, as after a plain `pip install .`): a sitecustomize that blocks them, in every process
    the bench starts."""
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(f"import sys\nfor name in {tuple(blocked)!r}:\n    sys.modules[name] = None\n")
    package = str(Path(lenet.__file__).parents[1])
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(blocker), package, os.environ.get("PYTHONPATH", "")]))


def test_bench_without_the_test_extra_writes_results(tmp_path):
    env = without(tmp_path)
    blocked = subprocess.run([sys.executable, "-c", "import jsonschema"], env=env, capture_output=True, text=True)
    assert blocked.returncode != 0 and "ModuleNotFoundError" in blocked.stderr       # the blocker works
    out = tmp_path / "out"
    rc, stdout, stderr = bench("--backend", "numpy", "--quick", "--mode", "latency,loc", "--out", str(out), env=env)
    assert rc == 0, stderr
    doc = json.loads((out / "results.json").read_text())
    validate(doc)
    assert doc["results"][0]["status"] == "ok" and "| numpy | cpu |" in (out / "results.md").read_text()
    assert (out / "latency.png").is_file() and "warning" not in stderr, stderr



@pytest.mark.parametrize("tool", lenet.bench.TOOLS)
def test_bench_without_its_tools_names_the_extra(tmp_path, tool):
    """After `pip install .` without the `bench` extra: one line naming it, before any work."""
    env = without(tmp_path, [tool])
    out = tmp_path / "out"
    rc, _, stderr = bench("--backend", "numpy", "--quick", "--out", str(out), env=env)
    assert rc == 2 and stderr == f"error: the benchmark needs {tool} (pip install '.[bench]')\n", stderr
    assert not out.exists()
    if tool == "matplotlib":
        proc = subprocess.run([sys.executable, "-m", "lenet.bench.report", str(out)], capture_output=True,
                              text=True, env=env, timeout=300)
        assert proc.returncode == 2 and proc.stderr == "error: the benchmark needs matplotlib (pip install '.[bench]')\n"

SIGNAL_IN_AFTER_FORK = """
import os, signal, sys, time
from lenet.bench import runner, worker
signal.signal(signal.SIGINT, runner.on_signal)
fired = []
def ctrl_c():                 # Ctrl-C inside Popen's after-fork callbacks: Python drops the exception
    if not fired:
        fired.append(1)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.1)       # the handler runs here and its KeyboardInterrupt is dropped
os.register_at_fork(after_in_parent=ctrl_c)
try:
    row = runner.spawn(worker.Config("numpy", modes=("latency",), budget=worker.Budget.quick()), 300, print)
except KeyboardInterrupt:
    sys.exit(130)
print("not stopped:", row.status)
"""


def test_a_ctrl_c_that_python_drops_still_stops_the_run():
    """A signal landing in an after-fork callback raises where Python cannot deliver it (CI saw
    this once); the run remembers it and stops before waiting for the worker it just started."""
    done = subprocess.run([sys.executable, "-c", SIGNAL_IN_AFTER_FORK], capture_output=True, text=True, timeout=120)
    assert "Exception ignored" in done.stderr, done.stderr          # the exception was dropped
    assert done.returncode == 130, done.stdout + done.stderr


@pytest.mark.parametrize("signum, status, said", [(signal.SIGINT, 130, "interrupted\n"),
                                                  (signal.SIGTERM, 143, "interrupted (SIGTERM)\n")])
def test_an_interrupted_run_keeps_its_results(tmp_path, signum, status, said):
    """Interrupt the bench (Ctrl-C, or SIGTERM as `kill` sends) once its first worker has finished:
    it exits 128 + the signal's number, raw/ keeps that result, and the report step turns it into
    a table."""
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "lenet.bench", "--backend", "numpy", "--variant", "all", "--quick",
                             "--mode", "latency", "--repeats", "2", "--out", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))   # even where
    deadline = time.monotonic() + 300                           # a background job ignores SIGINT
    while not list((out / "raw").glob("run-*.json")) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    proc.send_signal(signum)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == status and stderr.endswith(said), stderr
    finished = list((out / "raw").glob("run-*.json"))
    assert 1 <= len(finished) < 4 and not (out / "results.md").exists()
    done = subprocess.run([sys.executable, "-m", "lenet.bench.report", str(out), "--no-plots"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    doc = json.loads((out / "results.json").read_text())
    validate(doc)
    assert doc["meta"]["runs_finished"] == len(finished) and doc["meta"]["runs_planned"] == 4
    assert "| numpy | cpu |" in (out / "results.md").read_text()
    assert all(r["status"] == "ok" and r["latency"]["host_us"]["n"] > 0 for r in doc["results"])


def test_report_of_a_directory_without_raw_results_is_one_line(tmp_path):
    done = subprocess.run([sys.executable, "-m", "lenet.bench.report", str(tmp_path)], capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "no benchmark raw results" in done.stderr


def small_run(out, meta=None) -> None:
    """A plan and one finished run, written as the benchmark writes them."""
    raw.save_plan(out, Plan(meta=meta or Meta(repeats=1, modes=["latency"]), floors=Floors(),
                            skipped=[Row(backend="keras", device="gpu", variant=None, runtime="Keras on jax",
                                         status="unavailable", reason="no GPU")],
                            configs=["numpy/cpu/float32"], tiers={"numpy": "reference", "keras": "framework"}))
    raw.save_result(out, 0, 0, Row(backend="numpy", device="cpu", variant="float32", status="ok", accuracy=0.978,
                                   check=LogitsCheck(ok=True, max_rel_err=1e-7, n=256, n_single=16, reason=None),
                                   latency=Latency(stats.summary([5, 6, 7], keep_samples=True))))


def test_a_failing_plot_is_a_warning_and_the_rest_is_written(tmp_path, monkeypatch):
    small_run(tmp_path)

    def broken(ax, rows, doc):
        raise RuntimeError("no display\nat all")

    monkeypatch.setattr(report, "PLOTS", [replace(p, draw=broken) if p.file == "latency.png" else p
                                          for p in report.PLOTS])
    doc, warnings = raw.assemble(tmp_path)
    assert warnings == []
    assert report.write(doc, tmp_path) == ["warning: latency.png not written: RuntimeError: no display at all"]
    assert (tmp_path / "results.json").is_file() and (tmp_path / "latency_distribution.png").is_file()
    assert not (tmp_path / "latency.png").exists()
    assert "keras/gpu (Keras on jax): **unavailable**" in (tmp_path / "results.md").read_text(encoding="utf-8")


def test_raw_results_from_before_the_renames_are_read(tmp_path):
    """Raw results written before "kernel" was renamed "variant", "layer" (the stack's rung) "tier" and
    latency_us became one Latency record."""
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "plan.json").write_text(json.dumps({
        "meta": {"repeats": 1, "modes": ["latency"], "batch_sizes": []}, "floors": {"cpu": None, "gpu": None},
        "skipped": [{"backend": "torch", "device": "gpu", "kernel": "graph", "status": "unavailable",
                     "reason": "no GPU"}], "configs": ["numpy/cpu/float64"]}))
    (tmp_path / "raw" / "run-0-0.json").write_text(json.dumps({
        "backend": "numpy", "device": "cpu", "kernel": "float64", "layer": "reference", "status": "ok",
        "reason": None, "latency_us": {"n": 3, "p50": 6, "p90": 7, "p99": 7, "mean": 6, "samples": [5, 6, 7]}}))
    doc, warnings = raw.assemble(tmp_path)
    plan = tmp_path / "raw" / "plan.json"
    assert warnings == [f"warning: {plan}: no {key!r} (taken as empty)" for key in ("tiers", "splits")]
    assert [(r.backend, r.variant) for r in doc.results] == [("numpy", "float64"), ("torch", "graph")]
    assert [r.tier for r in doc.results] == ["reference", None]
    assert "| numpy | cpu | float64 | 6 |" in report.markdown(doc)


def test_a_row_names_the_runtime_its_net_reports():
    row = Row(backend="keras", device="cpu", variant="call", runtime="Keras on torch", status="ok")
    assert readings.label(row) == "keras/cpu [call] (Keras on torch)"
    old = {"backend": "keras", "device": "cpu", "variant": "jax/call", "status": "ok", "keras_backend": "jax"}
    assert results.from_json(Row, old).runtime == "Keras on jax"                       # a row of an earlier version
    assert worker.run(worker.Config("numpy", modes=())).runtime is None


def test_versions_are_found_whatever_distribution_provides_the_module():
    import importlib.metadata as md
    versions = meta.versions()
    for module in meta.MODULES:
        if find_spec(module) is not None:
            dist = md.packages_distributions()[module][0]
            assert versions[module].startswith(md.version(dist)), (module, dist, versions.get(module))


def test_variant_all_plans_only_the_variants_each_device_runs():
    from lenet.bench import cli
    if lenet.backends.unavailable("numba", "cpu"):
        pytest.skip(f"numba on cpu: {lenet.backends.unavailable('numba', 'cpu')}")
    runs, skipped = cli.plan(cli.parser().parse_args(["--backend", "numba", "--device", "cpu", "--variant", "all"]),
                             ("latency",))
    assert sorted(c.variant for c in runs) == sorted(lenet.backends.variants("numba", "cpu")) == ["1thread", "prange"]
    assert skipped == []


def test_a_comma_list_of_backends_is_planned_like_all_and_a_bad_list_is_refused():
    from lenet.bench import cli
    args = cli.parser().parse_args(["--backend", "numpy,cudnn", "--device", "gpu", "--variant", "all"])
    runs, skipped = cli.plan(args, ("latency",))
    assert [(r.backend, r.reason.startswith("numpy has no gpu")) for r in skipped][:1] == [("numpy", True)]
    assert {c.backend for c in runs} | {r.backend for r in skipped} == {"numpy", "cudnn"}
    for argv, why in ((["numpy,numpy"], "a backend named twice"), (["numpy,nope"], "unknown backend 'nope'"),
                      (["numpy,cblas", "--variant", "float32"], "--variant must be 'all' or left out")):
        with pytest.raises(lenet.InputError, match=why):
            cli.plan(cli.parser().parse_args(["--backend", *argv]), ("latency",))


def test_backend_slash_variant_plans_exactly_the_variants_named():
    from lenet.bench import cli
    args = cli.parser().parse_args(["--backend", "numpy/float64,cudnn/graph", "--device", "gpu"])
    runs, skipped = cli.plan(args, ("latency",))
    assert [(r.backend, r.variant, r.reason) for r in skipped][0] == ("numpy", "float64", "numpy has no gpu implementation (devices: cpu)")
    assert {(c.backend, c.variant) for c in runs} | {(r.backend, r.variant) for r in skipped} == {("numpy", "float64"), ("cudnn", "graph")}
    runs, _ = cli.plan(cli.parser().parse_args(["--backend", "numpy/float64,cblas", "--device", "cpu"]), ("latency",))
    assert [(c.backend, c.variant) for c in runs] == [("numpy", "float64"), ("cblas", lenet.backends.default_variant("cblas", "cpu"))]
    for argv, why in ((["numpy/float32,numpy/float32"], "a backend named twice"),
                      (["numpy/float32,numpy"], "a variant named twice"),
                      (["numpy/graph,cblas"], "^numpy: unknown variant 'graph' ")):
        with pytest.raises(lenet.InputError, match=why):
            cli.plan(cli.parser().parse_args(["--backend", *argv, "--device", "cpu"]), ("latency",))


def test_variant_all_plans_every_variant_and_an_unknown_one_is_refused():
    from lenet.bench import cli
    args = cli.parser().parse_args(["--backend", "numpy", "--variant", "all"])
    assert [c.variant for c in cli.plan(args, ("latency",))[0]] == ["float32", "float64"]
    with pytest.raises(lenet.InputError, match="^numpy: unknown variant 'graph' "):
        cli.plan(cli.parser().parse_args(["--backend", "numpy", "--variant", "graph"]), ("latency",))


def test_a_row_of_an_earlier_run_with_flat_throughput_fields_loads_into_one_throughput_record():
    from lenet.bench.results import Row, Throughput
    from lenet.bench.typed import from_json
    flat = {"backend": "numpy", "device": "cpu", "variant": "float32", "status": "ok",
            "throughput_ips": {"1": 10.0, "64": 300.0}, "throughput_runs": {"1": [9.0, 10.0], "64": [300.0, 310.0]}}
    assert from_json(Row, flat).throughput == Throughput({"1": 10.0, "64": 300.0}, {"1": [9.0, 10.0], "64": [300.0, 310.0]})
    assert from_json(Row, {**flat, "throughput_ips": None, "throughput_runs": None}).throughput is None


def test_a_row_of_an_earlier_run_with_flat_latency_fields_loads_into_one_latency_record():
    from lenet.bench.results import Summary
    from lenet.bench.typed import from_json, to_json
    host, fwd, enq = (Summary(n=3, p50=p, p90=p, p99=p, mean=p) for p in (20.0, 9.0, 5.0))
    gpu = {"device_us": {"forward": fwd, "kernels": fwd}, "host_enqueue_us": {"enqueue": enq, "total": host}}
    flat = {"backend": "cupy", "device": "gpu", "variant": "3", "status": "ok", "latency_us": to_json(host), **to_json(gpu)}
    assert from_json(Row, flat).latency == Latency(host, **gpu)
    assert from_json(Row, {k: v for k, v in flat.items() if k not in gpu}).latency == Latency(host)     # a CPU row
    assert from_json(Row, {**flat, "latency_us": None, "device_us": None, "host_enqueue_us": None}).latency is None
    with pytest.raises(ValueError, match=r"^\$\.latency\.host_us: null where Summary is expected"):
        from_json(Row, {**flat, "latency_us": None})           # device times without their latency: refused
