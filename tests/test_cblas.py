"""cblas backend (C++ im2col + OpenBLAS): agreement with the reference, and bad input never crashes.

The C++ checks are tested on `lenet._native.CpuNet` directly, bypassing Net's Python validation.
"""
import gc
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lenet
from lenet import layers
from lenet.backends import numpy as reference
from lenet.check import spread, step_batch
from agree import assert_logits_agree, assert_step_agrees, require
from lenet.inputs import check_images

SIZES = (1, 7, 64, 150)   # 150: more than one 64-image chunk, and a partial one


@pytest.fixture(autouse=True)
def _cblas_built():
    require("cblas")


@pytest.fixture(scope="module")
def early(dataset):
    """5 reference SGD steps from the seeded init: large updates, and non-zero biases. (At the
    init itself, near-tied pool windows flip their argmax under float32 rounding; the float32
    reference then misses the float64 step by 2e-3 too.)"""
    net = reference.Reference(lenet.model.init_params(), np.float64)
    for i in np.random.default_rng(1).permutation(len(dataset.train_x))[:64 * 5].reshape(5, 64):
        net.train_step(dataset.train_x[i], dataset.train_y[i])
    return net.parameters()


@pytest.fixture(scope="module")
def native():
    require("cblas")
    from lenet import _native
    return _native


# --- agreement with the reference --------------------------------------------------------

@pytest.mark.parametrize("n", SIZES)
def test_forward_agrees(params, dataset, n):
    x = dataset.test_x[spread(n, len(dataset.test_x))]
    assert_logits_agree(lenet.load("cblas", params=params).predict(x), params, x)


def test_forward_agrees_on_all_test_digits(params, dataset):
    x = dataset.test_x
    logits = lenet.load("cblas", params=params).predict(x)
    assert_logits_agree(logits, params, x)
    assert (logits.argmax(1) == dataset.test_y).mean() > 0.8


def test_forward_exact_on_integers(dataset):
    """Integer weights and binary images: every sum is an integer below 2**24, exact in float32."""
    rng = np.random.default_rng(1)
    params = {k: (rng.integers(-1, 2, s) * (rng.random(s) < 0.3)).astype(np.float32)
              for k, s in lenet.model.PARAM_SHAPES.items()}
    x = (dataset.test_x[:16] > 0.5).astype(np.float32)
    bound = reference.Reference({k: np.abs(v) for k, v in params.items()}, np.float64).forward(x)
    assert bound.max() < 2 ** 24                      # no partial sum can round
    got = lenet.load("cblas", params=params).predict(x)
    np.testing.assert_array_equal(got, reference.Reference(params, np.float64).forward(x))


@pytest.mark.parametrize("n", SIZES)
def test_sgd_step_agrees(early, dataset, n):
    net = lenet.load("cblas", params=early)
    assert_step_agrees(net, early, *step_batch(early, dataset.test_x, dataset.test_y, n), lr=0.05)


@pytest.mark.parametrize("variant", lenet.backends.variants("cblas"))
def test_variants_agree(early, dataset, variant):
    """Both threading variants, at a batch size where they differ."""
    x, y = step_batch(early, dataset.test_x, dataset.test_y, 64)
    net = lenet.load("cblas", params=early, variant=variant)
    assert net.variant == variant
    assert_logits_agree(net.predict(x), early, x)
    assert_step_agrees(net, early, x, y)


@pytest.mark.parametrize("n", (5, 7, 64, 150))
def test_worker_threads_agree_with_one_thread(native, early, dataset, n):
    """3 workers (whatever the machine's core count) vs the calling thread alone."""
    i = spread(n, len(dataset.train_x))
    x, y = dataset.train_x[i], dataset.train_y[i]
    one, three = native.CpuNet(early, threads=1), native.CpuNet(early, threads=3)
    want = one.predict(x)                     # the dense GEMMs see other row counts: not bitwise
    np.testing.assert_allclose(three.predict(x), want, rtol=0, atol=1e-5 * np.abs(want).max())
    assert three.train_step(x, y.astype(np.int32), 0.05) == pytest.approx(one.train_step(x, y.astype(np.int32), 0.05), rel=1e-6)
    for name, value in one.parameters().items():
        np.testing.assert_allclose(three.parameters()[name], value, rtol=1e-5, atol=1e-7)


def test_batch_size_changes(early, dataset):
    """Batch 64 training, then batch 1 and 7 inference and training, all on resized buffers."""
    net = lenet.load("cblas", params=early)
    i = spread(64, len(dataset.train_x))
    for _ in range(3):
        net.train_step(dataset.train_x[i], dataset.train_y[i])
    for n in (1, 7, 1, 64):
        p = net.parameters()
        x = dataset.test_x[spread(n, len(dataset.test_x))]
        assert_logits_agree(net.predict(x), p, x)
        assert_step_agrees(lenet.load("cblas", params=p), p, *step_batch(p, dataset.test_x, dataset.test_y, n))


def test_training_lowers_the_loss(dataset):
    net = lenet.load("cblas", params=lenet.model.init_params())
    i = spread(64, len(dataset.train_x))
    x, y = dataset.train_x[i], dataset.train_y[i]
    losses = [net.train_step(x, y) for _ in range(15)]
    assert losses[-1] < 0.5 * losses[0], losses


def test_parameters_round_trip(params):
    net = lenet.load("cblas", params=params)
    got = net.parameters()
    assert list(got) == list(lenet.model.PARAM_NAMES)
    for name, value in params.items():
        assert got[name].dtype == np.float32 and got[name].flags.c_contiguous
        np.testing.assert_array_equal(got[name], value)
    got["fc1.weight"][:] = 0                          # a copy: the net is unchanged
    np.testing.assert_array_equal(net.parameters()["fc1.weight"], params["fc1.weight"])


@pytest.mark.parametrize("n", (1, 3, 64))
def test_concurrent_calls_are_serialised(native, params, dataset, n):
    """The GIL is released during compute; calls on one net from many threads stay correct, on the
    single-image path and the batch path."""
    net, x = native.CpuNet(params), dataset.test_x[:n]
    want, results = net.predict(x), []

    def work():
        results.extend(net.predict(x) for _ in range(20))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 80 and all(np.array_equal(r, want) for r in results)


# --- bad input: a one-line error, never a crash ------------------------------------------

def _images(n=2):
    return np.zeros((n, 1, 28, 28), np.float32)


BAD_IMAGES = {
    "float64": (np.zeros((2, 1, 28, 28)), "expected dtype float32"),
    "int": (np.zeros((2, 1, 28, 28), np.int32), "expected dtype float32"),
    "3-d": (np.zeros((2, 28, 28), np.float32), r"expected shape \(N, 1, 28, 28\)"),
    "27 wide": (np.zeros((2, 1, 28, 27), np.float32), r"expected shape \(N, 1, 28, 28\)"),
    "2 channels": (np.zeros((2, 2, 28, 28), np.float32), r"expected shape \(N, 1, 28, 28\)"),
    "empty": (np.zeros((0, 1, 28, 28), np.float32), "N >= 1"),
    "reversed": (_images()[..., ::-1], "C-contiguous"),
    "fortran": (np.asfortranarray(_images()), "C-contiguous"),
    "NaN": (np.full((2, 1, 28, 28), np.nan, np.float32), "NaN or infinity"),
    "inf": (np.where(np.eye(28, dtype=bool), np.inf, 0).astype(np.float32).reshape(1, 1, 28, 28), "NaN or infinity"),
    "list": ([[0.0] * 28] * 28, "numpy.ndarray"),
}


@pytest.mark.parametrize("case", BAD_IMAGES)
def test_bad_images_raise_in_cpp(native, params, case):
    x, message = BAD_IMAGES[case]
    net = native.CpuNet(params)
    with pytest.raises(ValueError, match="images: .*" + message):
        net.predict(x)
    with pytest.raises(ValueError, match="images: .*" + message):
        net.train_step(x, np.zeros(2, np.int32), 0.1)


@pytest.mark.parametrize("case", BAD_IMAGES)
def test_bad_images_raise_input_error(params, case):
    """predict leaves its checks to C++, and says what every backend says when C++ refuses."""
    x = BAD_IMAGES[case][0]
    with pytest.raises(lenet.InputError) as same:
        check_images(x)
    for variant in ("threads", "1thread"):
        with pytest.raises(lenet.InputError) as err:
            lenet.load("cblas", params=params, variant=variant).predict(x)
        assert str(err.value) == str(same.value)


def test_predictor_keeps_its_net_and_raises_through_bad_images(native, params):
    """The function CblasNet.predict is: the net's predict, alive without the net, and bad images
    handed to bad_images; where that does not raise, the binding's own ValueError stands."""
    x = np.zeros((1, 1, 28, 28), np.float32)
    net = native.CpuNet(params)
    want = net.predict(x)
    seen = []
    predict = native.predictor(net, lambda images, message: seen.append((images, message)))
    del net
    gc.collect()
    np.testing.assert_array_equal(predict(x), want)
    bad = x.astype(np.float64)
    with pytest.raises(ValueError, match="^images: expected dtype float32, got float64$"):
        predict(bad)
    assert len(seen) == 1 and seen[0][0] is bad and seen[0][1] == "images: expected dtype float32, got float64"

    def refuse(images, message):
        raise KeyError(message)
    with pytest.raises(KeyError, match="expected shape"):
        native.predictor(native.CpuNet(params), refuse)(x[..., :27])


@pytest.mark.parametrize("where", [0, 783, 3 * 784 - 1, 1000])
@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf, -np.nan])
def test_one_non_finite_value_anywhere_is_refused(native, params, where, value):
    x = np.zeros((3, 1, 28, 28), np.float32)
    x.flat[where] = value
    with pytest.raises(ValueError, match="images: contains NaN or infinity"):
        native.CpuNet(params).predict(x)


@pytest.mark.parametrize("threads, split", [(1, "auto"), (2, "channels"), (2, "rows")])
def test_one_image_is_refused_after_its_forward_and_the_net_goes_on(native, params, dataset, threads, split):
    """One image is checked once its helper has the job (csrc/NOTES.md v30): anywhere in it, NaN or
    infinity still raises, and the next images get the logits they got before."""
    x = np.ascontiguousarray(dataset.test_x[:2])
    if split == "rows":
        _cpu_net(native, params, "avx512")
    net = native.CpuNet(params, threads=threads, split=split)
    want = [net.predict(x[i:i + 1]) for i in range(2)]
    for where in (0, 391, 783):
        for value in (np.nan, -np.inf):
            bad = x[:1].copy()
            bad.flat[where] = value
            with pytest.raises(ValueError, match="^images: contains NaN or infinity$"):
                net.predict(bad)
            for i in range(2):
                np.testing.assert_array_equal(net.predict(x[i:i + 1]), want[i])


def test_the_largest_and_smallest_floats_are_accepted(native, params):
    info = np.finfo(np.float32)
    x = np.zeros((1, 1, 28, 28), np.float32)
    x.flat[:4] = [info.max, -info.max, info.smallest_subnormal, -0.0]
    assert native.CpuNet(params).predict(x).shape == (1, 10)      # finite: no ValueError


@pytest.mark.parametrize("labels, lr, message", [
    (np.zeros(2, np.int64), 0.1, "labels: expected dtype int32"),
    (np.zeros(3, np.int32), 0.1, r"labels: expected shape \(2,\)"),
    (np.zeros((2, 1), np.int32), 0.1, r"labels: expected shape \(2,\)"),
    (np.array([0, 10], np.int32), 0.1, r"labels: labels must lie in \[0, 10\)"),
    (np.array([-1, 0], np.int32), 0.1, r"labels: labels must lie in \[0, 10\)"),
    (np.zeros(4, np.int32)[::2], 0.1, "labels: expected a C-contiguous array"),
    (np.zeros(2, np.int32), 0.0, "lr: expected a positive finite number"),
    (np.zeros(2, np.int32), -1.0, "lr: expected a positive finite number"),
    (np.zeros(2, np.int32), float("nan"), "lr: expected a positive finite number"),
    (np.zeros(2, np.int32), float("inf"), "lr: expected a positive finite number"),
])
def test_bad_training_arguments_raise_and_change_nothing(native, params, labels, lr, message):
    net = native.CpuNet(params)
    with pytest.raises(ValueError, match=message):
        net.train_step(_images(), labels, lr)
    for name, value in net.parameters().items():
        np.testing.assert_array_equal(value, params[name])


def _without(params, name):
    return {k: v for k, v in params.items() if k != name}


BAD_PARAMS = {
    "missing": (lambda p: _without(p, "fc2.bias"), "params: missing tensor 'fc2.bias'"),
    "unexpected": (lambda p: {**p, "fc3.weight": p["fc2.weight"]}, "params: unexpected tensor 'fc3.weight'"),
    "shape": (lambda p: {**p, "conv2.weight": p["conv2.weight"][:, :10].copy()},
              r"conv2.weight: expected shape \(50, 20, 5, 5\)"),
    "transposed": (lambda p: {**p, "fc1.weight": np.ascontiguousarray(p["fc1.weight"].T)},
                   r"fc1.weight: expected shape \(500, 800\)"),
    "float64": (lambda p: {**p, "fc1.bias": p["fc1.bias"].astype(np.float64)}, "fc1.bias: expected dtype float32"),
    "non-contiguous": (lambda p: {**p, "fc2.weight": np.asfortranarray(p["fc2.weight"])},
                       "fc2.weight: expected a C-contiguous array"),
    "NaN": (lambda p: {**p, "conv1.bias": np.full(20, np.nan, np.float32)}, "conv1.bias: contains NaN"),
    "not an array": (lambda p: {**p, "conv1.bias": [0.0] * 20}, "conv1.bias: expected a numpy.ndarray"),
    "not a dict": (lambda p: list(p.values()), "params: expected a dict"),
}


@pytest.mark.parametrize("threads", (-1, 257))
def test_bad_thread_count_raises(native, params, threads):
    with pytest.raises(ValueError, match="threads: expected 0"):
        native.CpuNet(params, threads=threads)


@pytest.mark.parametrize("case", BAD_PARAMS)
def test_bad_params_raise_in_cpp(native, params, case):
    make, message = BAD_PARAMS[case]
    with pytest.raises(ValueError, match=message):
        native.CpuNet(make(params))


DTYPES = [np.float32, np.float64, np.float16, np.int32, np.uint8, np.bool_, np.complex64]


@settings(max_examples=150, deadline=None)
@given(shape=st.lists(st.sampled_from([0, 1, 2, 27, 28, 29]), min_size=0, max_size=5),
       dtype=st.sampled_from(DTYPES), fortran=st.booleans())
def test_fuzz_shapes_and_dtypes(native, params, shape, dtype, fortran):
    """Any array either is a valid image batch and gives (N, 10) logits, or raises ValueError."""
    x = np.zeros(shape, dtype)
    x = np.asfortranarray(x) if fortran else x
    valid = (dtype is np.float32 and x.ndim == 4 and x.shape[1:] == (1, 28, 28) and x.shape[0] > 0
             and x.flags.c_contiguous)
    net = native.CpuNet(params)
    if valid:
        assert net.predict(x).shape == (x.shape[0], 10)
    else:
        with pytest.raises(ValueError, match="^images: "):
            net.predict(x)


# --- the forward kernels per instruction set, and the single-image helper thread -------------

ISAS = ("avx512", "avx2", "generic")


def _cpu_net(native, params, isa, threads=2):
    """A CpuNet with the `isa` kernels, skipped (with the module's reason) where this CPU lacks them."""
    try:
        return native.CpuNet(params, threads=threads, isa=isa)
    except ValueError as e:
        pytest.skip(str(e))


class _Stepper:
    """A native CpuNet behind the train_step(x, y, lr) / parameters() that assert_step_agrees uses."""

    def __init__(self, net):
        self.net = net

    def train_step(self, x, y, lr):
        return self.net.train_step(x, y.astype(np.int32), lr)

    def parameters(self):
        return self.net.parameters()


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("threads", (1, 2))
@pytest.mark.parametrize("n", (1, 7, 64))
def test_isa_forward_agrees(native, params, dataset, isa, threads, n):
    """Each instruction set's kernels, on the single-image path (n = 1) and the batch path."""
    x = dataset.test_x[spread(n, len(dataset.test_x))]
    net = _cpu_net(native, params, isa, threads)
    assert net.isa == isa
    assert_logits_agree(net.predict(x), params, x)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("threads", (1, 2))
def test_isa_forward_exact_on_integers(native, dataset, isa, threads):
    """As test_forward_exact_on_integers, through one image at a time and a 16-image batch."""
    rng = np.random.default_rng(2)
    params = {k: (rng.integers(-1, 2, s) * (rng.random(s) < 0.3)).astype(np.float32)
              for k, s in lenet.model.PARAM_SHAPES.items()}
    x = (dataset.test_x[:16] > 0.5).astype(np.float32)
    want = reference.Reference(params, np.float64).forward(x)
    net = _cpu_net(native, params, isa, threads)
    np.testing.assert_array_equal(net.predict(x), want)
    np.testing.assert_array_equal(np.concatenate([net.predict(x[i:i + 1]) for i in range(4)]), want[:4])


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("n", (1, 7, 64))
def test_isa_sgd_step_agrees(native, early, dataset, isa, n):
    net = _Stepper(_cpu_net(native, early, isa))
    assert_step_agrees(net, early, *step_batch(early, dataset.test_x, dataset.test_y, n), lr=0.05)


@pytest.mark.parametrize("isa", ISAS)
def test_isa_sgd_step_agrees_where_pool2_gradients_are_zero(native, early, dataset, isa):
    """fc1 columns of zeros make those pool2 gradients exactly zero: conv2's backward then sums
    15 maxima for channels 0 and 49 (an odd count), none for channel 10."""
    params = dict(early)
    w = params["fc1.weight"].copy()
    w[:, [0, 799] + list(range(160, 176))] = 0
    params["fc1.weight"] = w
    net = _Stepper(_cpu_net(native, params, isa))
    assert_step_agrees(net, params, *step_batch(params, dataset.test_x, dataset.test_y, 7), lr=0.05)


def test_auto_isa_is_the_best_available(native, params):
    available = []
    for isa in ISAS:
        try:
            native.CpuNet(params, threads=1, isa=isa)
            available.append(isa)
        except ValueError:
            pass
    assert "generic" in available and native.CpuNet(params).isa == available[0]


def test_bad_isa_raises(native, params):
    with pytest.raises(ValueError, match="isa: expected auto, avx512, avx2 or generic, got 'sse9'"):
        native.CpuNet(params, isa="sse9")


# --- one image split by rows (csrc/NOTES.md v26) ---------------------------------------------------

def test_split_by_rows_gives_the_bits_of_the_split_by_channels(native, params, dataset):
    """The AVX-512 kernels split by rows sum and pool in the order of those split by channels:
    equal logits for every image, one at a time and through layer_times."""
    x = dataset.test_x[:300]
    _cpu_net(native, params, "avx512")
    nets = {split: native.CpuNet(params, threads=2, isa="avx512", split=split) for split in ("channels", "rows")}
    got = {split: np.concatenate([net.predict(x[i:i + 1]) for i in range(len(x))]) for split, net in nets.items()}
    np.testing.assert_array_equal(got["rows"], got["channels"])
    assert_logits_agree(got["rows"], params, x)
    _, _, by_rows = nets["rows"].layer_times(x[:1], 30)
    assert by_rows == [True] * 30
    _, _, by_rows = nets["channels"].layer_times(x[:1], 30)
    assert by_rows == [False] * 30


def test_split_by_rows_after_training_gives_the_bits_of_the_split_by_channels(native, params, dataset):
    """With AVX-512 one image's fc1 reads a copy of its weights arranged by halves of its inputs,
    both splits: each step changes the weights, and the next forward reads the changed ones (the
    reference on the net's own parameters, so that a stale copy in both splits fails too)."""
    x = dataset.test_x[:40]
    xb, yb = dataset.train_x[:64], dataset.train_y[:64].astype(np.int32)
    _cpu_net(native, params, "avx512")
    nets = {split: native.CpuNet(params, threads=2, isa="avx512", split=split) for split in ("channels", "rows")}
    seen = []
    for step in range(3):
        got = {split: np.concatenate([net.predict(x[i:i + 1]) for i in range(len(x))]) for split, net in nets.items()}
        np.testing.assert_array_equal(got["rows"], got["channels"], err_msg=f"after {step} steps")
        assert_logits_agree(got["rows"], nets["rows"].parameters(), x)
        seen.append(got["rows"])
        for net in nets.values():
            net.train_step(xb, yb, 0.1)
    assert not np.array_equal(seen[0], seen[-1]), "the steps changed nothing"


def test_split_by_rows_after_the_helper_fell_asleep(native, params, dataset):
    """The caller's fallback (it runs both conv1 halves, the later groups go out as jobs) split by rows."""
    x = dataset.test_x[:24]
    _cpu_net(native, params, "avx512")
    net = native.CpuNet(params, threads=2, split="rows")
    channels = native.CpuNet(params, threads=2, split="channels")
    want = np.concatenate([channels.predict(x[i:i + 1]) for i in range(len(x))])
    alone = 0
    for i in range(len(x)):
        time.sleep(0.002)                     # past the helper's spin: it sleeps
        _, handoffs, by_rows = net.layer_times(x[i:i + 1], 1)
        alone += not handoffs
        assert by_rows == [True]
        time.sleep(0.002)
        np.testing.assert_array_equal(net.predict(x[i:i + 1]), want[i:i + 1])
    assert alone, "the helper always took the second half at once after a pause: the fallback was not run"


@pytest.mark.parametrize("isa", ISAS)
def test_auto_split_takes_the_form_whose_recent_times_are_lower(native, params, dataset, isa):
    """split="auto" (csrc/cblas_impl.h, SplitChoice), replayed here from each forward's own form,
    time and hand-off: a net starts by channels; from its 128th image on, every 4096 images the
    other form runs 24 images in a row; every 8th image of the form in use is timed, and a trial's
    from its 5th on, but none within 4 images after a switch, nor any the caller ran alone; at a
    trial's end the other form wins if the median of its last 16 times is lower, and after two
    wins in a row it is the form in use. Only the AVX-512 kernels split by rows at all."""
    net = _cpu_net(native, params, isa)
    auto = native.CpuNet(params, threads=2, isa=isa)
    x = dataset.test_x[:1]
    rows, wins, kept, decisions, forms, k = False, 0, {False: [], True: []}, 0, [], 0
    for n in range(128 + 8 * 4096 + 30):                 # up to nine trials, until 30 images after a third decision
        if (decisions == 3 and k == 23 + 30) or (isa != "avx512" and n == 600):
            break
        times, handoffs, by_rows = auto.layer_times(x, 1)
        forms += by_rows
        if isa != "avx512":                              # never by rows, trials or not
            continue
        k = (n - 128) % 4096 if n >= 128 else 4096       # its place in a trial, if < 24
        form = rows != (k < 24)
        assert by_rows == [form], f"image {n}"
        if handoffs and (4 <= k < 24 or (k >= 28 and n % 8 == 0)):
            kept[form].append(round(sum(t[0] for t in times.values()) * 1000))   # ns, as the net has it
        if k == 23 and kept[True] and kept[False]:      # a trial's end
            median = {f: sorted(t[-16:])[len(t[-16:]) // 2] for f, t in kept.items()}
            wins = wins + 1 if median[not rows] < median[rows] else 0
            rows, wins = (not rows, 0) if wins == 2 else (rows, wins)
            decisions += 1
    np.testing.assert_array_equal(auto.predict(x), net.predict(x))
    if isa != "avx512":
        assert not any(forms)
        return
    if not decisions:   # a new helper thread may share the caller's core for a while: the caller then runs alone
        pytest.skip("no trial had times of both forms: the helper thread never took the second half in time")


@pytest.mark.parametrize("kwargs, message", [
    (dict(split="columns"), "split: expected auto, channels or rows, got 'columns'"),
    (dict(split="rows", isa="avx2"), "split: rows needs the avx512 kernels, not avx2"),
    (dict(split="rows", isa="generic"), "split: rows needs the avx512 kernels, not generic"),
])
def test_bad_split_raises(native, params, kwargs, message):
    if kwargs.get("isa") == "avx2":
        _cpu_net(native, params, "avx2")
    with pytest.raises(ValueError, match=message):
        native.CpuNet(params, **kwargs)


# --- where one image is cut between its two threads (csrc/NOTES.md v46) ------------------------------

CONV1_BLOCK = {"avx512": 5, "avx2": 2, "generic": 10}   # conv1's channel blocks (csrc/cblas_kernels.cpp)


def _cuts(native, params, isa):
    """Cuts the `isa` kernels allow, at both ends and between: conv1's, conv2's, fc1's."""
    _cpu_net(native, params, isa)
    block = CONV1_BLOCK[isa]
    return [(block, 5, 50), (20 - block, 45, 450), (block, 45, 250), (20 - block, 5, 50 * 7)]


@pytest.mark.parametrize("isa", ISAS)
def test_any_cut_gives_the_bits_of_one_thread(native, params, dataset, isa):
    """fc2 sums its inputs in fixed segments and the calling thread adds them in order, so the logits
    have the same bits wherever the cuts lie, split by channels or (fc1's cut) by rows, and on one
    thread; balance=False keeps a cut where it was set."""
    x = dataset.test_x[:60]
    one = _cpu_net(native, params, isa, threads=1)
    want = np.concatenate([one.predict(x[i:i + 1]) for i in range(len(x))])
    assert_logits_agree(want, params, x)
    splits = ("channels", "rows") if isa == "avx512" else ("channels",)
    for split in splits:
        for cuts in _cuts(native, params, isa):
            net = native.CpuNet(params, threads=2, isa=isa, split=split, balance=False)
            net.cuts = cuts
            got = np.concatenate([net.predict(x[i:i + 1]) for i in range(len(x))])
            np.testing.assert_array_equal(got, want, err_msg=f"{split}, cuts {cuts}")
            assert net.cuts == list(cuts)
            _, _, by_rows = net.layer_times(x[:1], 5)
            assert by_rows == [split == "rows"] * 5 and net.cuts == list(cuts)


@pytest.mark.parametrize("cuts, message", [
    ((0, 25, 250), "cuts: conv1 channels expected a multiple of 5 from 5 to 15 (avx512), got 0"),
    ((20, 25, 250), "cuts: conv1 channels expected a multiple of 5 from 5 to 15 (avx512), got 20"),
    ((7, 25, 250), "cuts: conv1 channels expected a multiple of 5 from 5 to 15 (avx512), got 7"),
    ((10, 50, 250), "cuts: conv2 channels expected a multiple of 5 from 5 to 45 (avx512), got 50"),
    ((10, 25, 260), "cuts: fc1 rows expected a multiple of 50 from 50 to 450 (avx512), got 260"),
    ((10, 25, 500), "cuts: fc1 rows expected a multiple of 50 from 50 to 450 (avx512), got 500"),
])
def test_bad_cuts_raise_and_change_nothing(native, params, cuts, message):
    net = _cpu_net(native, params, "avx512")
    with pytest.raises(ValueError, match=re.escape(message)):
        net.cuts = cuts
    assert net.cuts == [10, 25, 250]
    with pytest.raises(TypeError):
        net.cuts = (10, 25)


BALANCE_PROGRAM = r"""
#include <cstdio>
#include "cblas_impl.h"
int main() {   // stdin: lines "group ticks0 ticks1"; stdout: the three cuts (in blocks) after each
    lenet::cblas::Balance b;
    b.set_blocks({5, 5, 50}, {20, 50, 500});
    int g;
    unsigned long long t0, t1;
    while (std::scanf("%d %llu %llu", &g, &t0, &t1) == 3) {
        b.after(g, t0, t1);
        std::printf("%d %d %d\n", b.cut[0], b.cut[1], b.cut[2]);
    }
}
"""


def _balance_replayed(samples, blocks=(4, 10, 10), keep=8, gain=0.03):
    """Balance::after (csrc/cblas_impl.h) again, from its comment: after `keep` samples of a group,
    the median (the upper of the middle two) of unit 0's speed over unit 1's; the cut moves one
    block if the slower unit's part would then end more than `gain` sooner, never leaving a unit none."""
    cut, ratios, out = [n // 2 for n in blocks], [[] for _ in blocks], []
    for g, t0, t1 in samples:
        n, k = blocks[g], cut[g]
        ratios[g].append(k / t0 * t1 / (n - k))
        if len(ratios[g]) == keep:
            speed = sorted(ratios[g])[keep // 2]
            ratios[g] = []
            span = lambda c: max(c / speed, n - c)   # noqa: E731
            if k + 1 < n and span(k + 1) < (1 - gain) * span(k):
                cut[g] += 1
            elif k > 1 and span(k - 1) < (1 - gain) * span(k):
                cut[g] -= 1
        out.append(tuple(cut))
    return out


def test_balance_moves_each_cut_to_the_faster_thread_and_back(tmp_path):
    """The cut rule, compiled from csrc/cblas_impl.h and fed the ticks of made-up images: a thread
    1.5x slower in conv2 loses a block of it, one 3x slower in fc1 loses blocks until the other
    would become the slower, noise of a few percent moves nothing, and equal speeds bring each
    cut back to half; against the rule replayed from its description, sample by sample."""
    gxx = shutil.which("g++")
    if not gxx:
        pytest.skip("g++ not found: the cut rule is compiled from csrc/cblas_impl.h")
    (tmp_path / "balance.cpp").write_text(BALANCE_PROGRAM)
    csrc = Path(__file__).resolve().parents[1] / "csrc"
    subprocess.run([gxx, "-std=c++17", "-O1", f"-I{csrc}", "balance.cpp", "-o", "balance"], cwd=tmp_path,
                   check=True, capture_output=True)
    rng = np.random.default_rng(0)

    def phase(g, slow, images):   # unit 1 `slow` times unit 0's time per block (3 % noise below)
        return [(g, 1000, 1000 * slow) for _ in range(images)]

    plan = phase(1, 1.5, 80) + phase(2, 3.0, 120) + phase(1, 1.0, 80) + phase(2, 1.0, 200) + phase(0, 1.0, 40)
    samples, cut = [], [2, 5, 5]
    for g, t0, t1 in plan:   # each image's ticks follow the cut then in force, as the net's do
        k, n = cut[g], (4, 10, 10)[g]
        samples.append((g, int(k * t0 * rng.uniform(0.97, 1.03)), int((n - k) * t1 * rng.uniform(0.97, 1.03))))
        cut = list(_balance_replayed(samples)[-1])
    text = "".join(f"{g} {t0} {t1}\n" for g, t0, t1 in samples)
    got = [tuple(map(int, line.split())) for line in subprocess.run(
        [tmp_path / "balance"], input=text, capture_output=True, text=True, check=True).stdout.splitlines()]
    assert got == _balance_replayed(samples)
    assert got[79] == (2, 6, 5)          # conv2: 1.5x slower gives up one block of its five, not two
    assert got[199][2] == 8              # fc1: 3x slower keeps 2 of 10 blocks (8 / 3 < 2 < 8 / 3 + 1)
    assert got[279] == (2, 5, 8)         # conv2 back at half
    assert got[479] == (2, 5, 5) == got[-1]   # fc1 back, conv1 never moved


def test_two_nets_from_two_threads_agree_with_sequential(native, params, early, dataset):
    """Two nets (two helper threads) used at once, one image at a time and in batches."""
    x = dataset.test_x[:40]
    nets = [native.CpuNet(params), native.CpuNet(early)]
    want = [[net.predict(x[i:i + 1]) for i in range(len(x))] + [net.predict(x)] for net in nets]
    got = [None, None]

    def work(k):
        got[k] = [nets[k].predict(x[i:i + 1]) for i in range(len(x))] + [nets[k].predict(x)]

    threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k in range(2):
        assert all(np.array_equal(g, w) for g, w in zip(got[k], want[k]))


HELPER_CHECK = """
import gc, sys, time
import numpy as np
import lenet
from lenet import _native

def os_threads():
    with open("/proc/self/status") as f:
        return int(next(line for line in f if line.startswith("Threads:")).split()[1])

params, x = lenet.model.init_params(), np.zeros((1, 1, 28, 28), np.float32)
_native.CpuNet(params, threads=1).predict(x)   # OpenBLAS and the rest started before counting
before = os_threads()
for _ in range(20):
    _native.CpuNet(params, threads=2).predict(x)
gc.collect()
assert os_threads() == before, (os_threads(), before)
net = _native.CpuNet(params, threads=2)
net.predict(x)
assert os_threads() == before + 1, (os_threads(), before)
time.sleep(0.05)                          # past the helper's spin (200 us)
cpu = time.process_time()
time.sleep(0.3)
assert time.process_time() - cpu < 0.05, time.process_time() - cpu   # spinning would be ~0.3 s
print("ok")
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="counts threads in /proc/self/status (Linux)")
def test_helper_threads_are_released_and_sleep_when_idle():
    """Each net's helper thread ends with the net, and an idle helper sleeps instead of spinning
    (in a fresh interpreter: other libraries' threads would blur both counts)."""
    out = subprocess.run([sys.executable, "-c", HELPER_CHECK], capture_output=True, text=True, timeout=120,
                         check=False)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


FORK_CHECK = """
import os, sys, threading, time
import numpy as np
import lenet
from lenet import _native

params = lenet.model.init_params()
x = lenet.data.embedded().test_x[:64].copy()
y = lenet.data.embedded().test_y[:64].astype(np.int32)
used, unused = _native.CpuNet(params, threads=2), _native.CpuNet(params, threads=2)
want = [used.predict(x[:1]), used.predict(x)]
after = _native.CpuNet(params, threads=2)
after.train_step(x, y, 0.05)
want_step = after.parameters()
busy = threading.Event()

def hammer():                 # calls in flight (GIL released) while the main thread forks
    while not busy.is_set():
        used.predict(x[:1]), used.predict(x)

thread = threading.Thread(target=hammer, daemon=True)
thread.start()
for round in range(5):
    time.sleep(0.01)
    pid = os.fork()
    if pid == 0:              # the child: every net works, single image, batch and training
        ok = all(np.array_equal(net.predict(x[:1]), want[0]) and np.array_equal(net.predict(x), want[1])
                 for net in (used, unused))
        unused.train_step(x, y, 0.05)
        ok = ok and all(np.array_equal(unused.parameters()[k], v) for k, v in want_step.items())
        os._exit(0 if ok else 3)
    deadline = time.monotonic() + 30
    while (done := os.waitpid(pid, os.WNOHANG)) == (0, 0) and time.monotonic() < deadline:
        time.sleep(0.01)
    if done == (0, 0):
        os.kill(pid, 9)
        sys.exit(f"round {round}: the child hung")
    if done[1] != 0:
        sys.exit(f"round {round}: the child failed, status {done[1]}")
busy.set()
thread.join()
print("ok")
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX only")
def test_nets_work_in_a_fork_child():
    """Nets created (and busy in another thread) before fork() predict and train in the child, with
    the parent's results; in a fresh interpreter, away from other libraries' thread pools."""
    out = subprocess.run([sys.executable, "-c", FORK_CHECK], capture_output=True, text=True, timeout=120,
                         check=False)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


# --- the per-layer timing switch ---------------------------------------------------------------

@pytest.mark.parametrize("variant", lenet.backends.variants("cblas"))
def test_layer_times_name_every_layer_in_order(params, dataset, variant):
    net = lenet.load("cblas", params=params, variant=variant)
    times = net.layer_times_us(dataset.test_x[:1], 5)
    assert layers.times_problem(times, 5) is None, layers.times_problem(times, 5)


def test_hand_offs_are_recorded_where_a_helper_takes_a_half(native, params, dataset):
    x = dataset.test_x[:1]
    times, handoffs, by_rows = native.CpuNet(params, threads=1).layer_times(x, 20)
    assert handoffs == [] and len(times) == 3 and by_rows == [False] * 20
    net = native.CpuNet(params, threads=2)
    for _ in range(50):                  # a helper may start late on a busy machine: until it takes one
        times, handoffs, _ = net.layer_times(x, 200)
        if handoffs:
            break
    assert handoffs, "the helper thread never took the second half of a forward in 10,000"
    assert len(handoffs) <= 200          # one per forward whose second half a helper took
    # A helper starts after its forward began and before it ended (the caller waits for it), as a
    # rule within the first group; one preempted between its claim and its start may start later
    # (4 ms once, in CI's two passes on two cores).
    longest = max(sum(groups) for groups in zip(*times.values()))
    assert all(0 <= h <= longest + 1e-6 for h in handoffs), (min(handoffs), max(handoffs), longest)
    assert sorted(handoffs)[len(handoffs) // 2] < max(times["conv1+pool1"])


def test_single_images_after_the_helper_fell_asleep(native, params, dataset):
    """A helper sleeps after 200 µs without a job: the caller then claims the second half of the
    forward, runs conv1's, and sends the later groups out as jobs of their own. Images one at a
    time with pauses between them, each forward a different image, against the same forwards
    back to back and against the reference."""
    x = dataset.test_x[:24]
    net = native.CpuNet(params, threads=2)
    want = np.concatenate([net.predict(x[i:i + 1]) for i in range(len(x))])
    assert_logits_agree(want, params, x)
    got, alone = [], 0
    for i in range(len(x)):
        time.sleep(0.002)
        _, handoffs, _ = net.layer_times(x[i:i + 1], 1)   # none: the caller ran both halves
        alone += not handoffs
        time.sleep(0.002)
        got.append(net.predict(x[i:i + 1]))
    np.testing.assert_array_equal(np.concatenate(got), want)
    assert alone, "the helper always took the second half at once after a pause: the fallback was not run"


@pytest.mark.parametrize("n, repeats, message", [
    (2, 5, "images: layer_times takes one image, got 2"),
    (1, 0, "repeats: expected 1 to 1000000, got 0"),
    (1, 1000001, "repeats: expected 1 to 1000000, got 1000001"),
])
def test_bad_layer_times_arguments_raise(native, params, n, repeats, message):
    with pytest.raises(ValueError, match=message):
        native.CpuNet(params).layer_times(_images(n), repeats)
