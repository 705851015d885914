"""cudnn backend (C++ cuDNN + cuBLAS): the CUDA build without a GPU here; agreement, training,
batch-size changes, memory and bad input on a GPU (marked `gpu`, skipped loudly without one) and,
the same tests, on the stand-in build: the checkout's cudnn_net.cu against the stand-in CUDA
runtime, cuDNN and cuBLAS of tests/cudnn_standin, executed on the CPU, its kernel on the CPU emulator of CUDA
semantics (marked `emu`).

The C++ checks are tested on the native `CudnnNet` directly, bypassing Net's Python validation.
"""
import re
from pathlib import Path

import numpy as np
import pytest

import lenet
from lenet import layers
from lenet.backends import cudnn
from lenet.backends import numpy as reference
from lenet.check import spread, step_batch
from agree import assert_logits_agree, assert_step_agrees, require
from lenet.model import LAYERS

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = tuple(cudnn.VARIANTS)


@pytest.fixture(scope="module")
def native():
    try:
        from lenet import _native
    except ImportError as exc:
        pytest.skip(f"lenet._native does not import: {exc}")
    if not _native.WITH_CUDA:
        pytest.skip(f"lenet._native built without CUDA ({_native.CUDA_WHY}): the CUDA build is not checked")
    return _native


@pytest.fixture(scope="module", params=[pytest.param("gpu", marks=pytest.mark.gpu),
                                        pytest.param("emu", marks=pytest.mark.emu)])
def on(request):
    """Where the cudnn tests run: the real libraries on a GPU, or the stand-in build on the CPU."""
    if request.param == "gpu":
        require("cudnn", "gpu")
        from lenet import _native
        return _native
    return request.getfixturevalue("standin_native")


def make(on, params, variant="graph", deterministic=True):
    return cudnn.CudnnNet(params, variant, deterministic, native=on)


# --- everywhere: the module, and the CUDA build on a machine without a GPU --------------------

def test_backend_module():
    assert cudnn.TIER == "native" and cudnn.DEVICES == ("gpu",)
    assert VARIANTS == ("graph", "plain")
    for path in cudnn.SOURCES:
        assert (ROOT / path).is_file(), path
    reason = lenet.backends.unavailable("cudnn", "gpu")
    assert reason is None or (reason and "\n" not in reason), reason


def test_plan_cache_holds_a_training_size_and_its_tail(native):
    assert native.CudnnNet.MAX_PLANS >= 2


def test_cuda_build_without_gpu_says_why(native):
    reason = lenet.backends.cuda_unavailable()
    if reason is None:
        pytest.skip("a CUDA device is present: the no-GPU path is checked on machines without one")
    assert native.CUDNN_VERSION // 10000 == 9 and native.cudnn_version() // 10000 == 9
    assert native.cuda_device_count() == 0
    row = [r for r in lenet.available() if r[:2] == ("cudnn", "gpu")]
    assert row == [("cudnn", "gpu", False, reason)] and "CUDA" in reason, row   # no driver, device, or too old a driver
    with pytest.raises(lenet.UnavailableError) as err:
        lenet.load("cudnn", device="gpu", params=lenet.model.init_params())
    assert str(err.value) == f"cudnn on gpu: {reason}"


def test_cuda_failure_names_call_file_and_line(native):
    """Without a GPU the first CUDA call fails: the RuntimeError carries the call, file and line."""
    if lenet.backends.cuda_unavailable() is None:
        pytest.skip("a CUDA device is present")
    with pytest.raises(RuntimeError) as err:
        native.CudnnNet(lenet.model.init_params())
    message = str(err.value)
    assert re.fullmatch(r"cuda\w+\(.*\) failed: cudaError\w+ \(.+\) at csrc/cudnn_net\.cu:\d+", message), message
    with pytest.raises(RuntimeError, match=r"cudaMemGetInfo\(.*\) failed: .* at csrc/cudnn_net\.cu:\d+"):
        native.cuda_mem_info()


@pytest.mark.parametrize("change, message", [
    (lambda p: p.pop("fc2.bias"), "params: missing tensor 'fc2.bias'"),
    (lambda p: p.update(extra=np.zeros(1, np.float32)), "params: unexpected tensor 'extra'"),
    (lambda p: p.update({"fc1.weight": p["fc1.weight"].T.copy()}), "fc1.weight: expected shape (500, 800)"),
    (lambda p: p.update({"conv1.weight": p["conv1.weight"][..., :4]}), "conv1.weight: expected shape (20, 1, 5, 5)"),
    (lambda p: p.update({"conv2.bias": p["conv2.bias"].astype(np.float64)}), "conv2.bias: expected dtype float32"),
    (lambda p: p.update({"fc1.weight": np.asfortranarray(p["fc1.weight"])}), "fc1.weight: expected a C-contiguous"),
    (lambda p: p["fc2.weight"].__setitem__((3, 4), np.nan), "fc2.weight: contains NaN"),
    (lambda p: p.update({"fc2.bias": [0.0] * 10}), "fc2.bias: expected a numpy.ndarray"),
])
def test_bad_parameters_raise_before_cuda(native, change, message):
    """Parameters are checked before any CUDA call, so these run without a GPU too."""
    params = lenet.model.init_params()
    change(params)
    with pytest.raises(ValueError) as err:
        native.CudnnNet(params)
    assert str(err.value).startswith(message), str(err.value)
    with pytest.raises(ValueError, match="params: expected a dict"):
        native.CudnnNet(list(params.values()))


# --- on a GPU, and on the stand-in build -----------------------------------------------------------------------------------

@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("n", (1, 7, 64))
def test_forward_agrees(on, params, dataset, variant, n):
    x = dataset.test_x[spread(n, len(dataset.test_x))]
    assert_logits_agree(make(on, params, variant).predict(x), params, x)


@pytest.mark.parametrize("variant", VARIANTS)
def test_single_images_one_at_a_time(on, params, dataset, variant):
    """Each replay of the batch-1 graph reads the new image (and the plain path agrees)."""
    net = make(on, params, variant)
    x = dataset.test_x[spread(50, len(dataset.test_x))]
    got = np.concatenate([net.predict(x[i:i + 1]) for i in range(len(x))])
    assert_logits_agree(got, params, x)


@pytest.mark.parametrize("variant", VARIANTS)
def test_timing_split_and_device_times(on, params, dataset, variant):
    net = make(on, params, variant)
    for n in (1, 64):
        x = dataset.test_x[spread(n, len(dataset.test_x))]
        staged = net.upload(x)
        out = net.download(net.forward(staged))
        np.testing.assert_array_equal(out, net.predict(x))
        times = net.device_times_us(x, 5)
        assert set(times) == {"forward", "kernels"}
        bound = 1e6 if on.__name__ == "lenet._native" else np.inf   # the stand-in's "device": this CPU, maybe busy
        assert all(len(t) == 5 and all(0 < v < bound for v in t) for t in times.values()), times
        np.testing.assert_array_equal(net.download(net.forward(net.upload(x))), out)
    net.synchronize()
    assert "batch 1:" in net.describe() and "batch 64:" in net.describe()


@pytest.mark.parametrize("variant", VARIANTS)
def test_layer_times(on, params, dataset, variant):
    """Events after each layer's calls, the layers in forward order (on the stand-in build the
    times are its own CPU time: only their shape is checked, and nothing reports them)."""
    net = make(on, params, variant)
    x = dataset.test_x[:1].copy()
    times = net.layer_times_us(x, 3)
    assert layers.times_problem(times, 3) is None and list(times) == list(LAYERS), times
    assert_logits_agree(net.predict(x), params, x)                      # the forward is unchanged after
    with pytest.raises(ValueError, match="^images: layer_times_us takes one image, got 2$"):
        net.layer_times_us(dataset.test_x[:2].copy(), 3)
    with pytest.raises(ValueError, match="^repeats: expected a positive integer$"):
        net.layer_times_us(x, 0)


def test_parameters_round_trip(on, params):
    got = make(on, params).parameters()
    assert list(got) == list(lenet.model.PARAM_NAMES)
    for name, value in params.items():
        assert got[name].dtype == np.float32 and got[name].shape == value.shape, name
        np.testing.assert_array_equal(got[name], value, err_msg=name)


@pytest.mark.parametrize("deterministic", (True, False))
@pytest.mark.parametrize("n", (7, 64))
def test_sgd_step_agrees(on, params, dataset, deterministic, n):
    x, y = step_batch(params, dataset.test_x, dataset.test_y, n)
    assert_step_agrees(make(on, params, deterministic=deterministic), params, x, y, lr=0.05)


def test_deterministic_training_repeats_bit_for_bit(on, params, dataset):
    """deterministic=True picks deterministic algorithms only: two nets take identical steps. (The
    stand-in's non-deterministic algorithms change their summation order from call to call.)"""
    x, y = step_batch(params, dataset.test_x, dataset.test_y, 64)
    got = []
    for _ in range(2):
        net = make(on, params, deterministic=True)
        net.train_step(x, y, 0.05)
        net.train_step(x, y, 0.05)
        got.append(net.parameters())
    for name in params:
        np.testing.assert_array_equal(got[0][name], got[1][name], err_msg=name)


def test_short_training_run_agrees(on, params, dataset):
    """Eight steps of 64 in a shuffled order (train_epoch) against the float64 reference's steps;
    three on the stand-in (the same loop, a third of the CPU time)."""
    n = 512 if on.__name__.endswith("_native") else 192
    x, y = dataset.train_x[:n], dataset.train_y[:n]
    order = np.random.default_rng(3).permutation(len(x))
    ref = reference.Reference(params, np.float64)
    losses = [ref.train_step(x[order[i:i + 64]], y[order[i:i + 64]], 0.05) for i in range(0, len(x), 64)]
    net = make(on, params)
    loss = net.train_epoch(x, y, 0.05, 64, order)
    assert abs(loss - np.mean(losses)) <= 1e-4 * max(1.0, np.mean(losses)), (loss, np.mean(losses))
    got = net.parameters()
    for name in params:
        update = ref.params[name] - params[name]
        err = np.abs((got[name] - params[name]) - update).max() / np.abs(update).max()
        assert err <= 1e-3, f"{name}: {err:.3g}"


def test_sgd_step_from_init(on, dataset):
    """From the seeded initialisation (large gradients, many ReLU and pool ties on blank background)."""
    params = lenet.model.init_params()
    x, y = step_batch(params, dataset.test_x, dataset.test_y, 16)   # 19 of the 1 000 sit away from ties
    assert_step_agrees(make(on, params), params, x, y, lr=0.05)


@pytest.mark.parametrize("variant", VARIANTS)
def test_batch_size_changes(on, params, dataset, variant):
    """Training at 64 and 7 and inference at 1, 64 and 3 mix cached plans; batch-1 inference after
    batch-64 training sees the new weights."""
    net = make(on, params, variant)
    ref = reference.Reference(params, np.float64)
    one = dataset.test_x[spread(1, len(dataset.test_x))]
    net.predict(one)                                  # plans (and captures) batch 1 before training
    for n in (64, 64, 7, 64):
        i = n + spread(n, len(dataset.train_x) - n)
        x, y = dataset.train_x[i], dataset.train_y[i]
        loss = net.train_step(x, y, 0.05)
        assert abs(loss - ref.train_step(x, y, 0.05)) < 1e-4 * max(1.0, loss)
        for m in (1, 64, 3):
            xm = dataset.test_x[spread(m, len(dataset.test_x))]
            assert_logits_agree(net.predict(xm), net.parameters(), xm)
    assert_logits_agree(net.predict(one), ref.parameters(), one)


@pytest.mark.parametrize("variant", VARIANTS)
def test_plans_are_cached_per_batch_size(on, params, dataset, variant):
    """An epoch's tail batch does not re-plan: sizes 64 and 16 alternate (training and inference)
    on two plans; beyond MAX_PLANS other sizes the least recently used is made again."""
    net = make(on, params, variant)
    raw = net._net
    for n in (64, 16, 64, 16):
        i = spread(n, len(dataset.train_x))
        x, y = dataset.train_x[i], dataset.train_y[i]
        net.train_step(x, y, 0.05)
        assert_logits_agree(net.predict(x), net.parameters(), x)
    assert raw.plans_made == 2
    assert [line.split(":")[0] for line in net.describe().splitlines()] == ["batch 64", "batch 16"]
    net.predict(dataset.test_x[:1].copy())                          # batch 1 has its own plan, kept
    others = range(2, 2 + raw.MAX_PLANS)                            # evicts 64, then 16
    for n in others:
        net.predict(dataset.test_x[spread(n, len(dataset.test_x))])
    assert raw.plans_made == 3 + raw.MAX_PLANS
    assert [line.split(":")[0] for line in net.describe().splitlines()] == ["batch 1"] + [f"batch {n}" for n in others]
    x = dataset.test_x[spread(64, len(dataset.test_x))]
    assert_logits_agree(net.predict(x), net.parameters(), x)        # re-planned, still right
    assert raw.plans_made == 4 + raw.MAX_PLANS


@pytest.mark.device_wide
@pytest.mark.parametrize("variant", VARIANTS)
def test_device_memory_unchanged_after_many_predictions(on, params, dataset, variant):
    """10 000 predictions on a GPU; 100 on the stand-in (whose ledger counts every allocation too)."""
    net = make(on, params, variant)
    x = dataset.test_x[spread(100, len(dataset.test_x))]
    for i in range(10):                               # warm-up: plan, find algorithms, capture
        net.predict(x[i:i + 1])
    before = net.memory_in_use()
    for i in range(10_000 if on.__name__.endswith("_native") else 100):
        net.predict(x[i % 100:i % 100 + 1])
    assert net.memory_in_use() == before
    assert_logits_agree(net.predict(x[:1]), params, x[:1])


def test_bad_input_raises_in_cpp(on, params, dataset):
    """Every array is checked in C++ too; after each error the net still works."""
    raw = make(on, params)._net
    i = spread(8, len(dataset.train_x))
    x, y = dataset.train_x[i], dataset.train_y[i].astype(np.int32)   # the native call takes int32 only
    nan = x.copy()
    nan[2, 0, 5, 5] = np.nan
    bad_images = [
        (x.astype(np.float64), "images: expected dtype float32"),
        (x[:, :, :27, :], "images: expected shape (N, 1, 28, 28)"),
        (x[:0], "images: expected shape (N, 1, 28, 28) with N >= 1"),
        (x.reshape(8, 784), "images: expected shape (N, 1, 28, 28)"),
        (np.asfortranarray(x), "images: expected a C-contiguous array"),
        (x[::2], "images: expected a C-contiguous array"),
        (nan, "images: contains NaN"),
        (x.tolist(), "images: expected a numpy.ndarray"),
    ]
    for bad, message in bad_images:
        for call in (raw.upload, lambda a: raw.train_step(a, y, 0.05), lambda a: raw.device_times_us(a, 2)):
            with pytest.raises(ValueError) as err:
                call(bad)
            assert str(err.value).startswith(message), (message, str(err.value))
    for labels, message in [(y.astype(np.int64), "labels: expected dtype int32"), (y[:5], "labels: expected shape (8,)"),
                            (np.full(8, 10, np.int32), "labels: labels must lie in [0, 10)")]:
        with pytest.raises(ValueError, match=re.escape(message)):
            raw.train_step(x, labels, 0.05)
    for lr in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="lr: expected a positive finite number"):
            raw.train_step(x, y, lr)
    with pytest.raises(ValueError, match="upload a batch of that size first"):
        raw.forward(5)
    raw.upload(x)
    with pytest.raises(ValueError, match="run forward on a batch of that size first"):
        raw.download(8)
    with pytest.raises(ValueError, match="batch size"):
        raw.forward(0)
    with pytest.raises(ValueError, match="repeats"):
        raw.device_times_us(x, 0)
    assert_logits_agree(raw.download(raw.forward(raw.upload(x))), params, x)
    with pytest.raises(lenet.InputError):
        make(on, params).predict(nan)
