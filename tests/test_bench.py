"""The benchmark: end to end on CPU, correctness gate, statistics, lines of code, bad arguments."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import lenet
from lenet.bench import loc, report, stats, worker

FIXTURES = Path(__file__).parent / "fixtures" / "loc"


def bench(*args, cwd=None):
    proc = subprocess.run([sys.executable, "-m", "lenet.bench", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=600)
    return proc.returncode, proc.stdout, proc.stderr


def test_quick_run_end_to_end(tmp_path):
    backends = ["numpy"] + [b for b in ("cblas",) if not lenet.backends.unavailable(b, "cpu")]
    docs = []
    for backend in backends:
        out = tmp_path / backend
        rc, stdout, stderr = bench("--backend", backend, "--device", "cpu", "--quick", "--out", str(out))
        assert rc == 0, stderr
        doc = json.loads((out / "results.json").read_text())
        report.validate(doc)                                   # the JSON schema of DESIGN.md §7
        assert {p.name for p in out.glob("*.png")} >= {"loc.png", "latency.png", "cost_of_abstraction.png",
                                                       "train.png", "latency_distribution.png"}
        table = (out / "results.md").read_text()
        assert f"| {backend} | cpu |" in table and "floor" in table
        docs.append(doc)
    for doc, backend in zip(docs, backends):
        (row,) = doc["results"]
        assert row["backend"] == backend and row["status"] == "ok", row["reason"]
        lat = row["latency_us"]
        assert 0 < lat["p50"] <= lat["p90"] <= lat["p99"] and lat["n"] == len(lat["samples"])
        assert row["accuracy"] == pytest.approx(0.978) and row["train"]["images_per_s"] > 0
        assert row["loc"]["code"] > 0 and set(row["throughput_ips"]) == {"1", "64"}
        assert doc["floors"]["cpu"]["floor_us"]["all_cores"] >= doc["floors"]["cpu"]["arithmetic_us"]["all_cores"] > 0


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
    assert result["status"] == "failed" and "reference" in result["reason"]
    assert result["latency_us"] is None and result["throughput_ips"] is None
    honest = worker.measure(lenet.load("numpy", params=params), cfg, dataset, params)
    assert honest["status"] == "ok" and honest["latency_us"]["n"] >= 30


def test_percentiles_against_known_samples():
    samples = list(range(1, 101))                           # 1..100
    assert [stats.percentile(samples, p) for p in (50, 90, 99, 100)] == [50, 90, 99, 100]
    assert stats.percentile([5.0, 1.0, 3.0], 50) == 3.0     # nearest rank: a measured value
    assert stats.percentile([7.0], 99) == 7.0
    s = stats.summary([4, 1, 3, 2], keep_samples=True)
    assert s == {"n": 4, "p50": 2.0, "p90": 4.0, "p99": 4.0, "mean": 2.5, "min": 1.0, "max": 4.0,
                 "samples": [4.0, 1.0, 3.0, 2.0]}
    assert stats.median([3, 1, 2, 10]) == 2.5
    with pytest.raises(ValueError):
        stats.percentile([], 50)


def test_lines_of_code_of_a_fixture_tree():
    counts = loc.count_files(["add.py", "scale.cu", "CMakeLists.txt"], FIXTURES)
    by_file = {f["path"]: (f["code"], f["comment"], f["blank"]) for f in counts["files"]}
    assert by_file == {
        "add.py": (2, 2, 1),            # def, return | docstring, comment | one blank
        "scale.cu": (3, 1, 2),          # three statements | header comment | a blank and a lone brace
        "CMakeLists.txt": (2, 1, 1),    # two commands | one comment | one blank
    }
    assert (counts["code"], counts["comment"], counts["blank"]) == (7, 4, 4)
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
])
def test_bad_arguments_give_one_line_errors(args, message):
    rc, stdout, stderr = bench(*args, "--quick")
    assert rc == 2 and stderr.count("\n") == 1 and stderr.startswith("error: ") and message in stderr, stderr


def test_list_shows_every_backend_and_device():
    rc, stdout, stderr = bench("--list")
    assert rc == 0, stderr
    rows = [line.split() for line in stdout.splitlines()[1:]]
    assert [r[:2] for r in rows] == [[b, d] for b, d, _, _ in lenet.available()]
    assert ["numpy", "cpu"] == rows[0][:2] and rows[0][-1] == "ok"


def test_kernel_all_plans_only_the_variants_each_device_runs():
    from lenet.bench import cli
    if lenet.backends.unavailable("numba", "cpu"):
        pytest.skip(f"numba on cpu: {lenet.backends.unavailable('numba', 'cpu')}")
    runs, skipped = cli.plan(cli.parser().parse_args(["--backend", "numba", "--device", "cpu", "--kernel", "all"]),
                             ("latency",))
    assert sorted(c.kernel for c in runs) == sorted(lenet.backends.kernels("numba", "cpu")) == ["1thread", "prange"]
    assert skipped == []
