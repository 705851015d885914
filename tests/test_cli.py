"""The command-line tools: a normal run each, and their one-line errors."""
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import lenet
from test_data import write_mnist_dir

ROOT = Path(__file__).resolve().parents[1]


def cli(*args, cwd=None):
    proc = subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, cwd=cwd, timeout=300)
    return proc.returncode, proc.stdout, proc.stderr


def assert_one_line_error(rc, stderr, message):
    assert rc == 2, stderr
    assert stderr.count("\n") == 1 and stderr.startswith("error: ") and message in stderr, stderr


def test_train_exports_weights_that_load(tmp_path, dataset):
    data_dir = write_mnist_dir(tmp_path / "mnist", dataset, n_train=128, n_test=64)
    out = tmp_path / "out" / "w.safetensors"
    rc, stdout, stderr = cli("lenet.train", "--backend", "numpy", "--epochs", "2", "--data", str(data_dir),
                             "--augment", "2", "--export", str(out))
    assert rc == 0, stderr
    assert "epoch   2  loss" in stdout and "test accuracy" in stdout
    params, meta = lenet.weights.read(out)
    assert meta["epochs"] == "2" and meta["trainer"] == "numpy/cpu" and meta["dataset"] == "mnist"
    assert "--export" in meta["command"] and 0 <= float(meta["test_accuracy"]) <= 1


@pytest.mark.parametrize("args, message", [
    (["--backend", "nonesuch"], "unknown backend 'nonesuch'"),
    (["--epochs", "0"], "--epochs"),
    (["--augment", "30"], "--augment"),
    (["--seed", "-1"], "argument --seed: expected an integer in 0..4294967295, got '-1'"),
    (["--lr", "inf"], "argument --lr: expected a number in (0, 1e+06], got 'inf'"),
    (["--export", ""], "cannot write .: it is a directory"),       # an empty path is no path, not the default
    (["--init", ""], ".: is a directory"),
    (["--data", ""], ".: no train-images-idx3-ubyte[.gz]"),
    (["--init", "missing.safetensors"], "missing.safetensors: no such file"),
    (["--data", "missing-dir"], "missing-dir: no such data directory"),      # under tmp_path, the cwd
    (["--device", "gpu"], "numpy has no gpu implementation"),
])
def test_train_errors(args, message, tmp_path):
    assert_one_line_error(*cli("lenet.train", *args, cwd=tmp_path)[::2], message)


@pytest.mark.parametrize("args, message", [
    (["--data", "missing-dir"], "missing-dir: no such data directory"),
    (["--init", "missing.safetensors"], "missing.safetensors: no such file"),
    (["--device", "gpu"], "numpy has no gpu implementation"),
])
def test_train_refuses_bad_inputs_before_it_makes_the_export_directory(args, message, tmp_path):
    rc, stdout, stderr = cli("lenet.train", "--export", "sub/w.safetensors", *args, cwd=tmp_path)
    assert_one_line_error(rc, stderr, message)
    assert not list(tmp_path.iterdir())


def test_no_test_assumes_a_path_outside_its_own_directory_is_missing():
    """Debian's `nobody` has /nonexistent as its home, and tools run as that user create it: a
    test's missing paths live under its own tmp_path."""
    import ast
    import re
    from pathlib import Path
    guessed = re.compile(r"^/(nonexist|does-?not-?exist|no-?such|missing|nope|not-?there)", re.I)
    found = [f"{path.name}:{node.lineno} {node.value}" for path in sorted(Path(__file__).parent.glob("*.py"))
             for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
             if isinstance(node, ast.Constant) and isinstance(node.value, str) and guessed.match(node.value)]
    assert not found, found


HUGE = "18446744073709551616"          # 2**64: past every machine word
NUMERIC = [                             # (tool, option, its range as docs/using.md lists it, a value in range)
    ("lenet.train", "--epochs", "1..1000", "1"), ("lenet.train", "--batch-size", "1..4096", "8"),
    ("lenet.train", "--lr", "(0, 1e+06]", "0.05"), ("lenet.train", "--seed", "0..4294967295", "0"),
    ("lenet.train", "--augment", "0..8", "0"),
    ("lenet.bench", "--epochs", "1..100", "1"), ("lenet.bench", "--repeats", "1..100", "1"),
    ("lenet.bench", "--timeout", "(0, 86400]", "1"),
    ("lenet.bench.devmem", "--predictions", "1..10000000", "1"), ("lenet.bench.devmem", "--bound-mib", "[0, 1024]", "0"),
    ("lenet.bench.devmem", "--timeout", "(0, 86400]", "1"), ("lenet.emu", "--batch", "1..64", "7"),
]


@pytest.mark.parametrize("tool, option, span, good", NUMERIC)
def test_every_numeric_option_refuses_what_is_out_of_its_range(tool, option, span, good, tmp_path):
    """Huge, 1e9, negative, zero where zero is out, NaN and infinity: one line, before any work."""
    low, high = span.strip("([]").split("..") if ".." in span else span.strip("([]").split(", ")
    bad = {HUGE, "1e9", "-1", "nan", "inf", "x", str(float(high) * 10)} - {good}
    if span.startswith("("):
        bad.add(low)
    for value in sorted(bad):
        start = time.perf_counter()
        rc, _, stderr = cli(tool, option, value, cwd=tmp_path)
        assert_one_line_error(rc, stderr, f"argument {option}: expected ")
        assert f"in {span}, got {value!r}" in stderr and time.perf_counter() - start < 30, stderr
    assert span in (ROOT / "docs" / "using.md").read_text(encoding="utf-8"), span


def test_bench_batch_sizes_are_bounded(tmp_path):
    for value in (HUGE, "0", "5000", "1e9", "nan"):
        assert_one_line_error(*cli("lenet.bench", "--batch-sizes", f"1,{value}", cwd=tmp_path)[::2],
                              "bad batch sizes")
    assert_one_line_error(*cli("lenet.bench", "--batch-sizes", "", cwd=tmp_path)[::2], "bad batch sizes ''")   # not the default


@pytest.mark.parametrize("where, message", [
    ("a-file/w.safetensors", "cannot write"),               # its directory would be a plain file
    ("a-dir", "it is a directory"),
    ("/proc/lenet/w.safetensors", "cannot write /proc/lenet/w.safetensors"),
])
def test_train_export_to_an_unwritable_path_fails_before_training(tmp_path, where, message):
    (tmp_path / "a-file").write_text("not a directory")
    (tmp_path / "a-dir").mkdir()
    start = time.perf_counter()
    rc, stdout, stderr = cli("lenet.train", "--epochs", "40", "--export", where, cwd=tmp_path)
    assert_one_line_error(rc, stderr, message)
    assert "epoch" not in stdout and "training" not in stderr and time.perf_counter() - start < 60
    assert ".tmp" not in stderr


def test_train_export_onto_a_full_disk_fails_before_training(tmp_path, monkeypatch, capsys):
    """The file system has less room than a weights file (its free space reported as 1 MB): one
    line before the first epoch, and the previous file is left as it was."""
    import shutil
    import lenet.train
    target = lenet.weights.save(tmp_path / "w.safetensors", lenet.model.init_params())
    before = target.read_bytes()
    real = shutil.disk_usage
    monkeypatch.setattr(shutil, "disk_usage", lambda p: real(p)._replace(free=1_000_000))
    assert lenet.train.run(["--epochs", "1", "--export", str(target)]) == 2
    err = capsys.readouterr().err
    assert err == (f"error: cannot write {target}: 1,000,000 bytes free on its file system, "
                   f"{lenet.weights.file_size():,} needed\n"), err
    assert target.read_bytes() == before


def test_a_failed_export_names_the_file_not_its_temporary(tmp_path, monkeypatch):
    def refuse(src, dst):
        raise PermissionError(13, "Permission denied", src, dst)

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(OSError) as error:
        lenet.weights.save(tmp_path / "w.safetensors", lenet.model.init_params())
    assert str(error.value) == f"[Errno 13] cannot write {tmp_path / 'w.safetensors'}: permission denied"
    assert list(tmp_path.iterdir()) == []


def test_predict_images_and_indices(tmp_path, dataset):
    from PIL import Image
    digit = dataset.test_x[np.flatnonzero(dataset.test_y == 7)[0], 0]
    png = tmp_path / "seven.png"
    Image.fromarray(np.rint(digit * 255).astype(np.uint8)).save(png)
    big = tmp_path / "seven-on-paper.pgm"           # dark ink on white, larger: inverted and resized
    Image.fromarray(255 - np.rint(digit * 255).astype(np.uint8)).resize((56, 56)).save(big)
    rc, stdout, stderr = cli("lenet.predict", str(png), str(big), "--index", "0", "--index", "-1")
    assert rc == 0, stderr
    lines = stdout.splitlines()[1:]
    assert lines[0].split()[1] == "7" and lines[1].split()[1] == "7"
    assert "(label 0)" in lines[2] and "(label 9)" in lines[3] and lines[3].split()[2] == "#999"


def test_predict_errors(tmp_path):
    text = tmp_path / "notes.png"
    text.write_text("not an image")
    assert_one_line_error(*cli("lenet.predict", str(text))[::2], "notes.png: not an image file Pillow can read")
    assert_one_line_error(*cli("lenet.predict", str(tmp_path / "none.png"))[::2], "none.png: no such file")
    assert_one_line_error(*cli("lenet.predict", "--backend", "nonesuch", "--index", "0")[::2], "unknown backend")
    assert_one_line_error(*cli("lenet.predict", "--index", "5000")[::2], "out of range")
    assert_one_line_error(*cli("lenet.predict", "--index", "-1001")[::2], "--index -1001 out of range")
    assert_one_line_error(*cli("lenet.predict")[::2], "at least one IMAGE")
    assert_one_line_error(*cli("lenet.predict", "--index", "0", "--weights", str(tmp_path / "w.safetensors"))[::2],
                          "w.safetensors: no such file")


def test_augmentation_shifts_each_image_by_its_own_offset():
    from lenet.train import shifted
    x = np.arange(3 * 28 * 28, dtype=np.float32).reshape(3, 1, 28, 28)
    y = shifted(x, 2, np.random.default_rng(5))
    dy, dx = np.random.default_rng(5).integers(0, 5, (2, 3))
    for i in range(3):
        assert np.array_equal(y[i, 0], np.pad(x[i, 0], 2)[dy[i]:dy[i] + 28, dx[i]:dx[i] + 28])
    assert y.flags.c_contiguous and not np.array_equal(y, x)


@pytest.mark.parametrize("backend", ["cblas", "numba", "tensorflow", "keras", "torch"])
def test_every_training_backend_exports_weights_through_the_cli(backend, tmp_path, dataset):
    reason = lenet.backends.unavailable(backend, "cpu")
    if reason:
        pytest.skip(f"{backend} on cpu: {reason}")
    data_dir = write_mnist_dir(tmp_path / "mnist", dataset, n_train=128, n_test=64)
    out = tmp_path / f"{backend}.safetensors"
    rc, stdout, stderr = cli("lenet.train", "--backend", backend, "--epochs", "1", "--data", str(data_dir),
                             "--export", str(out))
    assert rc == 0, stderr
    params, meta = lenet.weights.read(out)                  # canonical: the reference can run them
    assert meta["trainer"] == f"{backend}/cpu"
    ds = lenet.data.load(data_dir=data_dir)
    from lenet.train import evaluate
    assert evaluate(lenet.load("numpy", params=params), ds.test_x, ds.test_y) == pytest.approx(
        float(meta["test_accuracy"]), abs=1 / 64)           # one near-tie digit may flip


def test_train_with_an_inference_engine_is_one_line_before_the_data_is_read(tmp_path):
    """No "training ..." line first, no weights written, and a data directory that does not exist
    is never looked at: ONNX Runtime does not train, installed or not."""
    rc, stdout, stderr = cli("lenet.train", "--backend", "onnxruntime", "--export", "w.safetensors",
                             "--data", "no-data-here", cwd=tmp_path)
    assert_one_line_error(rc, stderr, "onnxruntime is an inference engine: it does not train")
    assert stdout == "" and not list(tmp_path.iterdir())
    assert [b for b in lenet.backends.names() if lenet.backends.training_unavailable(b)] == ["onnxruntime"]


@pytest.mark.parametrize("args", [["lenet.predict", "--index", "0", "--weights", ""],
                                  ["lenet.export", "--onnx", "x.onnx", "--weights", ""]])
def test_an_empty_weights_path_is_no_path_not_the_default(args, tmp_path):
    assert_one_line_error(*cli(*args, cwd=tmp_path)[::2], ".: is a directory, not a regular file")


def test_a_closed_output_pipe_stops_quietly():
    """`python -m lenet.predict ... | head -1`: no "Broken pipe" error, the status a SIGPIPE gives."""
    args = [a for i in range(1000) for a in ("--index", str(i))]
    proc = subprocess.Popen([sys.executable, "-m", "lenet.predict", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().startswith("image")
    proc.stdout.close()
    assert proc.wait(timeout=300) == 141 and proc.stderr.read() == ""


def test_expected_failures_are_one_line_and_bugs_keep_their_traceback(capsys):
    from lenet._cli import guarded

    def fails(exc):
        def main(argv):
            raise exc
        return guarded(main)

    assert fails(lenet.InputError("bad  input\nsecond line"))([]) == 2
    assert capsys.readouterr().err == "error: bad input second line\n"
    assert fails(FileNotFoundError(2, "No such file or directory"))([]) == 2
    for bug in (ValueError("a programming error"), RuntimeError("another")):
        with pytest.raises(type(bug)):
            fails(bug)([])
