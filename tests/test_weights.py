import json
import os
import struct
import subprocess
import sys

import numpy as np
import pytest
import safetensors.numpy

import lenet
from lenet.training import evaluate
from lenet import model, weights
from lenet.errors import WeightsError
from lenet._files import _umask


@pytest.fixture
def saved(tmp_path):
    params = model.init_params(seed=1)
    path = weights.save(tmp_path / "w.safetensors", params, {"dataset": "test", "epochs": 3})
    return path, params


def test_round_trip_is_exact_and_keeps_metadata(saved):
    path, params = saved
    loaded, meta = weights.read(path)
    assert list(loaded) == list(model.PARAM_NAMES)
    for name in model.PARAM_NAMES:
        assert loaded[name].dtype == np.float32 and np.array_equal(loaded[name], params[name])
    assert meta["dataset"] == "test" and meta["epochs"] == "3" and meta["format_version"] == "1"


def test_saved_files_get_ordinary_permissions(saved, tmp_path):
    path, params = saved
    assert path.stat().st_mode & 0o777 == 0o666 & ~_umask()        # not mkstemp's 0600
    path.chmod(0o640)
    weights.save(path, params)
    assert path.stat().st_mode & 0o777 == 0o640                    # an existing file keeps its mode


def test_files_are_standard_safetensors(saved, tmp_path):
    path, params = saved
    theirs = safetensors.numpy.load_file(str(path))
    assert all(np.array_equal(theirs[n], params[n]) for n in model.PARAM_NAMES)
    other = tmp_path / "theirs.safetensors"
    safetensors.numpy.save_file(params, str(other))
    assert all(np.array_equal(weights.load(other)[n], params[n]) for n in model.PARAM_NAMES)


def rewrite(path, header_edit=None, data_edit=None):
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header, body = json.loads(raw[8:8 + n]), raw[8 + n:]
    if header_edit:
        header_edit(header)
    if data_edit:
        body = data_edit(body)
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + body)


def test_wrong_name(saved):
    path, _ = saved
    rewrite(path, lambda h: h.update({"conv9.weight": h.pop("conv1.weight")}))
    with pytest.raises(WeightsError, match=r"missing tensors \['conv1.weight'\].*unexpected tensors \['conv9.weight'\]$"):
        weights.load(path)


def test_wrong_shape(saved):
    path, _ = saved
    rewrite(path, lambda h: h["fc1.weight"].update(shape=[800, 500]))
    with pytest.raises(WeightsError, match=r"fc1.weight has shape \(800, 500\), expected \(500, 800\)"):
        weights.load(path)


def test_wrong_dtype(saved):
    path, params = saved
    safetensors.numpy.save_file(dict(params, **{"fc2.bias": params["fc2.bias"].astype(np.float16)}), str(path))
    with pytest.raises(WeightsError, match="fc2.bias has dtype F16, expected F32"):
        weights.load(path)


def test_a_dtype_numpy_lacks_is_refused_not_a_traceback(saved):
    path, _ = saved
    rewrite(path, lambda h: h["fc2.bias"].update(dtype="BF16", shape=[20]))     # the same 40 bytes
    with pytest.raises(WeightsError, match="fc2.bias has dtype BF16, expected F32"):
        weights.load(path)


def test_names_are_checked_before_any_tensor_is_read(saved):
    """A 3 GB extra tensor in a sparse file (a few MB on disk): refused from the header, in a child
    process whose peak memory stays far below the 3 GB that reading it would take. (VmHWM, not
    ru_maxrss: Linux carries the forked parent's peak into the child's ru_maxrss across exec.)"""
    path, _ = saved
    extra = 750_000_000                                                          # float32: 3 GB
    size = len(path.read_bytes())

    def add(header):
        end = max(t["data_offsets"][1] for n, t in header.items() if n != "__metadata__")
        header["extra"] = {"dtype": "F32", "shape": [extra], "data_offsets": [end, end + 4 * extra]}

    rewrite(path, add)
    os.truncate(path, len(path.read_bytes()) + 4 * extra)
    assert os.stat(path).st_blocks * 512 < size + 1_000_000                       # sparse: the filesystem holds no 3 GB
    child = subprocess.run([sys.executable, "-c", f"""
import lenet
try:
    lenet.weights.load({str(path)!r})
except lenet.WeightsError as exc:
    print(exc)
print(open("/proc/self/status").read().split("VmHWM:")[1].split()[0])"""], capture_output=True, text=True, timeout=120)
    message, peak_kb = child.stdout.splitlines()
    assert message.endswith("missing tensors [], unexpected tensors ['extra']"), child.stderr
    assert int(peak_kb) < 1_000_000, f"peak memory {int(peak_kb) / 1e6:.1f} GB"


def test_nan_is_rejected(saved):
    path, params = saved
    params["conv2.bias"][3] = np.nan
    with pytest.raises(WeightsError, match="conv2.bias contains NaN"):
        weights.save(path, params)
    # a NaN that reaches the file another way (no checksum) is caught on load
    nan = np.float32(np.nan).tobytes()
    rewrite(path, lambda h: h["__metadata__"].pop("sha256"), lambda body: nan + body[4:])
    with pytest.raises(WeightsError, match=r"\.(weight|bias) contains NaN"):
        weights.load(path)


def test_corruption_is_caught_by_the_checksum(saved):
    path, _ = saved
    raw = bytearray(path.read_bytes())
    raw[-100] ^= 0x01
    path.write_bytes(bytes(raw))
    with pytest.raises(WeightsError, match="corrupted"):
        weights.load(path)


@pytest.mark.parametrize("cut", [4, 100, -1000])
def test_truncated_files(saved, cut):
    path, _ = saved
    path.write_bytes(path.read_bytes()[:cut])
    with pytest.raises(WeightsError, match="truncated"):
        weights.load(path)


def test_not_a_safetensors_file(tmp_path):
    path = tmp_path / "notes.safetensors"
    path.write_text("these are not weights, just some words to fill the file\n" * 3)
    with pytest.raises(WeightsError, match="not a safetensors file"):
        weights.load(path)
    with pytest.raises(WeightsError, match="missing.safetensors: no such file$"):
        weights.load(tmp_path / "missing.safetensors")


def test_only_the_shipped_file_says_how_to_regenerate_it(saved, monkeypatch):
    path, _ = saved
    path.write_bytes(path.read_bytes()[:-1000])
    with pytest.raises(WeightsError) as other:
        weights.load(path)
    monkeypatch.setattr(weights, "default_path", lambda: path)         # as if it were the shipped file
    with pytest.raises(WeightsError, match="truncated.*; regenerate it with: python -m lenet.train"):
        weights.load()
    assert "regenerate" not in str(other.value)


@pytest.mark.parametrize("edit, detail", [
    (lambda h: h.update(__metadata__=["format", "lenet-weights"]), "expected a map"),     # metadata a list
    (lambda h: h["fc1.bias"].update(shape=["500"]), 'string "500"'),                    # a dimension a string
    (lambda h: h["fc2.bias"].update(data_offsets=[-40, 0]), "-40"),                     # a negative offset
    (lambda h: h["conv1.bias"].update(data_offsets=[h["conv1.weight"]["data_offsets"][0] + k for k in (0, 80)]),
     "invalid offset"),                                                                # overlapping tensors
])
def test_malformed_headers_are_one_line_errors(saved, edit, detail):
    path, _ = saved
    rewrite(path, edit)
    with pytest.raises(WeightsError) as error:
        weights.load(path)
    message = str(error.value)
    assert "\n" not in message and message.startswith(f"{path}: ") and "malformed" in message, message
    assert detail in message, message


def test_a_failed_save_leaves_the_old_file_intact(saved, monkeypatch):
    path, params = saved
    before = path.read_bytes()

    def disk_full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(OSError, match="No space left"):
        weights.save(path, model.init_params(seed=2))
    assert path.read_bytes() == before
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]   # no temporary left behind


def test_shipped_weights_reach_their_stated_accuracy(dataset):
    params, meta = weights.read()
    assert meta["dataset"] == "mnist-5k" and meta["trainer"].startswith("numpy")
    stated = float(meta["test_accuracy"])
    assert stated >= 0.97
    net = lenet.load("numpy", params=params)
    accuracy = evaluate(net, dataset.test_x, dataset.test_y)
    assert accuracy == pytest.approx(stated, abs=1e-9)
