"""Numba CPU kernels for LeNet: plain loops compiled by @njit, batches split over cores by prange.

Every inner loop runs along a contiguous row as an axpy (y[:] += a * x[:]), so LLVM vectorises
it without fastmath: no reduction is reassociated, the sums are formed in a fixed order.
Shapes per batch of N images, NCHW. Convolutions go through im2col: cols (N, C*K*K, OH*OW),
weights as (O, C*K*K), outputs as (N, O, OH*OW), each a view of the NCHW/OIHW array; the
weight gradient uses the transpose, rows (N, OH*OW, C*K*K), so it too is an axpy. Dense
weights are kept transposed, wt [in, out], so their forward pass is an axpy over outputs.
A fused single-image forward (one serial njit call) measured slower than these kernels
called one by one, parallel even at batch 1 (120-135 vs 100-110 us), so there is none.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange


def im2col(x, k, cols):
    """x (N,C,H,W) -> cols (N,C*k*k,OH*OW): cols[n, (c,i,j), (r,s)] = x[n, c, r+i, s+j]."""
    n_img, n_in, h, w = x.shape
    oh, ow = h - k + 1, w - k + 1
    for t in prange(n_img * n_in):
        n, c = t // n_in, t % n_in
        for i in range(k):
            for j in range(k):
                q = (c * k + i) * k + j
                for r in range(oh):
                    for s in range(ow):
                        cols[n, q, r * ow + s] = x[n, c, r + i, s + j]


def conv_forward(cols, w, b, y):
    """cols (N,Q,P), w (O,Q) (= OIHW flattened), b (O,) -> y (N,O,P) = w @ cols[n] + b.
    One task per (image, block of 5 output channels); the 5 rows of y are summed in acc."""
    n_img, n_out, n_pix = y.shape
    blocks = n_out // 5                                                  # LeNet: 20 and 50
    for t in prange(n_img * blocks):
        n, o = t // blocks, 5 * (t % blocks)
        acc = np.empty((5, n_pix), np.float32)
        for d in range(5):
            acc[d] = b[o + d]
        for q in range(w.shape[1]):
            w0, w1, w2, w3, w4 = w[o, q], w[o + 1, q], w[o + 2, q], w[o + 3, q], w[o + 4, q]
            for p in range(n_pix):
                c = cols[n, q, p]
                acc[0, p] += w0 * c
                acc[1, p] += w1 * c
                acc[2, p] += w2 * c
                acc[3, p] += w3 * c
                acc[4, p] += w4 * c
        for d in range(5):
            y[n, o + d] = acc[d]


def im2row(x, k, rows):
    """x (N,C,H,W) -> rows (N,OH*OW,C*k*k): the transpose of im2col, for the weight gradient."""
    n_img, n_in, h, w = x.shape
    oh, ow = h - k + 1, w - k + 1
    for t in prange(n_img * oh):
        n, r = t // oh, t % oh
        for s in range(ow):
            for c in range(n_in):
                for i in range(k):
                    for j in range(k):
                        rows[n, r * ow + s, (c * k + i) * k + j] = x[n, c, r + i, s + j]


def conv_backward_weight(dy, rows, dw, db):
    """dy (N,O,P), rows (N,P,Q) -> dw (O,Q) = sum_n dy[n] @ rows[n], db (O,); one task per block
    of 5 output channels, whose 5 rows of dw are summed in acc (an axpy over Q)."""
    n_img, n_out, n_pix = dy.shape
    for t in prange(n_out // 5):
        o = 5 * t
        acc = np.zeros((5, dw.shape[1]), np.float32)
        for n in range(n_img):
            for p in range(n_pix):
                g0, g1, g2, g3, g4 = dy[n, o, p], dy[n, o + 1, p], dy[n, o + 2, p], dy[n, o + 3, p], dy[n, o + 4, p]
                for q in range(dw.shape[1]):
                    v = rows[n, p, q]
                    acc[0, q] += g0 * v
                    acc[1, q] += g1 * v
                    acc[2, q] += g2 * v
                    acc[3, q] += g3 * v
                    acc[4, q] += g4 * v
        for d in range(5):
            dw[o + d] = acc[d]
            db[o + d] = dy[:, o + d].sum()


def conv_backward_data(dy, w, k, dx):
    """dy (N,O,P), w (O,Q) -> dx (N,C,H,W): the column gradient w.T @ dy[n], 5 rows q at a time
    in acc, scattered back onto the image (col2im); one task per image."""
    n_img, n_out, n_pix = dy.shape
    ow = dx.shape[3] - k + 1
    oh = n_pix // ow
    for n in prange(n_img):
        acc = np.empty((5, n_pix), np.float32)
        dx[n] = 0
        for q in range(0, w.shape[1], 5):
            acc[:] = 0
            for o in range(n_out):
                w0, w1, w2, w3, w4 = w[o, q], w[o, q + 1], w[o, q + 2], w[o, q + 3], w[o, q + 4]
                for p in range(n_pix):
                    g = dy[n, o, p]
                    acc[0, p] += w0 * g
                    acc[1, p] += w1 * g
                    acc[2, p] += w2 * g
                    acc[3, p] += w3 * g
                    acc[4, p] += w4 * g
            for d in range(5):
                c, i, j = (q + d) // (k * k), ((q + d) // k) % k, (q + d) % k
                for r in range(oh):
                    for s in range(ow):
                        dx[n, c, r + i, s + j] += acc[d, r * ow + s]


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
    window in row-major order (strict >), zero elsewhere."""
    n_img, n_ch, ph, pw = dy.shape
    for t in prange(n_img * n_ch):
        n, c = t // n_ch, t % n_ch
        for r in range(ph):
            for s in range(pw):
                a0, a1 = x[n, c, 2 * r, 2 * s], x[n, c, 2 * r, 2 * s + 1]
                a2, a3 = x[n, c, 2 * r + 1, 2 * s], x[n, c, 2 * r + 1, 2 * s + 1]
                best, m = 0, a0
                if a1 > m:
                    best, m = 1, a1
                if a2 > m:
                    best, m = 2, a2
                if a3 > m:
                    best = 3
                g, z = dy[n, c, r, s], np.float32(0)
                dx[n, c, 2 * r, 2 * s] = g if best == 0 else z
                dx[n, c, 2 * r, 2 * s + 1] = g if best == 1 else z
                dx[n, c, 2 * r + 1, 2 * s] = g if best == 2 else z
                dx[n, c, 2 * r + 1, 2 * s + 1] = g if best == 3 else z


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


_PARALLEL = (im2col, im2row, conv_forward, conv_backward_data, conv_backward_weight, maxpool_forward,
             maxpool_backward, dense_forward, dense_backward, relu_backward, sgd)
KERNELS = {f.__name__: njit(parallel=True, cache=True)(f) for f in _PARALLEL}     # name -> compiled kernel
KERNELS["softmax_cross_entropy"] = njit(cache=True)(softmax_cross_entropy)
