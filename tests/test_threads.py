"""Threads and fork(), for every CPU backend that runs here (docs/using.md, "Threads and fork"):
one net shared by 4 threads gives its single-thread results bit for bit, and in a fork() child a
net either works (bit for bit) or is refused in one clear line, never hangs. Each group runs in its
own process (tests/threads_and_fork.py): TensorFlow and PyTorch do not share one."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from lenet import backends

HERE = Path(__file__).resolve().parent
REFUSED = "cannot be used in a fork() child of a process that loaded"
GROUPS = {                                  # backend: (variants, what a fork() child gets)
    "numpy": (["float32", "float64"], "same"),
    "cblas": (["threads", "1thread"], "same"),
    "onnxruntime": (["default", "1thread"], "same"),
    "numba": (["prange", "1thread"], "refused"),
    "torch": (["eager"], "refused"),
    "tensorflow": (["graph"], "refused"),
    "keras": ([None], "refused"),             # the Keras backend of this environment
}
PROCESSES = [["numpy", "cblas", "onnxruntime"], ["numba"], ["torch"], ["tensorflow", "keras"]]


@pytest.fixture(scope="module")
def verdicts() -> dict:
    """{(backend, variant): {"threads": ..., "fork": ...}} from one child process per group."""
    found = {}
    for group in PROCESSES:
        runnable = [b for b in group if backends.unavailable(b, "cpu") is None]
        specs = [b + (":" + ",".join(GROUPS[b][0]) if GROUPS[b][0] != [None] else "") for b in runnable]
        if not specs:
            continue
        done = subprocess.run([sys.executable, str(HERE / "threads_and_fork.py"), *specs],
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        for line in done.stdout.splitlines():
            row = json.loads(line)
            found[row["backend"], row["variant"] if GROUPS[row["backend"]][0] != [None] else None] = row
    return found


@pytest.mark.parametrize("backend, variant", [(b, v) for b, (vs, _) in GROUPS.items() for v in vs])
def test_threads_and_fork(verdicts, backend, variant):
    reason = backends.unavailable(backend, "cpu")
    if reason:
        pytest.skip(f"{backend} on cpu: {reason}")
    row = verdicts[backend, variant]
    if GROUPS[backend][1] == "same":
        assert row["fork"] == "same", row
    else:
        refused = f"error: UnavailableError: {backend}: {REFUSED}"
        assert row["fork"].startswith(refused) and f"; a new net: {refused}" in row["fork"], row
    assert row["threads"] == "same", row


def test_the_docs_table_says_what_the_tests_find():
    """docs/using.md's "one net, 4 threads" column is "bit-identical" for every backend tested above
    (where it once said numba gave wrong results, after a lock had fixed them)."""
    table = (HERE.parent / "docs" / "using.md").read_text(encoding="utf-8").split("## Threads and fork")[1]
    rows = {line.split("|")[1].split()[0]: line.split("|")[2].strip() for line in table.splitlines()
            if line.startswith("| ") and "(" in line.split("|")[1]}
    for backend in GROUPS:
        assert rows[backend].startswith("bit-identical"), (backend, rows[backend])


CROSS = """
import os, numpy as np, lenet
lenet.load("keras", variant="torch/predict_on_batch")          # Keras on torch starts torch's pools
if os.fork() == 0:
    try:
        lenet.load("torch")
        print("loaded")
    except lenet.UnavailableError as exc:
        print(exc)
    os._exit(0)
os.wait()
"""


def test_keras_on_torch_in_the_parent_refuses_torch_in_a_fork_child():
    for backend in ("keras", "torch"):
        reason = backends.unavailable(backend, "cpu")
        if reason:
            pytest.skip(f"{backend} on cpu: {reason}")
    done = subprocess.run([sys.executable, "-c", CROSS], capture_output=True, text=True, timeout=300)
    assert done.stdout.startswith(f"torch: {REFUSED} torch"), done.stdout + done.stderr[-2000:]
