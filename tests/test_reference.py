"""The oracle checked by hand: exact small cases, finite differences, a hand-computed SGD step."""
import numpy as np
import pytest

from lenet import model
from lenet.backends import numpy as ref


def naive_conv(x, w, b):
    n, c, h, wd = x.shape
    o, _, k, _ = w.shape
    out = np.zeros((n, o, h - k + 1, wd - k + 1), x.dtype)
    for i in range(n):
        for j in range(o):
            for r in range(h - k + 1):
                for s in range(wd - k + 1):
                    out[i, j, r, s] = (x[i, :, r:r + k, s:s + k] * w[j]).sum() + b[j]
    return out


def test_conv_is_exact_on_small_integers():
    rng = np.random.default_rng(0)
    x = rng.integers(-3, 4, (2, 3, 8, 7)).astype(np.float32)
    w = rng.integers(-2, 3, (4, 3, 5, 5)).astype(np.float32)
    b = rng.integers(-5, 6, 4).astype(np.float32)
    assert np.array_equal(ref.conv(x, w, b), naive_conv(x, w, b))


def test_conv_by_hand():
    x = np.arange(36, dtype=np.float32).reshape(1, 1, 6, 6)
    w = np.zeros((1, 1, 5, 5), np.float32)
    w[0, 0, 0, 0], w[0, 0, 4, 4] = 1, 2              # cross-correlation: no filter flip
    out = ref.conv(x, w, np.array([10], np.float32))
    # out[r, s] = x[r, s] + 2 * x[r + 4, s + 4] + 10
    assert out[0, 0].tolist() == [[0 + 56 + 10, 1 + 58 + 10], [6 + 68 + 10, 7 + 70 + 10]]


def test_maxpool_and_its_backward_by_hand():
    x = np.array([[[[1, 2, 5, 5],
                    [4, 3, 0, 5],
                    [0, 0, 7, 1],
                    [0, 0, 1, 7]]]], np.float32)
    assert ref.maxpool(x)[0, 0].tolist() == [[4, 5], [0, 7]]
    dx = ref.maxpool_backward(np.array([[[[1, 2], [3, 4]]]], np.float32), x)
    # ties go to the first maximum in row-major order
    assert dx[0, 0].tolist() == [[0, 0, 2, 0], [1, 0, 0, 0], [3, 0, 4, 0], [0, 0, 0, 0]]


def test_dense_by_hand():
    x = np.array([[1, 2, 3]], np.float32)
    w = np.array([[1, 0, -1], [2, 2, 2]], np.float32)
    assert ref.dense(x, w, np.array([1, -1], np.float32)).tolist() == [[-1, 11]]


def test_softmax_cross_entropy_by_hand():
    loss, d = ref.softmax_cross_entropy(np.zeros((2, 10)), np.array([3, 7]))
    assert loss == pytest.approx(np.log(10))
    expected = np.full((2, 10), 0.1)
    expected[0, 3] -= 1
    expected[1, 7] -= 1
    assert np.allclose(d, expected / 2)


def test_backward_matches_finite_differences():
    rng = np.random.default_rng(1)
    params = {k: v.astype(np.float64) * 3 + rng.normal(0, 0.05, v.shape) for k, v in model.init_params(3).items()}
    net = ref.Reference(params, np.float64)
    x = rng.normal(0.5, 0.3, (3, 1, 28, 28))
    y = np.array([1, 4, 9])
    _, grads = net.gradients(x, y)
    eps = 1e-6
    for name in model.PARAM_NAMES:
        for flat in rng.choice(params[name].size, 4, replace=False):
            idx = np.unravel_index(flat, params[name].shape)
            saved = net.p[name][idx]
            net.p[name][idx] = saved + eps
            up = net.gradients(x, y)[0]
            net.p[name][idx] = saved - eps
            down = net.gradients(x, y)[0]
            net.p[name][idx] = saved
            numeric = (up - down) / (2 * eps)
            assert grads[name][idx] == pytest.approx(numeric, rel=1e-4, abs=1e-7), (name, idx)


def test_one_sgd_step_by_hand():
    # All weights zero and fc1.bias = 1: relu(fc1) = 1 everywhere, logits = 0, p = 0.1.
    # Only fc2 gets a gradient: d fc2.bias[k] = mean(p - onehot), d fc2.weight[k, j] = the same.
    params = {k: np.zeros(s, np.float32) for k, s in model.PARAM_SHAPES.items()}
    params["fc1.bias"][:] = 1
    net = ref.Reference(params, np.float64)
    y = np.array([3, 3, 5, 0])
    loss = net.train_step(np.ones((4, 1, 28, 28), np.float32), y, lr=0.5)
    assert loss == pytest.approx(np.log(10))
    grad = np.full(10, 0.1)
    grad[3] -= 0.5
    grad[5] -= 0.25
    grad[0] -= 0.25
    after = net.parameters()
    assert np.allclose(after["fc2.bias"], -0.5 * grad)
    assert np.allclose(after["fc2.weight"], np.repeat(-0.5 * grad[:, None], 500, axis=1))
    for name in ("conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias", "fc1.weight"):
        assert not after[name].any(), name
    assert np.all(after["fc1.bias"] == 1)


def test_float32_and_float64_references_agree(params, dataset):
    x = dataset.test_x[:64]
    l32 = ref.Reference(params, np.float32).forward(x)
    l64 = ref.Reference(params, np.float64).forward(x)
    assert l32.dtype == np.float32 and np.abs(l32 - l64).max() / np.abs(l64).max() < 1e-5


def test_model_counts():
    assert model.NUM_PARAMS == 431_080 and model.MULTIPLY_ADDS == 2_293_000
    assert sum(v.size for v in model.init_params().values()) == model.NUM_PARAMS
    a, b = model.init_params(7), model.init_params(7)
    assert all(np.array_equal(a[k], b[k]) for k in a)
