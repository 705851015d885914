"""numba backend: cpu in full; gpu: the kernels compiled for sm_90, the no-GPU error, runs marked `gpu`
(the CUDA kernels executed by numba's simulator: test_numba_simulator.py)."""
from __future__ import annotations

import threading

import numpy as np
import pytest
from agree import assert_logits_agree, assert_step_agrees, require

import lenet
from lenet.backends import numpy as reference

CPU_VARIANTS = ("1thread", "prange")
GPU_VARIANTS = ("fused", "per-layer")


@pytest.fixture(scope="module")
def cpu_nets(params):
    require("numba", "cpu")
    return {k: lenet.load("numba", "cpu", params=params, variant=k) for k in CPU_VARIANTS}


# --- cpu ---------------------------------------------------------------------------------

@pytest.mark.parametrize("variant", CPU_VARIANTS)
@pytest.mark.parametrize("n", [1, 7, 64])
def test_cpu_forward_agrees(cpu_nets, params, dataset, variant, n):
    x = dataset.test_x[::15][:n].copy()                                # every class
    assert_logits_agree(cpu_nets[variant].predict(x), params, x)


def test_cpu_single_images_one_at_a_time(cpu_nets, params, dataset):
    """50 real digits of every class, one predict call each (the batch-1 path)."""
    import numba
    threads = numba.get_num_threads()
    x = dataset.test_x[::20][:50].copy()
    for variant in CPU_VARIANTS:
        got = np.concatenate([cpu_nets[variant].predict(x[i:i + 1]) for i in range(len(x))])
        assert_logits_agree(got, params, x)
    assert numba.get_num_threads() == threads                          # variant 1thread restores it


def test_cpu_kernels_exact_on_integers():
    """Each cpu kernel alone against the reference op, on small integer-valued inputs (exact in
    float32), with LeNet's conv2 shapes and ties in every pooling window; outputs start as NaN."""
    require("numba", "cpu")
    from lenet.backends._numba_cpu_kernels import KERNELS as k
    rng = np.random.default_rng(1)

    def ints(*shape, lo=-2, hi=2):
        return rng.integers(lo, hi + 1, shape).astype(np.float32)

    def nans(*shape):
        return np.full(shape, np.nan, np.float32)

    x, w, b, dy = ints(3, 20, 12, 12), ints(50, 20, 5, 5), ints(50), ints(3, 50, 8, 8)
    cols, rows, y = nans(3, 500, 64), nans(3, 64, 500), nans(3, 50, 64)
    k["im2col"](x, 5, cols)
    k["conv_forward"](cols, w.reshape(50, -1), b, y)
    assert np.array_equal(y.reshape(3, 50, 8, 8), reference.conv(x, w, b))
    dx_ref, dw_ref, db_ref = reference.conv_backward(dy, x, w)
    dx, dw, db = nans(*x.shape), nans(50, 500), nans(50)
    k["conv_backward_data"](dy.reshape(3, 50, -1), w.reshape(50, -1), 5, dx)
    k["im2row"](x, 5, rows)
    k["conv_backward_weight"](dy.reshape(3, 50, -1), rows, dw, db)
    assert np.array_equal(dx, dx_ref) and np.array_equal(dw.reshape(w.shape), dw_ref) and np.array_equal(db, db_ref)

    xp, dyp = ints(3, 20, 8, 8, lo=0, hi=1), ints(3, 20, 4, 4, lo=1, hi=3)   # ties
    yp, dxp = nans(3, 20, 4, 4), nans(*xp.shape)
    k["maxpool_forward"](xp, yp)
    k["maxpool_backward"](dyp, xp, dxp)
    assert np.array_equal(yp, reference.maxpool(xp)) and np.array_equal(dxp, reference.maxpool_backward(dyp, xp))

    xd, wd, bd, dyd = ints(5, 40), ints(30, 40), ints(30), ints(5, 30)
    yd, dxd, dwt, dbd = nans(5, 30), nans(5, 40), nans(40, 30), nans(30)
    k["dense_forward"](xd, np.ascontiguousarray(wd.T), bd, yd, True)
    assert np.array_equal(yd, np.maximum(reference.dense(xd, wd, bd), 0))
    k["dense_backward"](dyd, xd, np.ascontiguousarray(wd.T), dxd, dwt, dbd)
    want = reference.dense_backward(dyd, xd, wd)
    assert np.array_equal(dxd, want[0]) and np.array_equal(dwt.T, want[1]) and np.array_equal(dbd, want[2])


@pytest.mark.parametrize("variant", CPU_VARIANTS)
def test_cpu_net_shared_by_four_threads_gives_each_call_its_own_answer(params, dataset, variant):
    """One net, 4 threads, single images and batches of 3 interleaved with SGD steps of a second
    net's copy: every prediction equals the one-thread answer (before the net's lock, 133 of 200
    single images came back wrong from 4 threads on a 2-core machine)."""
    require("numba", "cpu")
    net = lenet.load("numba", "cpu", params=params, variant=variant)
    x = dataset.test_x[:120].copy()
    singles = np.concatenate([net.predict(x[i:i + 1]) for i in range(len(x))])
    triples = np.concatenate([net.predict(x[i:i + 3]) for i in range(0, len(x), 3)])
    wrong = []

    def work(k):
        for i in range(k, len(x), 4):
            if not np.array_equal(net.predict(x[i:i + 1]), singles[i:i + 1]):
                wrong.append(("single", i))
            j = 3 * (i // 3)
            if not np.array_equal(net.predict(x[j:j + 3]), triples[j:j + 3]):
                wrong.append(("batch of 3", j))
    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not wrong, f"{len(wrong)} of {2 * len(x)} predictions wrong from 4 threads: {wrong[:5]}"


def test_cpu_train_steps_from_four_threads_are_whole_steps(params, dataset):
    """4 threads each take one SGD step on the same net: the result is 4 whole steps, one after
    the other, as one thread takes them (the steps commute only in the order the lock gives, so
    each order's 4 steps are compared against the same images taken one by one in that order)."""
    require("numba", "cpu")
    net = lenet.load("numba", "cpu", params=params)
    xs = [dataset.train_x[8 * k:8 * k + 8].copy() for k in range(4)]
    ys = [dataset.train_y[8 * k:8 * k + 8].copy() for k in range(4)]
    order = []
    original = net._gradients

    def gradients(x, y):
        order.append(next(k for k in range(4) if np.array_equal(x, xs[k])))
        return original(x, y)
    net._gradients = gradients
    threads = [threading.Thread(target=net.train_step, args=(xs[k], ys[k], 0.05)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    one = lenet.load("numba", "cpu", params=params)
    for k in order:
        one.train_step(xs[k], ys[k], 0.05)
    assert sorted(order) == [0, 1, 2, 3]
    got, want = net.parameters(), one.parameters()
    assert all(np.array_equal(got[name], want[name]) for name in want)


def test_cpu_predict_returns_fresh_arrays(cpu_nets, dataset):
    for net in cpu_nets.values():
        first = net.predict(dataset.test_x[:1].copy())
        kept = first.copy()
        net.predict(dataset.test_x[1:2].copy())
        assert np.array_equal(first, kept)


@pytest.mark.parametrize("variant", CPU_VARIANTS)
def test_cpu_sgd_step_agrees(params, batch, variant):
    require("numba", "cpu")
    x, y = batch
    assert_step_agrees(lenet.load("numba", "cpu", params=params, variant=variant), params, x, y, lr=0.05)


def test_cpu_small_batch_step_agrees(params, dataset):
    require("numba", "cpu")
    x, y = dataset.train_x[:3].copy(), dataset.train_y[:3].copy()
    assert_step_agrees(lenet.load("numba", "cpu", params=params), params, x, y, lr=0.05)


def test_cpu_training_lowers_the_loss(params, batch):
    require("numba", "cpu")
    net, (x, y) = lenet.load("numba", "cpu", params=params), batch
    losses = [net.train_step(x, y, lr=0.05) for _ in range(5)]
    assert losses[-1] < losses[0], losses


def test_cpu_parameters_round_trip(cpu_nets, params):
    for net in cpu_nets.values():
        got = net.parameters()
        assert list(got) == list(lenet.model.PARAM_NAMES)
        for name, value in got.items():
            assert value.dtype == np.float32 and value.flags.c_contiguous, name
            assert np.array_equal(value, params[name]), name
        got["fc1.weight"][:] = 0                                        # a copy, not a view
        assert np.array_equal(net.parameters()["fc1.weight"], params["fc1.weight"])


def test_cpu_bad_input_is_one_line_error(cpu_nets):
    with pytest.raises(lenet.InputError, match="shape"):
        cpu_nets["prange"].predict(np.zeros((1, 28, 28), np.float32))


def test_every_variant_names_its_device_and_the_other_device_is_one_clear_error(params):
    require("numba", "cpu")
    from lenet.backends import numba as backend
    assert set(backend.VARIANT_DEVICES) == set(backend.VARIANTS) == set(CPU_VARIANTS + GPU_VARIANTS)
    assert all(backend.VARIANTS[k].startswith(backend.VARIANT_DEVICES[k][0] + ": ") for k in backend.VARIANTS)
    assert set(lenet.backends.variants("numba", "cpu")) == set(CPU_VARIANTS)
    assert set(lenet.backends.variants("numba", "gpu")) == set(GPU_VARIANTS)
    assert {d: backend.VARIANT_DEVICES[k] for d, k in backend.DEFAULT_VARIANT.items()} == {"cpu": ("cpu",), "gpu": ("gpu",)}
    with pytest.raises(lenet.UnavailableError, match=r"^numba variant 'fused' runs on gpu only \(gpu: .*cuda.jit.*\); on cpu: prange, 1thread$"):
        lenet.load("numba", "cpu", params=params, variant="fused")


# --- gpu, without one: the kernels compile, and the error -----------------------------------

def test_cuda_kernels_compile_for_sm90():
    """Every cuda.jit kernel compiles to PTX for sm_90 with the types the backend launches it
    with, and none does float64 arithmetic. Needs NVIDIA's numba-cuda target (numba's built-in
    one wants a driver even to compile) and NVVM from the CUDA toolkit; no GPU."""
    require("numba", "cpu")
    from numba import boolean, cuda, float32, int32, int64
    if getattr(cuda, "implementation", "") != "NVIDIA":
        pytest.skip("numba.cuda is numba's deprecated built-in target (needs a driver to compile); "
                    "pip install numba-cuda to compile-check the kernels")
    from lenet.backends import _numba_gpu_kernels as K

    def a(nd):                                                          # C-contiguous float32
        return float32[(slice(None),) * (nd - 1) + (slice(None, None, 1),)]
    sigs = {"conv_forward": (a(4), a(4), a(1), a(4)), "conv_backward_data": (a(4), a(4), a(4)),
            "conv_backward_weight": (a(4), a(4), a(4)), "bias_backward": (a(4), a(1)),
            "maxpool_forward": (a(4), a(4)), "maxpool_backward": (a(4), a(4), a(4)),
            "dense_forward": (a(2), a(2), a(1), a(2), boolean),
            "dense_backward_data": (a(2), a(2), a(2), a(2), boolean),
            "dense_backward_weight": (a(2), a(2), a(2)),
            "softmax_cross_entropy": (a(2), int32[::1], a(2), a(1)), "sgd": (a(1), a(1), float32),
            "hold": (int64,),
            "forward_fused": (a(4), a(4), a(1), a(4), a(1), a(2), a(1), a(2), a(1), a(2))}
    for name, sig in sigs.items():
        try:
            ptx, _ = cuda.compile_ptx(getattr(K, name).py_func, sig, cc=(9, 0))
        except Exception as exc:
            if any(lib in str(exc).lower() for lib in ("nvvm", "nvrtc")):      # a CUDA library missing
                pytest.skip(f"no NVVM/NVRTC for numba-cuda: {str(exc).splitlines()[0]}")
            raise
        assert ".entry" in ptx and ".f64" not in ptx, name


def test_without_numba_says_how_to_install(monkeypatch):
    import importlib.util

    from lenet.backends import numba as backend
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "numba" else find_spec(name, *a))
    assert backend.unavailable("cpu") == "numba not installed (pip install numba)"


def test_gpu_without_gpu_is_one_clear_error():
    reason = lenet.backends.cuda_unavailable()
    if reason is None:
        pytest.skip("a CUDA GPU is present")
    assert lenet.backends.unavailable("numba", "gpu") == reason
    with pytest.raises(lenet.UnavailableError) as err:
        lenet.load("numba", "gpu", params=lenet.model.init_params())
    assert "\n" not in str(err.value) and "numba on gpu" in str(err.value)


# --- gpu ---------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("variant", GPU_VARIANTS)
def test_gpu_forward_agrees(params, dataset, variant):
    require("numba", "gpu")
    net = lenet.load("numba", "gpu", params=params, variant=variant)
    for n in (1, 7, 64):
        x = dataset.test_x[::15][:n].copy()
        assert_logits_agree(net.predict(x), params, x)
        assert np.array_equal(net.download(net.forward(net.upload(x))), net.predict(x))
    x = dataset.test_x[::20][:50].copy()
    assert_logits_agree(np.concatenate([net.predict(x[i:i + 1]) for i in range(len(x))]), params, x)
    times = net.device_times_us(x[:1], 5)
    assert set(times) == {"forward", "kernels"}
    assert all(len(t) == 5 and min(t) > 0 for t in times.values())
    assert np.median(times["kernels"]) <= np.median(times["forward"]) * 1.1, times


@pytest.mark.gpu
@pytest.mark.parametrize("variant", GPU_VARIANTS)
def test_gpu_sgd_step_agrees(params, batch, variant):
    require("numba", "gpu")
    x, y = batch
    assert_step_agrees(lenet.load("numba", "gpu", params=params, variant=variant), params, x, y, lr=0.05)


@pytest.mark.gpu
def test_gpu_parameters_round_trip(params):
    require("numba", "gpu")
    got = lenet.load("numba", "gpu", params=params).parameters()
    assert all(np.array_equal(got[k], params[k]) for k in lenet.model.PARAM_NAMES)
