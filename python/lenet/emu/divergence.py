"""First divergence: a launch sequence run on the emulator one launch at a time, each launch's
writes compared with its NumPy model applied to the very device memory it started from, so a
wrong value is pinned on the first kernel that computes it (kernel, file, buffer, first index),
not on the end of the pass. The models state each kernel's contract with lenet.backends.numpy's
layers; a buffer the kernel changes but its model does not write counts as a divergence too.
Correctness only, never timed.
"""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ..backends import _cuda_kernels as ck
from ..backends import _cuda_net as cn
from ..backends import numpy as ref
from ..model import FILTER_SIZE, IMAGE_SHAPE, NUM_CLASSES

NO_DIVERGENCE = "first divergence: none, every launch wrote what its NumPy model does (the difference is in the comparison)"
TOLERANCE = 1e-4        # max|Δ| / max|model| per buffer written, as lenet.check compares logits


def _at(mem, buf, shape):
    """The float64 values of `shape` at Buf `buf` in the host copy `mem` of the device buffers."""
    return mem[buf.name][buf.offset:buf.offset + int(np.prod(shape))].astype(np.float64).reshape(shape)


def _conv_forward(mem, x, w, b, y, n, C, H, W, O):
    return {y: ref.conv(_at(mem, x, (n, C, H, W)), _at(mem, w, (O, C, FILTER_SIZE, FILTER_SIZE)), _at(mem, b, (O,)))}


def _conv_backward_filter(mem, dy, x, dw, n, C, H, W, O):
    windows = sliding_window_view(_at(mem, x, (n, C, H, W)), (FILTER_SIZE, FILTER_SIZE), axis=(2, 3))
    return {dw: np.tensordot(_at(mem, dy, (n, O, H - FILTER_SIZE + 1, W - FILTER_SIZE + 1)), windows,
                             axes=([0, 2, 3], [0, 2, 3]))}


def _conv_backward_data(mem, dy, w, dx, n, C, H, W, O):
    OH, OW = H - FILTER_SIZE + 1, W - FILTER_SIZE + 1
    return {dx: ref.conv_backward(_at(mem, dy, (n, O, OH, OW)), np.zeros((n, C, H, W)),
                                  _at(mem, w, (O, C, FILTER_SIZE, FILTER_SIZE)))[0]}


def _maxpool_forward(mem, x, y, nc, H, W):
    return {y: ref.maxpool(_at(mem, x, (1, nc, H, W)))}


def _maxpool_backward(mem, dy, x, dx, nc, H, W):
    return {dx: ref.maxpool_backward(_at(mem, dy, (1, nc, H // 2, W // 2)), _at(mem, x, (1, nc, H, W)))}


def _dense_forward(mem, x, w, b, y, n, IN, OUT, relu):
    out = ref.dense(_at(mem, x, (n, IN)), _at(mem, w, (OUT, IN)), _at(mem, b, (OUT,)))
    return {y: np.maximum(out, 0) if relu else out}


def _dense_backward_data(mem, dy, w, mask, dx, n, IN, OUT, use_mask):
    out = _at(mem, dy, (n, OUT)) @ _at(mem, w, (OUT, IN))
    return {dx: np.where(_at(mem, mask, (n, IN)) > 0, out, 0) if use_mask else out}


def _dense_backward_weight(mem, dy, x, dw, n, IN, OUT):
    return {dw: _at(mem, dy, (n, OUT)).T @ _at(mem, x, (n, IN))}


def _strided(mem, buf, rows, cols, row_stride, col_stride):
    index = buf.offset + np.arange(rows)[:, None] * row_stride + np.arange(cols)[None, :] * col_stride
    return mem[buf.name][index].astype(np.float64)


def _gemm(mem, A, B, C, bias, mask, M, N, K, sam, sak, sbk, sbn, flags):
    out = _strided(mem, A, M, K, sam, sak) @ _strided(mem, B, K, N, sbk, sbn)
    if flags & ck.Gemm.BIAS:
        out = out + _at(mem, bias, (N,))
    if flags & ck.Gemm.RELU:
        out = np.maximum(out, 0)
    if flags & ck.Gemm.MASK:
        out = np.where(_at(mem, mask, (M, N)) > 0, out, 0)
    return {C: out}


def _bias_backward(mem, dy, db, n, O, pixels):
    return {db: _at(mem, dy, (n, O, pixels)).sum(axis=(0, 2))}


def _softmax_xent(mem, z, labels, dz, loss, n):
    y = mem[labels.name][labels.offset:labels.offset + n].astype(np.int64)
    logits = _at(mem, z, (n, NUM_CLASSES))
    value, grad = ref.softmax_cross_entropy(logits, y)
    # terms that cancel: p - 1 in dz (each at most 1/n), log-sum-exp - z in the loss
    return {dz: (grad, 1 / n), loss: (np.array([value]), float(np.abs(logits).max()))}


def _sgd(mem, p, g, lr, count):
    return {p: _at(mem, p, (count,)) - lr * _at(mem, g, (count,))}


def _fused_forward(mem, n, x, *rest):
    """The whole forward of `n` images, with the parameters the launch points at (lenet_forward_v3)."""
    *params, z = rest
    net = ref.Reference(ck.unflatten(mem[params[0].name].astype(np.float64)), dtype=np.float64)
    return {z: net.forward(_at(mem, x, (n, *IMAGE_SHAPE)))}


MODELS = {"conv_forward_v1": _conv_forward, "conv_forward_v2": _conv_forward,
          "conv_backward_filter_v1": _conv_backward_filter, "conv_backward_filter_v2": _conv_backward_filter,
          "conv_backward_data_v1": _conv_backward_data, "maxpool_forward": _maxpool_forward,
          "maxpool_backward": _maxpool_backward, "dense_forward_v1": _dense_forward,
          "dense_backward_data_v1": _dense_backward_data, "dense_backward_weight_v1": _dense_backward_weight,
          "gemm_v2": _gemm, "bias_backward": _bias_backward, "softmax_xent": _softmax_xent, "sgd_update": _sgd,
          "lenet_forward_v3": _fused_forward}


def _name(buf_name, index):
    """'h[12]', or in the flat parameter buffers 'grads: fc1.weight[3]'."""
    if buf_name in ("params", "grads"):
        tensor = max((o, t) for t, o in ck.PARAM_OFFSETS.items() if o <= index)[1]
        return f"{buf_name}: {tensor}[{index - ck.PARAM_OFFSETS[tensor]}]"
    return f"{buf_name}[{index}]"


def _differs(got: np.ndarray, want: np.ndarray, scale: float = 0.0) -> int | None:
    """The first index at which `got` is not `want` within TOLERANCE of max|want| (or of `scale`,
    the size of the terms it is computed from, where they cancel), or None."""
    scale = max(float(np.max(np.abs(want), initial=0.0)), scale, 1e-30)
    bad = ~(np.abs(got.astype(np.float64) - want) <= TOLERANCE * scale)
    return int(np.argmax(bad)) if bad.any() else None


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view(np.uint32)        # float32 and int32 alike: NaN equals NaN, -0 is not 0


def first_divergence(net: cn.CudaNet, launches: list[ck.Launch]) -> str | None:
    """Run `launches` on `net`'s buffers (net on an EmuGPU, inputs already uploaded) one at a time;
    the first launch whose writes differ from its model's, as one line, or None if none does."""
    gpu, bufs = net.gpu, net.bufs
    names = sorted({a.name for launch in launches for a in launch.args if isinstance(a, ck.Buf)})
    mem = {name: gpu.download(bufs[name], bufs[name].size) for name in names}
    for i, (launch, item) in enumerate(zip(launches, cn.bind(gpu, launches, bufs)), 1):
        args = [a if isinstance(a, ck.Buf) else a.item() for a in launch.args]
        if launch.kernel == "lenet_forward_v3":
            args.insert(0, launch.grid[0] // ck.CLUSTER)              # the images: one cluster each
        want = MODELS[launch.kernel](mem, *args)
        gpu.run((item,))
        after = {name: gpu.download(bufs[name], bufs[name].size) for name in names}
        where = f"launch {i} of {len(launches)}, {launch.kernel} ({ck.FILE_OF[launch.kernel]})"
        for name in names:
            untouched = np.ones(after[name].size, bool)     # what the model does not write must not change
            for buf, (values, scale) in ((b, (np.ravel(v), 0.0) if isinstance(v, np.ndarray) else (np.ravel(v[0]), v[1]))
                                         for b, v in want.items() if b.name == name):
                got = after[name][buf.offset:buf.offset + values.size]
                if (k := _differs(got, values, scale)) is not None:
                    return (f"first divergence: {where} wrote {_name(name, buf.offset + k)} = {got[k]:.6g}, "
                            f"its NumPy model {values[k]:.6g}")
                untouched[buf.offset:buf.offset + values.size] = False
            changed = np.flatnonzero(untouched & (_bits(after[name]) != _bits(mem[name])))
            if changed.size:
                k = int(changed[0])
                return f"first divergence: {where} changed {_name(name, k)} = {after[name][k]:.6g}, which its model does not write"
        mem = after
    return None


def forward_divergence(net: cn.CudaNet, x: np.ndarray) -> str | None:
    """first_divergence of `net`'s forward pass on images `x`."""
    net.upload(x)
    return first_divergence(net, ck.forward(net.version, len(x)))


def step_divergence(net: cn.CudaNet, x: np.ndarray, y: np.ndarray, lr: float) -> str | None:
    """first_divergence of one SGD step of `net` on images `x`, labels `y`."""
    net._sequence(("train", len(x), lr))           # allocates the step's buffers
    net.gpu.upload(net.bufs["x"], np.asarray(x, np.float32))
    net.gpu.upload(net.bufs["labels"], np.asarray(y, np.int32))
    return first_divergence(net, ck.train_step(net.version, len(x), lr))
