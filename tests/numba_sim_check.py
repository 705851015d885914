"""Numba CUDA kernels under the simulator, each against the NumPy reference op.

Run as `NUMBA_ENABLE_CUDASIM=1 python tests/numba_sim_check.py` (tests/test_numba.py does, in a
subprocess: the variable must be set before numba is imported). The simulator runs every
thread in Python, so shapes are tiny: 2 images, 2-3 channels, integer-valued inputs, which
make conv, pool and dense exact in float32. Every output buffer starts as NaN (poisoned), so
an element a kernel forgets to write fails. Prints one line per check; exits 1 on a failure.
"""
from __future__ import annotations

import os
import sys
import time

import numpy as np

assert os.environ.get("NUMBA_ENABLE_CUDASIM") == "1", "set NUMBA_ENABLE_CUDASIM=1 before running"

from numba import cuda  # noqa: E402

from lenet.backends import _numba_cuda as K  # noqa: E402
from lenet.backends import numba as nb  # noqa: E402
from lenet.backends import numpy as ref  # noqa: E402

rng = np.random.default_rng(0)
failures = []


def ints(shape, lo=-2, hi=2):
    return rng.integers(lo, hi + 1, shape).astype(np.float32)


def poisoned(shape):
    return cuda.to_device(np.full(shape, np.nan, np.float32))


def check(name, got, want, exact=True):
    got = got.copy_to_host() if hasattr(got, "copy_to_host") else got
    ok = got.shape == want.shape and not np.isnan(got).any() and (
        np.array_equal(got, want) if exact else np.allclose(got, want, rtol=1e-5, atol=1e-6))
    why = ("" if ok else f": shape {got.shape} != {want.shape}" if got.shape != want.shape else
           f": {np.isnan(got).sum()} unwritten (NaN) elements" if np.isnan(got).any() else
           f": max |Δ| {np.abs(got - want).max():.3g}")
    print(f"{'ok  ' if ok else 'FAIL'} {name}{why}")
    if not ok:
        failures.append(name)


OUT = object()   # stands for the poisoned output buffer in run()'s arguments


def run(kernel, shape, *args):
    """Launch a per-layer kernel with a NaN-filled output of `shape` in place of OUT; return it."""
    out = poisoned(shape)
    K.launch(kernel, out.size, *(out if a is OUT else a for a in args))
    return out


t0 = time.perf_counter()
x, w, b = ints((2, 2, 6, 6)), ints((3, 2, 5, 5)), ints(3)
check("conv_forward", run(K.conv_forward, (2, 3, 2, 2), x, w, b, OUT), ref.conv(x, w, b))
dy = ints((2, 3, 2, 2))
dx_ref, dw_ref, db_ref = ref.conv_backward(dy, x, w)
check("conv_backward_data", run(K.conv_backward_data, x.shape, dy, w, OUT), dx_ref)
check("conv_backward_weight", run(K.conv_backward_weight, w.shape, dy, x, OUT), dw_ref)
check("bias_backward", run(K.bias_backward, 3, dy, OUT), db_ref)

xp = ints((2, 2, 4, 4), 0, 2)                                           # ties on purpose
check("maxpool_forward", run(K.maxpool_forward, (2, 2, 2, 2), xp, OUT), ref.maxpool(xp))
dyp = ints((2, 2, 2, 2), 1, 3)
check("maxpool_backward (first max)", run(K.maxpool_backward, xp.shape, dyp, xp, OUT), ref.maxpool_backward(dyp, xp))

xd, wd, bd = ints((2, 6)), ints((4, 6)), ints(4)                       # wd canonical [out, in]
wt = np.ascontiguousarray(wd.T)
for relu in (False, True):
    want = ref.dense(xd, wd, bd)
    check(f"dense_forward relu={relu}", run(K.dense_forward, (2, 4), xd, wt, bd, OUT, relu),
          np.maximum(want, 0) if relu else want)
dyd = ints((2, 4))
dxd, dwd, dbd = ref.dense_backward(dyd, xd, wd)
check("dense_backward_data", run(K.dense_backward_data, xd.shape, dyd, wt, xd, OUT, False), dxd)
check("dense_backward_data relu mask", run(K.dense_backward_data, xd.shape, dyd, wt, xd, OUT, True), dxd * (xd > 0))
check("dense_backward_weight", run(K.dense_backward_weight, wt.shape, dyd, xd, OUT), dwd.T)
check("bias_backward (dense)", run(K.bias_backward, 4, dyd.reshape(2, 4, 1, 1), OUT), dbd)

logits, labels = rng.normal(0, 3, (3, 10)).astype(np.float32), np.array([1, 0, 9], np.int32)
loss, dlogits = ref.softmax_cross_entropy(logits.astype(np.float64), labels)
losses = poisoned(3)
check("softmax_cross_entropy grad", run(K.softmax_cross_entropy, (3, 10), logits, labels, OUT, losses),
      dlogits.astype(np.float32), exact=False)
check("softmax_cross_entropy loss", losses.copy_to_host().mean(dtype=np.float64).reshape(1), np.array([loss]), exact=False)

p, g = ints(37), ints(37)
d_p = cuda.to_device(p)
K.launch(K.sgd, 37, d_p, g, np.float32(0.5))
check("sgd", d_p, p - np.float32(0.5) * g)

# a LeNet with reduced channel counts (conv 2 and 3 filters, fc1 6 units), integer-valued
tiny = {"conv1.weight": ints((2, 1, 5, 5), -1, 1), "conv1.bias": ints(2, -1, 1),
        "conv2.weight": ints((3, 2, 5, 5), -1, 1), "conv2.bias": ints(3, -1, 1),
        "fc1.weight": ints((6, 48), -1, 1), "fc1.bias": ints(6, -1, 1),
        "fc2.weight": ints((10, 6), -1, 1), "fc2.bias": ints(10, -1, 1)}
img = ints((1, 1, 28, 28), 0, 1)
tp = nb.views(cuda.to_device(nb.pack(tiny)), {k: v.shape for k, v in tiny.items()})
fused = poisoned((1, 10))
K.forward_fused[1, K.FUSED_THREADS](img, *(tp[k] for k in tiny), fused)
check("forward_fused (one image)", fused, ref.Reference(tiny, np.float64).forward(img).astype(np.float32))
print(f"kernels: {time.perf_counter() - t0:.1f} s")

# the whole GpuNet (per-layer kernels), its buffers poisoned: forward of 2 images, one SGD step
t0 = time.perf_counter()
net = nb.GpuNet(tiny, "per-layer")
xs, ys = ints((2, 1, 28, 28), 0, 1), np.array([3, 7], np.int32)
for buf in [*net.acts(2).values(), net.grad]:
    buf.copy_to_device(np.full(buf.shape, np.nan, np.float32))
check("GpuNet forward (2 images)", net.predict(xs), ref.Reference(tiny, np.float64).forward(xs).astype(np.float32))
reference = ref.Reference(tiny, np.float64)
want_loss = reference.train_step(xs, ys, 0.05)
loss = net.train_step(xs, ys, 0.05)
check("GpuNet train_step loss", np.float32(loss).reshape(1), np.float32(want_loss).reshape(1), exact=False)
got = net.parameters()
for name in tiny:
    check(f"GpuNet train_step {name}", got[name], reference.params[name].astype(np.float32), exact=False)
print(f"GpuNet: {time.perf_counter() - t0:.1f} s")
sys.exit(1 if failures else 0)
