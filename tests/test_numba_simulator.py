"""numba's @cuda.jit kernels executed on the CPU by numba's CUDA simulator, made strict by
numba_sim_strict where its versions allow, each kernel against the NumPy reference; planted bugs
(copies of _numba_gpu_kernels.py with one edit) prove the strict layer reports what the
simulator alone lets pass. Correctness only: nothing here is timed.

The simulator runs every CUDA thread as a Python thread, so shapes are tiny: 2 images, 2-3
channels, integer-valued inputs (conv, pool and dense exact in float32), and a LeNet with
reduced channel counts for the fused kernel and the whole GpuNet. Every output starts as NaN, so
an element a kernel forgets to write fails. In its own process (marker isolated): the simulator
must be chosen before numba is first imported.
"""
import os

os.environ["NUMBA_ENABLE_CUDASIM"] = "1"

import importlib.util  # noqa: E402
import re  # noqa: E402
import threading  # noqa: E402
import tomllib  # noqa: E402
from contextlib import nullcontext  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from numba import cuda  # noqa: E402
from numba.cuda.simulator.kernel import FakeCUDAKernel  # noqa: E402
import numba_sim_strict  # noqa: E402
from numba_sim_strict import SimulatorReport, strict, unsupported  # noqa: E402

from lenet.backends import _numba_gpu_kernels as K  # noqa: E402
from lenet.backends import numpy as ref  # noqa: E402
from lenet.backends._numba_gpu import GpuNet  # noqa: E402
from lenet.backends._numba_net import pack, views  # noqa: E402

pytestmark = [pytest.mark.isolated, pytest.mark.emu]

if not isinstance(K.conv_forward, FakeCUDAKernel):
    raise RuntimeError("numba was imported before this module chose the simulator: run it in its own process")

OUT = object()        # stands for the poisoned output buffer in launch()'s arguments


@pytest.fixture
def checked():
    """The strict layer around the test where it supports these versions, else the plain simulator."""
    with strict() if unsupported() is None else nullcontext():
        yield


def ints(rng, shape, lo=-2, hi=2):
    return rng.integers(lo, hi + 1, shape).astype(np.float32)


def poisoned(shape):
    return cuda.to_device(np.full(shape, np.nan, np.float32))


def launch(kernel, shape, *args):
    """Launch a per-layer kernel with a NaN-filled output of `shape` in place of OUT; return it (host)."""
    out = poisoned(shape)
    K.launch(kernel, out.size, *(out if a is OUT else a for a in args))
    return out.copy_to_host()


def assert_agrees(got, want, exact=True):
    got = got.copy_to_host() if hasattr(got, "copy_to_host") else np.asarray(got)
    assert got.shape == want.shape, f"shape {got.shape} != {want.shape}"
    assert not np.isnan(got).any(), f"{np.isnan(got).sum()} elements never written (NaN)"
    if exact:
        assert np.array_equal(got, want), f"max |Δ| {np.abs(got - want).max():.3g}"
    else:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def tiny_lenet(rng):
    """A LeNet with 2 and 3 conv filters and 6 fc1 units, integer-valued."""
    return {"conv1.weight": ints(rng, (2, 1, 5, 5), -1, 1), "conv1.bias": ints(rng, 2, -1, 1),
            "conv2.weight": ints(rng, (3, 2, 5, 5), -1, 1), "conv2.bias": ints(rng, 3, -1, 1),
            "fc1.weight": ints(rng, (6, 48), -1, 1), "fc1.bias": ints(rng, 6, -1, 1),
            "fc2.weight": ints(rng, (10, 6), -1, 1), "fc2.bias": ints(rng, 10, -1, 1)}


def fused_logits(kernels, params, image):
    """forward_fused of `kernels` on one image; logits (1,10), host."""
    weights = views(cuda.to_device(pack(params)), {k: v.shape for k, v in params.items()})
    out = poisoned((1, 10))
    kernels.forward_fused[1, kernels.FUSED_THREADS](image, *(weights[k] for k in params), out)
    return out.copy_to_host()


def test_strict_layer_runs_here():
    """The strict layer is used by every test here; where it cannot be, this test says why."""
    if reason := unsupported():
        pytest.skip(reason)


def test_a_missing_package_is_named_with_the_command_that_installs_it(monkeypatch):
    """The skip reason names the package that brings the simulator, and the README's test command
    installs it (its extras include numba-cuda)."""
    real = numba_sim_strict.importlib.metadata.version

    def version(package):
        if package == "numba-cuda":
            raise numba_sim_strict.importlib.metadata.PackageNotFoundError(package)
        return real(package)

    monkeypatch.setattr(numba_sim_strict.importlib.metadata, "version", version)
    assert unsupported().startswith("numba-cuda is not installed: `pip install numba-cuda` (or the extra `.[numba]`")
    root = Path(__file__).resolve().parents[1]
    command = re.search(r'^pip install "\.\[([\w,]+)\]" && python -m pytest', (root / "README.md").read_text(), re.M)
    extras = tomllib.loads((root / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert command and any(dep.startswith("numba-cuda") for extra in command.group(1).split(",") for dep in extras[extra])


# --- every kernel, against the reference -------------------------------------------------------

def test_conv_kernels(checked):
    rng = np.random.default_rng(0)
    x, w, b, dy = ints(rng, (2, 2, 6, 6)), ints(rng, (3, 2, 5, 5)), ints(rng, 3), ints(rng, (2, 3, 2, 2))
    assert_agrees(launch(K.conv_forward, (2, 3, 2, 2), x, w, b, OUT), ref.conv(x, w, b))
    dx, dw, db = ref.conv_backward(dy, x, w)
    assert_agrees(launch(K.conv_backward_data, x.shape, dy, w, OUT), dx)
    assert_agrees(launch(K.conv_backward_weight, w.shape, dy, x, OUT), dw)
    assert_agrees(launch(K.bias_backward, 3, dy, OUT), db)


def test_pool_kernels_with_ties(checked):
    rng = np.random.default_rng(1)
    x, dy = ints(rng, (2, 2, 4, 4), 0, 2), ints(rng, (2, 2, 2, 2), 1, 3)      # ties on purpose
    assert_agrees(launch(K.maxpool_forward, (2, 2, 2, 2), x, OUT), ref.maxpool(x))
    assert_agrees(launch(K.maxpool_backward, x.shape, dy, x, OUT), ref.maxpool_backward(dy, x))   # first max


def test_dense_kernels(checked):
    rng = np.random.default_rng(2)
    x, w, b, dy = ints(rng, (2, 6)), ints(rng, (4, 6)), ints(rng, 4), ints(rng, (2, 4))   # w canonical [out, in]
    wt = np.ascontiguousarray(w.T)
    for relu in (False, True):
        want = ref.dense(x, w, b)
        assert_agrees(launch(K.dense_forward, (2, 4), x, wt, b, OUT, relu), np.maximum(want, 0) if relu else want)
    dx, dw, db = ref.dense_backward(dy, x, w)
    assert_agrees(launch(K.dense_backward_data, x.shape, dy, wt, x, OUT, False), dx)
    assert_agrees(launch(K.dense_backward_data, x.shape, dy, wt, x, OUT, True), dx * (x > 0))   # ReLU mask
    assert_agrees(launch(K.dense_backward_weight, wt.shape, dy, x, OUT), dw.T)
    assert_agrees(launch(K.bias_backward, 4, dy.reshape(2, 4, 1, 1), OUT), db)


def test_softmax_cross_entropy_and_sgd(checked):
    rng = np.random.default_rng(3)
    logits, labels = rng.normal(0, 3, (3, 10)).astype(np.float32), np.array([1, 0, 9], np.int32)
    loss, dlogits = ref.softmax_cross_entropy(logits.astype(np.float64), labels)
    losses = poisoned(3)
    assert_agrees(launch(K.softmax_cross_entropy, (3, 10), logits, labels, OUT, losses), dlogits.astype(np.float32),
                  exact=False)
    assert_agrees(losses.copy_to_host().mean(dtype=np.float64).reshape(1), np.array([loss]), exact=False)
    p, g = ints(rng, 37), ints(rng, 37)
    d_p = cuda.to_device(p)
    K.launch(K.sgd, 37, d_p, g, np.float32(0.5))
    assert_agrees(d_p, p - np.float32(0.5) * g)


def test_forward_fused_one_image(checked):
    rng = np.random.default_rng(4)
    params, image = tiny_lenet(rng), ints(rng, (1, 1, 28, 28), 0, 1)
    assert_agrees(fused_logits(K, params, image), ref.Reference(params, np.float64).forward(image).astype(np.float32))


@pytest.fixture(scope="module")
def tiny_net():
    """A GpuNet (per-layer) on tiny_lenet(seed 5), built under the strict layer where it runs:
    construction runs every kernel once, on zeros."""
    params = tiny_lenet(np.random.default_rng(5))
    with strict() if unsupported() is None else nullcontext():
        return GpuNet(params, "per-layer"), params


def test_gpunet_forward_and_sgd_step_with_poisoned_buffers(checked, tiny_net):
    """The whole GpuNet: forward of 2 images, then one SGD step."""
    net, params = tiny_net
    rng = np.random.default_rng(5)
    x, y = ints(rng, (2, 1, 28, 28), 0, 1), np.array([3, 7], np.int32)
    for buf in [*net.activations(2).values(), net.flat_grads]:
        buf.copy_to_device(np.full(buf.shape, np.nan, np.float32))
    params = net.parameters()
    reference = ref.Reference(params, np.float64)
    assert_agrees(net.predict(x), reference.forward(x).astype(np.float32))
    want_loss = reference.train_step(x, y, 0.05)
    assert_agrees(np.float32(net.train_step(x, y, 0.05)).reshape(1), np.float32(want_loss).reshape(1), exact=False)
    got = net.parameters()
    for name in params:
        assert_agrees(got[name], reference.params[name].astype(np.float32), exact=False)


def test_gpunet_shared_by_two_threads(checked, tiny_net):
    """2 threads predict on one GpuNet: the net's lock serialises them (the simulator asserts on
    two launches at once; on a GPU the threads would overwrite each other's logits buffer)."""
    net, got = tiny_net[0], [None] * 2
    x = ints(np.random.default_rng(6), (2, 1, 1, 28, 28), 0, 1)
    threads = [threading.Thread(target=lambda k=k: got.__setitem__(k, net.predict(x[k]))) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    reference = ref.Reference(net.parameters(), np.float64)
    for k in range(2):
        assert got[k] is not None, f"thread {k} failed"
        assert_agrees(got[k], reference.forward(x[k]).astype(np.float32), exact=False)


# --- planted bugs: what the simulator alone lets pass, the strict layer reports -----------------

def planted(tmp_path, old: str, new: str):
    """A copy of _numba_gpu_kernels.py with `old` replaced by `new`, imported under the simulator;
    returns it and its path."""
    source = Path(K.__file__).read_text()
    assert source.count(old) == 1, f"the planted edit no longer matches the kernels: {old!r}"
    path = tmp_path / "_numba_gpu_kernels_planted.py"
    path.write_text(source.replace(old, new))
    spec = importlib.util.spec_from_file_location("lenet.backends._numba_gpu_kernels_planted", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module, path


def site(path: Path, text: str, after: str = "") -> str:
    """file:line (function) of the first line holding `text` after the first holding `after`,
    as the strict layer names it."""
    source = path.read_text()
    at = source.index(text, source.index(after))
    function = source[:at].rsplit("\ndef ", 1)[1].split("(", 1)[0]
    return f"{path}:{source.count(chr(10), 0, at) + 1} ({function})"


def strict_report(run) -> str:
    """Run once on the plain simulator (it must pass silently: the blind spot), then under the
    strict layer; returns the strict layer's report."""
    if reason := unsupported():
        pytest.skip(reason)
    run()
    with strict(), pytest.raises(SimulatorReport) as report:
        run()
    return str(report.value)


def test_planted_negative_index_is_reported(tmp_path):
    """conv_backward_data without its lower bounds check reads dy[..., -4..-1, ...]: wrapped
    silently (dy is 4 wide, so no index falls below -4, where NumPy would raise)."""
    bad, path = planted(tmp_path, "if 0 <= r < dy.shape[2] and 0 <= s < dy.shape[3]:",
                        "if r < dy.shape[2] and s < dy.shape[3]:")
    rng = np.random.default_rng(7)
    x, w, dy = ints(rng, (2, 2, 8, 8)), ints(rng, (3, 2, 5, 5)), ints(rng, (2, 3, 4, 4))
    report = strict_report(lambda: bad.launch(bad.conv_backward_data, x.size, dy, w, poisoned(x.shape)))
    assert "negative index" in report and "tid=[" in report and "ctaid=[" in report, report
    assert report.endswith(f"into a 4-d device array at {site(path, 'acc += dy[n, o, r, s]')}"), report


def test_planted_missing_barrier_is_a_shared_memory_race(tmp_path):
    """forward_fused without the barrier between conv1's writes of p1 and conv2's reads."""
    bad, path = planted(tmp_path, "        p1[t] = best\n    cuda.syncthreads()\n", "        p1[t] = best\n")
    rng = np.random.default_rng(8)
    params, image = tiny_lenet(rng), ints(rng, (1, 1, 28, 28), 0, 1)
    report = strict_report(lambda: fused_logits(bad, params, image))
    p1 = site(path, "p1 = cuda.shared.array")
    assert "shared-memory race: thread " in report and f"of the shared array allocated at {p1}, " in report, report
    assert report.endswith((f"at {site(path, 'p1[t] = best')}", f"at {site(path, 'acc += p1[')}")), report


def test_planted_unwritten_shared_element_is_an_uninitialised_read(tmp_path):
    """forward_fused's conv1 loop starting one element late: p1[0] is never written, yet read."""
    bad, path = planted(tmp_path, "for t in range(tid, w1.shape[0] * q1 * q1, nt):",
                        "for t in range(tid + 1, w1.shape[0] * q1 * q1, nt):")
    rng = np.random.default_rng(9)
    params, image = tiny_lenet(rng), ints(rng, (1, 1, 28, 28), 0, 1)
    report = strict_report(lambda: fused_logits(bad, params, image))
    assert "uninitialised read: thread " in report and " read element 0 of the shared array allocated at " \
        f"{site(path, 'p1 = cuda.shared.array')}, which no thread of the block wrote, at {site(path, 'acc += p1[')}" \
        in report, report


def test_a_kernel_reading_a_device_array_nothing_wrote_is_an_uninitialised_read():
    """GpuNet's set-up as it was before an H100's initcheck flagged it: SGD compiled on a fresh
    cuda.device_array_like of the parameters, whose values nothing had written."""
    if unsupported():
        pytest.skip(unsupported())
    grads = cuda.to_device(np.ones(37, np.float32))
    report = strict_report(lambda: K.launch(K.sgd, 37, cuda.device_array_like(grads), grads, np.float32(0.5)))
    assert re.search(r"uninitialised read: element \d+ of a 1-d device array that nothing wrote \(cuda.device_array\), "
                     f"at {re.escape(site(Path(K.__file__), 'p[t] -= lr * g[t]'))}$", report), report
    with strict():                                                     # written first: nothing to report
        params = cuda.device_array_like(grads)
        params.copy_to_device(np.zeros(37, np.float32))
        K.launch(K.sgd, 37, params, grads, np.float32(0.5))
    assert (params.copy_to_host() == -0.5).all()


def test_planted_early_return_before_a_barrier_is_a_divergent_syncthreads(tmp_path):
    """forward_fused with the threads that have no conv1 output leaving early: the remaining
    threads' syncthreads is not reached by the whole block (the simulator releases them anyway)."""
    bad, path = planted(tmp_path, "    for t in range(tid, w1.shape[0] * q1 * q1, nt):  # conv1 + pool1\n",
                        "    if tid >= w1.shape[0] * q1 * q1:\n        return\n"
                        "    for t in range(tid, w1.shape[0] * q1 * q1, nt):  # conv1 + pool1\n")
    rng = np.random.default_rng(10)
    params, image = tiny_lenet(rng), ints(rng, (1, 1, 28, 28), 0, 1)
    report = strict_report(lambda: fused_logits(bad, params, image))
    barrier = site(path, "cuda.syncthreads()", after="def forward_fused")
    assert report.endswith(f"divergent syncthreads: of {K.FUSED_THREADS} threads 288 waited at {barrier}, "
                           f"{K.FUSED_THREADS - 288} had exited"), report
