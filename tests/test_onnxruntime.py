"""The ONNX export (lenet.onnx_graph, lenet.export) and the onnxruntime backend that runs it: agreement with the
reference, the exported file's contents, atomic writes, one-line errors, the benchmark row."""
import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import lenet
from lenet.check import spread
from agree import assert_logits_agree, require
from test_bench import bench
from test_cli import assert_one_line_error, cli

VARIANTS = tuple(lenet.backends.variants("onnxruntime"))


@pytest.fixture(autouse=True)
def _installed():
    require("onnxruntime")            # skips, with the reason, when onnx or onnxruntime is missing


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """The shipped weights exported through the CLI, and the metadata of the file they came from."""
    path = tmp_path_factory.mktemp("onnx") / "lenet.onnx"
    rc, stdout, stderr = cli("lenet.export", "--onnx", str(path))
    assert rc == 0 and stdout.startswith(f"wrote {path} (opset 17"), stderr
    return path, lenet.weights.read()[1]


# --- the backend against the reference ---------------------------------------------------

def test_variants():
    assert VARIANTS == ("default", "1thread") and lenet.backends.default_variant("onnxruntime", "cpu") == "default"


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("n", (1, 7, 64))
def test_forward_agrees(params, dataset, variant, n):
    net = lenet.load("onnxruntime", params=params, variant=variant)
    assert net.variant == variant and net.backend == "onnxruntime"
    x = dataset.test_x[spread(n, len(dataset.test_x))]
    assert_logits_agree(net.predict(x), params, x)


def test_one_session_takes_any_batch_size(params, dataset):
    net = lenet.load("onnxruntime", params=params)
    for n in (64, 1, 7, 1000):
        x = dataset.test_x[spread(n, len(dataset.test_x))]
        assert_logits_agree(net.predict(x), params, x)


@pytest.mark.parametrize("variant", VARIANTS)
def test_variants_set_the_session_threads(params, variant):
    """0 is ORT's own choice (one per core), kept unless this process is pinned to fewer CPUs than
    the machine has; the session keeps the options it was built with."""
    from lenet.backends.onnxruntime import pinned_cpus
    intra, inter = (pinned_cpus() or 0, 0) if variant == "default" else (1, 1)
    options = lenet.load("onnxruntime", params=params, variant=variant)._session.get_session_options()
    assert (options.intra_op_num_threads, options.inter_op_num_threads) == (intra, inter)


def test_the_default_session_fits_its_threads_to_a_pinned_process():
    """ORT counts the machine's cores whatever the process may use: pinned to one CPU (as `taskset
    -c 0` does), the default session gets one intra-op thread, not one per core sharing it."""
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("this process may use one CPU only: nothing to pin it to fewer")
    code = ("import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); import lenet; "
            "print(lenet.load('onnxruntime')._session.get_session_options().intra_op_num_threads)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.split()[-1:] == ["1"], done.stderr


def test_other_params_give_other_logits(dataset):
    """The session runs the params it was given, not the shipped weights."""
    params = lenet.model.init_params(3)
    x = dataset.test_x[spread(16, len(dataset.test_x))]
    net = lenet.load("onnxruntime", params=params)
    assert_logits_agree(net.predict(x), params, x)
    for name, value in net.parameters().items():
        np.testing.assert_array_equal(value, params[name])
    net.parameters()["fc1.weight"][:] = 0                # copies: the net is unchanged
    np.testing.assert_array_equal(net.parameters()["fc1.weight"], params["fc1.weight"])


def test_does_not_train(params, batch):
    with pytest.raises(lenet.UnavailableError, match="^onnxruntime is an inference engine: it does not train$"):
        lenet.load("onnxruntime", params=params).train_step(*batch)


@pytest.mark.parametrize("x, message", [
    (np.zeros((2, 1, 28, 28)), "float32"),
    (np.zeros((2, 28, 28), np.float32), "shape"),
    (np.zeros((2, 1, 28, 27), np.float32), "shape"),
    (np.zeros((0, 1, 28, 28), np.float32), "empty"),
    (np.zeros((2, 1, 28, 28), np.float32)[..., ::-1], "C-contiguous"),
    (np.full((1, 1, 28, 28), np.nan, np.float32), "NaN"),
])
def test_bad_input_raises_input_error(params, x, message):
    with pytest.raises(lenet.InputError, match=message):
        lenet.load("onnxruntime", params=params).predict(x)


# --- availability --------------------------------------------------------------------------

def test_listed_as_available():
    rows = {(b, d): (ok, reason) for b, d, ok, reason in lenet.available()}
    assert rows[("onnxruntime", "cpu")] == (True, "ok")
    assert lenet.backends.module("onnxruntime").TIER == "peer"
    ok, reason = rows[("onnxruntime", "gpu")]
    assert ok or ("\n" not in reason and reason)


@pytest.mark.parametrize("package", ["onnx", "onnxruntime"])
@pytest.mark.parametrize("device", ["cpu", "gpu"])
def test_missing_package_is_a_one_line_reason(package, device, monkeypatch):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == package else find_spec(name, *a))
    assert lenet.backends.unavailable("onnxruntime", device) == f"{package} not installed (pip install '.[onnx]')"


def test_export_without_onnx_is_a_one_line_error(tmp_path, monkeypatch, capsys):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "onnx" else find_spec(name, *a))
    from lenet import export
    assert export.run(["--onnx", str(tmp_path / "m.onnx")]) == 2
    assert capsys.readouterr().err == "error: onnx not installed (pip install '.[onnx]')\n"
    assert not (tmp_path / "m.onnx").exists()


def test_gpu_needs_the_cuda_execution_provider(monkeypatch):
    """With a CUDA device assumed, a CPU-only onnxruntime says what to install (checked where ORT has no CUDA EP)."""
    import onnxruntime
    if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
        pytest.skip("this onnxruntime has the CUDA execution provider")
    mod = lenet.backends.module("onnxruntime")
    monkeypatch.setattr(mod, "cuda_unavailable", lambda: None)
    assert mod.unavailable("gpu") == (f"onnxruntime {onnxruntime.__version__} has no CUDAExecutionProvider "
                                      "(pip install onnxruntime-gpu)")


# --- the exported file -----------------------------------------------------------------------

def test_exported_file_agrees_at_any_batch_size(exported, params, dataset):
    """The file as a user would run it: its own InferenceSession, default options."""
    import onnxruntime
    session = onnxruntime.InferenceSession(str(exported[0]), providers=["CPUExecutionProvider"])
    (inp,), (out,) = session.get_inputs(), session.get_outputs()
    assert (inp.name, inp.shape, inp.type) == ("images", ["N", 1, 28, 28], "tensor(float)")
    assert (out.name, out.shape, out.type) == ("logits", ["N", 10], "tensor(float)")
    for n in (1, 7, 64):
        x = dataset.test_x[spread(n, len(dataset.test_x))]
        assert_logits_agree(session.run(None, {"images": x})[0], params, x)


def test_round_trip_of_the_initializers(exported, params):
    import onnx
    from onnx import numpy_helper
    model = onnx.load(exported[0])
    onnx.checker.check_model(model, full_check=True)
    inits = model.graph.initializer
    assert [t.name for t in inits] == list(lenet.model.PARAM_NAMES)
    for t in inits:
        value = numpy_helper.to_array(t)
        assert value.dtype == np.float32 and value.shape == lenet.model.PARAM_SHAPES[t.name], t.name
        np.testing.assert_array_equal(value, params[t.name])
    assert [n.op_type for n in model.graph.node] == ["Conv", "MaxPool", "Conv", "MaxPool", "Flatten", "Gemm",
                                                     "Relu", "Gemm"]
    assert [(o.domain, o.version) for o in model.opset_import] == [("", 17)] and model.ir_version == 8


def test_provenance_in_the_metadata(exported):
    import onnx
    path, meta = exported
    model = onnx.load(path)
    props = {p.key: p.value for p in model.metadata_props}
    assert (model.producer_name, model.producer_version) == ("lenet", lenet.__version__)
    assert props == {**{f"weights.{k}": v for k, v in meta.items()}, "weights.file": "lenet-mnist.safetensors"}
    assert len(props["weights.sha256"]) == 64 and props["weights.trainer"] == meta["trainer"]


def test_export_of_other_weights(tmp_path, dataset):
    params = lenet.model.init_params(5)
    lenet.weights.save(tmp_path / "w.safetensors", params, {"trainer": "test"})
    rc, _, stderr = cli("lenet.export", "--onnx", str(tmp_path / "w.onnx"), "--weights", str(tmp_path / "w.safetensors"))
    assert rc == 0, stderr
    import onnxruntime
    x = dataset.test_x[spread(7, len(dataset.test_x))]
    session = onnxruntime.InferenceSession(str(tmp_path / "w.onnx"), providers=["CPUExecutionProvider"])
    assert_logits_agree(session.run(["logits"], {"images": x})[0], params, x)


# --- atomic write and errors -------------------------------------------------------------------

def test_failed_export_keeps_the_existing_file(tmp_path, params, monkeypatch):
    """Params that bypass lenet's own check reach onnx's checker, which rejects the graph before
    anything is written: the old file is intact and no temporary file is left behind."""
    from lenet import onnx_graph
    path = tmp_path / "lenet.onnx"
    onnx_graph.save(path, params)
    before = path.read_bytes()
    monkeypatch.setattr(lenet.weights, "check_params", lambda p: p)
    bad = {**params, "fc1.weight": np.zeros((500, 700), np.float32)}
    with pytest.raises(Exception, match="ShapeInferenceError"):
        onnx_graph.save(path, bad)
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["lenet.onnx"]


def test_export_replaces_an_existing_file(tmp_path, params):
    from lenet import onnx_graph
    path = tmp_path / "lenet.onnx"
    path.write_bytes(b"old")
    onnx_graph.save(path, lenet.model.init_params())
    onnx_graph.save(path, params)
    import onnx
    from onnx import numpy_helper
    got = {t.name: numpy_helper.to_array(t) for t in onnx.load(path).graph.initializer}
    np.testing.assert_array_equal(got["fc2.bias"], params["fc2.bias"])


def test_bad_paths_are_one_line_errors(tmp_path):
    (tmp_path / "afile").write_text("")
    assert_one_line_error(*cli("lenet.export", "--onnx", str(tmp_path))[::2], f"cannot write {tmp_path}: it is a directory")
    assert_one_line_error(*cli("lenet.export", "--onnx", str(tmp_path / "afile" / "m.onnx"))[::2], "cannot write")
    assert_one_line_error(*cli("lenet.export")[::2], "--onnx")
    assert [p.name for p in tmp_path.iterdir()] == ["afile"]


@pytest.mark.skipif(sys.platform != "linux", reason="/sys: a directory no one may create files in, root included")
def test_unwritable_directory_is_a_one_line_error():
    assert_one_line_error(*cli("lenet.export", "--onnx", "/sys/lenet.onnx")[::2],
                          "cannot write /sys/lenet.onnx: permission denied")


def test_bad_weights_are_one_line_errors(tmp_path):
    out = tmp_path / "m.onnx"
    assert_one_line_error(*cli("lenet.export", "--onnx", str(out), "--weights", str(tmp_path / "none"))[::2],
                          "none: no such file")
    corrupt = tmp_path / "corrupt.safetensors"
    raw = bytearray(lenet.weights.default_path().read_bytes())
    raw[-1] ^= 0xFF
    corrupt.write_bytes(bytes(raw))
    assert_one_line_error(*cli("lenet.export", "--onnx", str(out), "--weights", str(corrupt))[::2], "corrupted")
    assert not out.exists()


# --- the benchmark -----------------------------------------------------------------------------

def test_benchmark_rows_without_training(tmp_path):
    rc, _, stderr = bench("--backend", "onnxruntime", "--device", "cpu", "--variant", "all", "--quick",
                          "--out", str(tmp_path))
    assert rc == 0, stderr
    doc = json.loads((tmp_path / "results.json").read_text())
    rows = {r["variant"]: r for r in doc["results"]}
    assert set(rows) == set(VARIANTS)
    for r in rows.values():
        assert r["status"] == "ok" and r["tier"] == "peer" and r["train"] is None and r["latency"]["host_us"]["p50"] > 0
        assert r["train_reason"] == "onnxruntime is an inference engine: it does not train"
        assert r["check"]["max_rel_err"] <= 1e-4
    table = (tmp_path / "results.md").read_text()
    assert "| onnxruntime | cpu | default |" in table and "| onnxruntime | cpu | 1thread |" in table
    assert "Training: no row trained in this run." in table and "lr –" not in table
    assert "- onnxruntime/cpu [default]: onnxruntime is an inference engine: it does not train" in table
