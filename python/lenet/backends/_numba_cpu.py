"""Numba CPU kernels for LeNet: plain loops compiled by @njit, batches split over cores by prange.

Every inner loop runs along a contiguous row as an axpy (y[:] += a * x[:]), so LLVM vectorises
it without fastmath: no reduction is reassociated, the sums are formed in a fixed order.
Shapes per batch of N images, NCHW. Dense weights are kept transposed, wt [in, out], so the
forward pass and the weight gradient are axpys over the outputs.

Each kernel is compiled twice: parallel (prange over images or channels) for batches and
training, and serial inside `forward_single`, the whole single-image forward in one call
(no thread-pool hand-off, no per-layer dispatch).
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange


def conv_forward(x, w, b, y):
    """x (N,C,H,W), w (O,C,K,K), b (O,) -> y (N,O,H-K+1,W-K+1); one task per (image, output channel)."""
    n_img, n_out, oh, ow = y.shape
    n_in, k = w.shape[1], w.shape[2]
    for t in prange(n_img * n_out):
        n, o = t // n_out, t % n_out
        y[n, o] = b[o]
        for c in range(n_in):
            for i in range(k):
                for j in range(k):
                    wv = w[o, c, i, j]
                    for r in range(oh):
                        for s in range(ow):
                            y[n, o, r, s] += wv * x[n, c, r + i, s + j]


def conv_backward_data(dy, w, dx):
    """dy (N,O,OH,OW), w (O,C,K,K) -> dx (N,C,H,W); one task per (image, input channel)."""
    n_img, n_out, oh, ow = dy.shape
    n_in, k = w.shape[1], w.shape[2]
    for t in prange(n_img * n_in):
        n, c = t // n_in, t % n_in
        dx[n, c] = 0
        for o in range(n_out):
            for i in range(k):
                for j in range(k):
                    wv = w[o, c, i, j]
                    for r in range(oh):
                        for s in range(ow):
                            dx[n, c, r + i, s + j] += wv * dy[n, o, r, s]


def conv_backward_weight(dy, x, dw, db):
    """dy (N,O,OH,OW), x (N,C,H,W) -> dw (O,C,K,K), db (O,); one task per (output, input channel).

    Partial sums are kept per output column (acc[s]) so the inner loop stays an axpy."""
    n_img, n_out, oh, ow = dy.shape
    n_in, k = dw.shape[1], dw.shape[2]
    for t in prange(n_out * n_in):
        o, c = t // n_in, t % n_in
        acc = np.empty(ow, np.float32)
        for i in range(k):
            for j in range(k):
                acc[:] = 0
                for n in range(n_img):
                    for r in range(oh):
                        for s in range(ow):
                            acc[s] += dy[n, o, r, s] * x[n, c, r + i, s + j]
                dw[o, c, i, j] = acc.sum()
        if c == 0:
            acc[:] = 0
            for n in range(n_img):
                for r in range(oh):
                    for s in range(ow):
                        acc[s] += dy[n, o, r, s]
            db[o] = acc.sum()


def maxpool_forward(x, y):
    """x (N,C,H,W) -> y (N,C,H/2,W/2), max of each 2x2 window."""
    n_img, n_ch, ph, pw = y.shape
    for t in prange(n_img * n_ch):
        n, c = t // n_ch, t % n_ch
        for r in range(ph):
            for s in range(pw):
                y[n, c, r, s] = max(max(x[n, c, 2 * r, 2 * s], x[n, c, 2 * r, 2 * s + 1]),
                                    max(x[n, c, 2 * r + 1, 2 * s], x[n, c, 2 * r + 1, 2 * s + 1]))


def maxpool_backward(dy, x, dx):
    """dy (N,C,H/2,W/2), x (N,C,H,W) -> dx (N,C,H,W): each gradient to the first maximum of its
    window in row-major order, zero elsewhere."""
    n_img, n_ch, ph, pw = dy.shape
    for t in prange(n_img * n_ch):
        n, c = t // n_ch, t % n_ch
        for r in range(ph):
            for s in range(pw):
                best_i, best_j = 2 * r, 2 * s
                for i in range(2 * r, 2 * r + 2):
                    for j in range(2 * s, 2 * s + 2):
                        dx[n, c, i, j] = 0
                        if x[n, c, i, j] > x[n, c, best_i, best_j]:
                            best_i, best_j = i, j
                dx[n, c, best_i, best_j] = dy[n, c, r, s]


def dense_forward(x, wt, b, y, relu):
    """x (N,I), wt (I,O), b (O,) -> y (N,O) = x @ wt + b, then max(y, 0) if relu; one task per image."""
    n_img, n_in = x.shape
    for n in prange(n_img):
        y[n] = b
        for i in range(n_in):
            xv = x[n, i]
            for o in range(y.shape[1]):
                y[n, o] += xv * wt[i, o]
        if relu:
            for o in range(y.shape[1]):
                y[n, o] = max(y[n, o], 0)


def dense_backward(dy, x, wt, dx, dwt, db):
    """dy (N,O), x (N,I), wt (I,O) -> dx (N,I) = dy @ wt.T, dwt (I,O) = x.T @ dy, db (O,).

    dx is summed over o with the batch innermost (acc[n]), again an axpy."""
    n_img, n_out = dy.shape
    n_in = x.shape[1]
    dyt = np.ascontiguousarray(dy.T)                                     # O,N
    for i in prange(n_in):
        acc = np.zeros(n_img, np.float32)
        dwt[i] = 0
        for o in range(n_out):
            wv = wt[i, o]
            for n in range(n_img):
                acc[n] += wv * dyt[o, n]
        for n in range(n_img):
            dx[n, i] = acc[n]
            xv = x[n, i]
            for o in range(n_out):
                dwt[i, o] += xv * dy[n, o]
    db[:] = 0
    for n in range(n_img):
        for o in range(n_out):
            db[o] += dy[n, o]


def relu_backward(d, a):
    """d (N,F) *= (a > 0), where a is the ReLU output."""
    for n in prange(d.shape[0]):
        for f in range(d.shape[1]):
            if a[n, f] <= 0:
                d[n, f] = 0


def softmax_cross_entropy(logits, y, dlogits):
    """logits (N,10), y (N,) -> mean cross-entropy; dlogits (N,10) its gradient."""
    n_img, n_cls = logits.shape
    total = 0.0
    for n in range(n_img):
        m = logits[n].max()
        s = np.float32(0)
        for k in range(n_cls):
            dlogits[n, k] = np.exp(logits[n, k] - m)
            s += dlogits[n, k]
        total += np.log(s) - (logits[n, y[n]] - m)
        for k in range(n_cls):
            dlogits[n, k] = dlogits[n, k] / s / n_img
        dlogits[n, y[n]] -= np.float32(1.0 / n_img)
    return total / n_img


def sgd(p, g, lr):
    """p -= lr * g over the flat parameter buffer."""
    lr32 = np.float32(lr)
    for t in prange(p.size):
        p[t] -= lr32 * g[t]


_KERNELS = (conv_forward, conv_backward_data, conv_backward_weight, maxpool_forward,
            maxpool_backward, dense_forward, dense_backward, relu_backward, sgd)
par = {f.__name__: njit(parallel=True, cache=True)(f) for f in _KERNELS}
par["softmax_cross_entropy"] = njit(cache=True)(softmax_cross_entropy)
_conv, _pool, _dense = (njit(f) for f in (conv_forward, maxpool_forward, dense_forward))


@njit(cache=True)
def forward_single(x, w1, b1, w2, b2, w3t, b3, w4t, b4, c1, p1, c2, p2, h, logits):
    """The whole forward of one image, serial: x (1,1,28,28) -> logits (1,10); c1..h scratch."""
    _conv(x, w1, b1, c1)                                                # 1,20,24,24
    _pool(c1, p1)                                                       # 1,20,12,12
    _conv(p1, w2, b2, c2)                                               # 1,50,8,8
    _pool(c2, p2)                                                       # 1,50,4,4
    _dense(p2.reshape(1, -1), w3t, b3, h, True)                         # 1,500
    _dense(h, w4t, b4, logits, False)                                   # 1,10
