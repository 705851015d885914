"""A benchmark run's identity and its end: one run per --out, earlier results moved aside,
workers that die with the bench, bad arguments refused before any measuring."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lenet.bench import rundir
from lenet.bench.readings import fmt
from lenet.bench.results import Meta

from test_bench import bench, small_run, validate
from test_data import write_mnist_dir

QUICK = ("--backend", "numpy", "--quick", "--no-plots")


def test_a_second_run_into_the_same_out_is_refused(tmp_path):
    small_run(tmp_path, Meta(run_id="20261123T000000Z-1", command="python -m lenet.bench --out x",
                             repeats=1, modes=["latency"]))
    held = rundir.lock(tmp_path)                   # the first run, still writing
    try:
        rc, _, stderr = bench(*QUICK, "--out", str(tmp_path), "--json", str(tmp_path / "new" / "r.json"))
    finally:
        os.close(held)
    assert rc == 2 and stderr.count("\n") == 1, stderr
    assert not (tmp_path / "new").exists()                         # the folder made for --json removed again
    assert stderr == (f"error: {tmp_path} is in use by another benchmark run (run 20261123T000000Z-1: "
                      "`python -m lenet.bench --out x`): wait for it to end or pass another --out\n")
    assert (tmp_path / "raw" / "run-0-0.json").is_file()          # nothing of the first run touched


def test_a_new_run_moves_the_previous_results_aside(tmp_path):
    small_run(tmp_path, Meta(run_id="20261123T000000Z-1", repeats=1, modes=["latency"]))
    (tmp_path / "results.md").write_text("the previous report\n")
    rc, _, stderr = bench(*QUICK, "--mode", "latency", "--out", str(tmp_path))
    assert rc == 0, stderr
    previous = tmp_path / "previous" / "20261123T000000Z-1"
    assert f"moved the previous run's results to {previous}/" in stderr
    assert (previous / "results.md").read_text() == "the previous report\n"
    assert sorted(p.name for p in (previous / "raw").iterdir()) == ["plan.json", "run-0-0.json"]
    doc = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
    validate(doc)
    assert doc["meta"]["run_id"] != "20261123T000000Z-1" and doc["meta"]["runs_finished"] == 1


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _bench_workers(pid: int) -> list[int]:
    """pid's children that run a benchmark worker (one that exits meanwhile is left out)."""
    found = []
    for child in _children(pid):
        try:
            if b"lenet.bench.worker" in Path(f"/proc/{child}/cmdline").read_bytes():
                found.append(child)
        except OSError:
            continue
    return found


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_a_killed_bench_takes_its_worker_with_it(tmp_path, sig):
    proc = subprocess.Popen([sys.executable, "-m", "lenet.bench", "--backend", "numpy", "--mode", "latency",
                             "--repeats", "2", "--no-plots", "--out", str(tmp_path)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline, workers = time.monotonic() + 300, []
    while not workers and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
        workers = _bench_workers(proc.pid) if (tmp_path / "raw" / "plan.json").exists() else []
    assert workers, "no worker started"
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=60)
    deadline = time.monotonic() + 20
    while any(_alive(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(w) for w in workers), "the worker outlived the bench"
    if sig == signal.SIGTERM:                        # handled as Ctrl-C is, exit 128 + 15 as shells give
        assert proc.returncode == 143 and "interrupted" in stderr, stderr
    else:
        assert proc.returncode == -signal.SIGKILL
    assert (tmp_path / "raw" / "plan.json").is_file()
    rc, _, stderr = bench(*QUICK, "--mode", "latency", "--out", str(tmp_path))   # the lock went with it
    assert rc == 0, stderr


def test_a_signal_while_a_worker_starts_leaves_no_timer_and_no_worker(monkeypatch):
    """SIGTERM can land while spawn() starts the worker's timeout timer (its start() waits, and a
    signal handler raises there). The worker must be killed and the timer stopped: a timer left
    running kept a stopped bench alive at exit for the worker's whole timeout (seen in CI)."""
    import threading

    from lenet.bench import runner, worker
    started, real_start = [], threading.Timer.start

    def start_then_signal(timer):
        real_start(timer)
        started.append(timer)
        raise runner.Signalled(signal.SIGTERM)
    monkeypatch.setattr(threading.Timer, "start", start_then_signal)
    cfg = worker.Config("numpy", modes=("latency",), batch_sizes=(1,), budget=worker.Budget.quick())
    with pytest.raises(runner.Signalled):
        runner.spawn(cfg, 300, lambda text: None)
    assert len(started) == 1
    started[0].join(5)
    assert not started[0].is_alive(), "the worker's timer still runs"
    deadline = time.monotonic() + 20
    workers = lambda: [c for c in _bench_workers(os.getpid()) if _alive(c)]
    while workers() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not workers(), "the worker outlived the signal"


def test_a_worker_that_dies_in_a_phase_leaves_the_phases_before_it():
    """A backend's library that kills its process (seen on an H100: heap corruption, SIGABRT in
    training) costs only the phase it died in: the row keeps what was measured, `cut` says why."""
    from lenet.bench import runner, worker

    def on_phase(text):
        if text == "batch throughput":                     # latency is done: the worker dies now
            for child in _bench_workers(os.getpid()):
                os.kill(child, signal.SIGABRT)
    cfg = worker.Config("numpy", modes=("latency", "throughput", "train"), batch_sizes=(1, 64),
                        budget=worker.Budget.quick())
    row = runner.spawn(cfg, 300, on_phase)
    assert row.ok and row.check.ok and row.latency.host_us.n > 0, row
    assert row.throughput is None and row.train is None
    assert row.cut.startswith("worker killed by SIGABRT while batch throughput"), row.cut
    assert (row.variant, row.pid) != (None, None)


def test_a_phase_that_raises_after_the_check_keeps_the_phases_before_it(monkeypatch):
    from lenet.bench import worker

    def broken(*args):
        raise RuntimeError("out of\nmemory")
    monkeypatch.setattr(worker, "throughput", broken)
    kept = []
    row = worker.run(worker.Config("numpy", modes=("latency", "throughput"), budget=worker.Budget.quick()), kept.append)
    assert row.ok and row.latency.host_us.n > 0 and row.throughput is None, row
    assert row.cut == "RuntimeError: out of memory (while batch throughput)"
    assert [r.latency is not None for r in kept] == [False, True] and kept[-1].pid == row.pid


def test_lenet_data_is_the_training_data(tmp_path, dataset):
    write_mnist_dir(tmp_path / "mnist", dataset)
    env = dict(os.environ, LENET_DATA=str(tmp_path / "mnist"))
    rc, _, stderr = bench(*QUICK, "--mode", "train", "--out", str(tmp_path / "out"), env=env)
    assert rc == 0, stderr
    (row,) = json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))["results"]
    assert row["train"]["images"] == 96                    # the directory's 96 training images, not the 4 000 embedded
    env["LENET_DATA"] = str(tmp_path / "nowhere")
    rc, _, stderr = bench(*QUICK, "--mode", "train", "--out", str(tmp_path / "out2"), env=env)
    assert rc == 2 and str(tmp_path / "nowhere") in stderr and not (tmp_path / "out2" / "raw").exists(), stderr


def test_every_repeat_trains_and_the_table_shows_the_median_run_and_the_range(tmp_path):
    rc, _, stderr = bench(*QUICK, "--mode", "train", "--repeats", "3", "--out", str(tmp_path))
    assert rc == 0, stderr
    (row,) = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))["results"]
    train = row["train"]
    rates = train["runs"]
    assert len(rates) == 3 and train["images_per_s"] == sorted(rates)[1]   # the median run's own numbers
    assert train["images_per_s"] == pytest.approx(train["images"] / train["first_epoch_s"])
    text = (tmp_path / "results.md").read_text(encoding="utf-8")
    assert "min–max in brackets" in text
    assert f"({fmt(min(rates))}–{fmt(max(rates))})" in text
