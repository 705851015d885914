"""Every file the project reads or writes: regular files only, never a hang on a FIFO, never a device
replaced, and OS errors said as they are (permission denied, a symlink loop, a deleted working
directory), through the command-line tools."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import lenet
from lenet import data
from lenet._files import atomic_write, check_writable, open_regular, read_json
from lenet.errors import DataError, InputError
from test_cli import assert_one_line_error
from test_data import write_mnist_dir


def run(*args, cwd=None, before=None, user=()):
    """A command-line tool in a child process; (status, stdout, stderr). `before` runs in the child
    before Python starts; `user` prefixes the command (setpriv ...). A child that blocks (on a FIFO,
    say) fails the test after 60 s."""
    proc = subprocess.run([*user, sys.executable, "-m", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=60, preexec_fn=before)
    return proc.returncode, proc.stdout, proc.stderr


@pytest.fixture
def odd_files(tmp_path):
    """Paths in tmp_path that are not regular files: a FIFO nobody writes, a directory, a symlink loop,
    a character device (the real /dev/null, for reading only), and a missing file."""
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "dir").mkdir()
    (tmp_path / "loop-a").symlink_to(tmp_path / "loop-b")
    (tmp_path / "loop-b").symlink_to(tmp_path / "loop-a")
    return {"fifo": (tmp_path / "fifo", "is a FIFO (named pipe), not a regular file"),
            "dir": (tmp_path / "dir", "is a directory, not a regular file"),
            "loop": (tmp_path / "loop-a", "a symlink loop"),
            "device": ("/dev/null", "is a character device, not a regular file"),
            "missing": (tmp_path / "missing", "no such file")}


@pytest.mark.parametrize("kind", ["fifo", "dir", "loop", "device", "missing"])
def test_reading_refuses_anything_but_a_regular_file(odd_files, kind):
    path, message = odd_files[kind]
    with pytest.raises(DataError) as error:
        open_regular(path, DataError)
    assert str(error.value).startswith(f"{path}: {message}")


@pytest.mark.parametrize("kind", ["fifo", "loop", "device"])
def test_the_tools_refuse_them_as_images_weights_and_data(odd_files, kind, tmp_path):
    path, message = odd_files[kind]
    assert_one_line_error(*run("lenet.predict", str(path))[::2], f"{path}: {message}")
    assert_one_line_error(*run("lenet.predict", "--index", "0", "--weights", str(path))[::2], f"{path}: {message}")
    assert_one_line_error(*run("lenet.export", "--onnx", str(tmp_path / "x.onnx"), "--weights", str(path))[::2],
                          f"{path}: {message}")
    directory = tmp_path / "mnist"
    directory.mkdir()
    for stem in data.SPLIT_FILES.values():
        (directory / stem).symlink_to(path)
    assert_one_line_error(*run("lenet.train", "--data", str(directory))[::2], f"{message}")


def test_a_data_directory_that_is_a_file_or_missing(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(DataError, match="file: not a directory$"):
        data.load(data_dir=tmp_path / "file")
    with pytest.raises(DataError, match="missing: no such data directory$"):
        data.load(data_dir=tmp_path / "missing")


def device_node(tmp_path):
    """A character device of our own (the kernel's null device, made with mknod), or a skip."""
    node = tmp_path / "null"
    try:
        os.mknod(node, 0o666 | 0o020000, os.makedev(1, 3))
    except OSError as exc:
        pytest.skip(f"cannot make a device node here: {exc.strerror}")
    return node


@pytest.mark.parametrize("kind", ["fifo", "device", "dir"])
def test_writing_never_replaces_what_is_not_a_regular_file(tmp_path, kind):
    path = {"fifo": tmp_path / "fifo", "dir": tmp_path / "dir"}.get(kind) or device_node(tmp_path)
    if kind == "fifo":
        os.mkfifo(path)
    if kind == "dir":
        path.mkdir()
    what = {"fifo": "a FIFO (named pipe)", "device": "a character device", "dir": "a directory"}[kind]
    mode = os.stat(path).st_mode
    for write in (check_writable, lambda p: atomic_write(p, b"data"),
                  lambda p: lenet.weights.save(p, lenet.model.init_params())):
        with pytest.raises(InputError, match=re.escape(f"cannot write {path}: it is {what}, not a regular file")):
            write(path)
        assert os.stat(path).st_mode == mode
    assert_one_line_error(*run("lenet.train", "--epochs", "1", "--export", str(path))[::2], f"it is {what}")
    assert os.stat(path).st_mode == mode and sorted(p.name for p in tmp_path.iterdir()) == [path.name]


@pytest.fixture
def unreadable():
    """(a command prefix that runs a tool as a user who cannot read a mode-000 file, a directory for
    such files): as root, util-linux's setpriv runs it as nobody; the directory is one others may enter."""
    user = ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups") if os.geteuid() == 0 else ()
    try:
        code, _, stderr = run("lenet", "--help", user=user)         # can that user run Python and lenet at all?
    except OSError as exc:
        pytest.skip(f"cannot run a tool as an unprivileged user: {exc}")
    if "No module named lenet.__main__" not in stderr:
        pytest.skip(f"an unprivileged user cannot run this Python here: {stderr.strip()[-200:]}")
    directory = tempfile.mkdtemp(prefix="lenet-perm-")
    os.chmod(directory, 0o755)
    yield user, directory
    shutil.rmtree(directory)


def test_permission_denied_is_said_as_such(unreadable, dataset):
    user, directory = unreadable
    w = lenet.weights.save(os.path.join(directory, "w.safetensors"), lenet.model.init_params())
    idx = write_mnist_dir(Path(directory), dataset) / "train-images-idx3-ubyte.gz"
    for path in (w, idx):
        os.chmod(path, 0)
    assert_one_line_error(*run("lenet.predict", "--index", "0", "--weights", str(w), user=user)[::2],
                          f"{w}: permission denied")
    assert_one_line_error(*run("lenet.train", "--data", directory, user=user)[::2], f"{idx}: permission denied")


def test_a_deleted_working_directory_is_named(tmp_path):
    gone = tmp_path / "gone"

    def enter_then_delete():                      # as when another shell deletes the directory we are in
        os.chdir(gone)
        os.rmdir(gone)

    for args in (["lenet.predict", "--index", "0", "--weights", "w.safetensors"],
                 ["lenet.predict", "digit.png"], ["lenet.train", "--data", "mnist"],
                 ["lenet.train", "--export", "w.safetensors"], ["lenet.export", "--onnx", "m.onnx"]):
        gone.mkdir()
        assert_one_line_error(*run(*args, before=enter_then_delete)[::2], "the working directory no longer exists")


def test_the_report_refuses_fifos_in_raw_and_as_the_readme(odd_files, tmp_path):
    """A FIFO among the raw results is a warning and left out; as the plan or the README, a one-line
    error: never a hang (run() fails the test after 60 s)."""
    from test_bench import small_run
    out = tmp_path / "out"
    small_run(out)
    for name in ("run-0-1.json", "floors-after.json"):
        os.mkfifo(out / "raw" / name)
    rc, _, stderr = run("lenet.bench.report", str(out), "--no-plots")
    assert rc == 0, stderr
    for name in ("run-0-1.json", "floors-after.json"):
        assert f"warning: {out / 'raw' / name}: is a FIFO (named pipe), not a regular file" in stderr, stderr
    fifo, message = odd_files["fifo"]
    assert_one_line_error(*run("lenet.bench.report", str(out), "--readme", str(fifo))[::2], f"{fifo}: {message}")
    (out / "raw" / "plan.json").unlink()
    os.mkfifo(out / "raw" / "plan.json")
    assert_one_line_error(*run("lenet.bench.report", str(out))[::2],
                          f"plan.json: not a benchmark plan (is a FIFO (named pipe), not a regular file)")


def test_a_new_run_moves_aside_a_previous_run_whose_plan_is_a_fifo(tmp_path):
    """The previous run's id is read from its plan: a FIFO there is no id, not a hang."""
    (tmp_path / "raw").mkdir(parents=True)
    os.mkfifo(tmp_path / "raw" / "plan.json")
    code = f"from pathlib import Path; from lenet.bench import rundir; print(rundir.move_previous(Path({str(tmp_path)!r})))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip().endswith("-earlier"), done.stderr


DEEP = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize("text, why", [
    (DEEP, "nested more than 64 levels deep"),
    ('{"a":' * 900 + "1" + "}" * 900, "nested more than 64 levels deep"),    # parses, but could not be written again
    ("\udcff", "not UTF-8 text"),
    ("", "empty file"),
])
def test_every_json_read_from_disk_is_one_error(tmp_path, text, why):
    path = tmp_path / "f.json"
    path.write_bytes(text.encode("utf-8", "surrogateescape"))
    with pytest.raises(InputError) as error:
        read_json(path, InputError)
    assert str(error.value).startswith(f"{path}: ") and why in str(error.value)


def test_a_huge_json_file_is_refused_from_its_size(tmp_path):
    """A sparse 10 GB raw result: refused before a byte is read, not read into memory."""
    path = tmp_path / "run-0-0.json"
    with open(path, "wb") as f:
        f.truncate(10 * 2**30)
    with pytest.raises(InputError, match=f"{path}: 10,737,418,240 bytes, more than the 268,435,456 this reader"):
        read_json(path, InputError)


def test_deep_json_in_raw_results_and_weights_is_one_line(tmp_path, dataset):
    from test_bench import small_run
    out = tmp_path / "out"
    small_run(out)
    step = json.loads((out / "raw" / "run-0-0.json").read_text())
    (out / "raw" / "run-0-1.json").write_text(json.dumps(step)[:-1] + ',"step_check":' + '{"a":' * 900 + "1" + "}" * 901)
    (out / "raw" / "run-0-2.json").write_text(DEEP)
    rc, _, stderr = run("lenet.bench.report", str(out), "--no-plots")
    assert rc == 0 and "Traceback" not in stderr, stderr
    for name in ("run-0-1.json", "run-0-2.json"):
        assert f"warning: {out / 'raw' / name}: not valid JSON (nested more than 64 levels deep); left out" in stderr
    (out / "raw" / "plan.json").write_text(DEEP)
    assert_one_line_error(*run("lenet.bench.report", str(out))[::2], "plan.json: not a benchmark plan (not valid JSON")

    saved = lenet.weights.save(tmp_path / "w.safetensors", lenet.model.init_params()).read_bytes()
    n = int.from_bytes(saved[:8], "little")
    header = json.loads(saved[8:8 + n])
    header["__metadata__"]["extra"] = "@"
    text = json.dumps(header).replace('"@"', DEEP).encode()
    deep = tmp_path / "deep.safetensors"
    deep.write_bytes(len(text).to_bytes(8, "little") + text + saved[8 + n:])
    assert_one_line_error(*run("lenet.predict", "--index", "0", "--weights", str(deep))[::2],
                          f"{deep}: not a safetensors file, or truncated or malformed")


def test_a_fifo_as_keras_json_does_not_block_the_listing(tmp_path):
    os.mkfifo(tmp_path / "keras.json")
    env = {k: v for k, v in os.environ.items() if k != "KERAS_BACKEND"} | {"KERAS_HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-m", "lenet.bench", "--list"], capture_output=True, text=True,
                          env=env, timeout=60)
    assert done.returncode == 0 and "keras" in done.stdout, done.stderr


def test_a_fifo_or_a_file_as_the_bench_output_directory(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "file").write_text("x")
    for name in ("fifo", "file"):
        assert_one_line_error(*run("lenet.bench", "--backend", "numpy", "--quick", "--out", str(tmp_path / name))[::2],
                              f"cannot write to output directory {tmp_path / name}: a part of its path is not a directory")


def test_a_bad_output_directory_leaves_no_folder_made_for_the_json(tmp_path):
    (tmp_path / "file").write_text("x")
    assert_one_line_error(*run("lenet.bench", "--backend", "numpy", "--quick", "--json",
                               str(tmp_path / "new" / "deeper" / "r.json"), "--out", str(tmp_path / "file" / "out"))[::2],
                          f"cannot write to output directory {tmp_path / 'file' / 'out'}: a part of its path is not a directory")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_a_directory_that_takes_no_new_files_is_named(tmp_path):
    """/proc exists but refuses every new file with ENOENT: said as such, not as "no such file"."""
    try:
        tempfile.TemporaryFile(dir="/proc").close()
        pytest.skip("/proc takes new files here (no procfs)")
    except FileNotFoundError:
        pass
    except OSError as exc:
        pytest.skip(f"/proc refuses new files otherwise here: {exc.strerror}")
    why = "/proc takes no new files"
    for path in (Path("/proc/lenet-test"), Path("/proc/lenet-test/a/b.json")):
        with pytest.raises(InputError, match=re.escape(f"cannot write {path}: {why}")):
            check_writable(path)
        with pytest.raises(OSError, match=re.escape(f"cannot write {path}: {why}")):
            atomic_write(path, b"data")
    for args in (["lenet.bench", "--backend", "numpy", "--quick", "--out", "/proc/lenet-test"],
                 ["lenet.bench", "--backend", "numpy", "--quick", "--json", "/proc/lenet-test/r.json",
                  "--out", str(tmp_path / "out")],
                 ["lenet.train", "--epochs", "1", "--export", "/proc/lenet-test.safetensors"],
                 ["lenet.export", "--onnx", "/proc/lenet-test.onnx"]):
        assert_one_line_error(*run(*args)[::2], why)
    assert not (tmp_path / "out").exists()
