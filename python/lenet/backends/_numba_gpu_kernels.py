"""Numba CUDA kernels for LeNet, written in Python with @cuda.jit.

variant "per-layer", one kernel per layer: a 1-D grid of THREADS-thread blocks, one thread per output element
    (flat index decoded row-major), each summing its own dot product in a fixed order.
variant "fused", `forward_fused`: the whole forward pass of one image in a single launch of one block of
    FUSED_THREADS threads; conv+pool fused per pooled output, activations in shared memory.
Shapes per batch of N images, NCHW; dense weights transposed, wt [in, out], so neighbouring
threads (neighbouring outputs) read neighbouring weights. Sizes are read from the arrays, so
the kernels run on reduced channel counts too (the simulator tests).
"""
from __future__ import annotations

import math

from numba import cuda, float32

from ..model import ACTIVATION_SHAPES

THREADS = 128                 # per-layer kernels: block size
FUSED_THREADS = 512           # forward_fused: its one block
# forward_fused's shared buffers, sized for LeNet (a LeNet with fewer channels fits too)
P1_MAX, P2_MAX, H_MAX = (math.prod(ACTIVATION_SHAPES[k]) for k in ("pool1", "pool2", "fc1"))


def launch(kernel, n_threads, *args):
    """Launch a per-layer kernel with at least one thread per output element."""
    kernel[(n_threads + THREADS - 1) // THREADS, THREADS](*args)


@cuda.jit
def conv_forward(x, w, b, y):
    """x (N,C,H,W), w (O,C,K,K), b (O,) -> y (N,O,OH,OW); thread per y element."""
    t = cuda.grid(1)
    n_out, oh, ow = y.shape[1], y.shape[2], y.shape[3]
    if t >= y.size:
        return
    s, r, o, n = t % ow, (t // ow) % oh, (t // (ow * oh)) % n_out, t // (ow * oh * n_out)
    acc = b[o]
    for c in range(w.shape[1]):
        for i in range(w.shape[2]):
            for j in range(w.shape[3]):
                acc += x[n, c, r + i, s + j] * w[o, c, i, j]
    y[n, o, r, s] = acc


@cuda.jit
def conv_backward_data(dy, w, dx):
    """dy (N,O,OH,OW), w (O,C,K,K) -> dx (N,C,H,W); thread per dx element."""
    t = cuda.grid(1)
    n_in, h, wd = dx.shape[1], dx.shape[2], dx.shape[3]
    if t >= dx.size:
        return
    q, p, c, n = t % wd, (t // wd) % h, (t // (wd * h)) % n_in, t // (wd * h * n_in)
    acc = float32(0)
    for o in range(w.shape[0]):
        for i in range(w.shape[2]):
            for j in range(w.shape[3]):
                r, s = p - i, q - j
                if 0 <= r < dy.shape[2] and 0 <= s < dy.shape[3]:
                    acc += dy[n, o, r, s] * w[o, c, i, j]
    dx[n, c, p, q] = acc


@cuda.jit
def conv_backward_weight(dy, x, dw):
    """dy (N,O,OH,OW), x (N,C,H,W) -> dw (O,C,K,K); thread per dw element."""
    t = cuda.grid(1)
    n_in, k = dw.shape[1], dw.shape[2]
    if t >= dw.size:
        return
    j, i, c, o = t % k, (t // k) % k, (t // (k * k)) % n_in, t // (k * k * n_in)
    acc = float32(0)
    for n in range(dy.shape[0]):
        for r in range(dy.shape[2]):
            for s in range(dy.shape[3]):
                acc += dy[n, o, r, s] * x[n, c, r + i, s + j]
    dw[o, c, i, j] = acc


@cuda.jit
def bias_backward(dy, db):
    """dy (N,O,OH,OW) -> db (O,), sum over images and positions; thread per db element.
    Dense layers pass dy reshaped to (N,O,1,1)."""
    o = cuda.grid(1)
    if o >= db.size:
        return
    acc = float32(0)
    for n in range(dy.shape[0]):
        for r in range(dy.shape[2]):
            for s in range(dy.shape[3]):
                acc += dy[n, o, r, s]
    db[o] = acc


@cuda.jit
def maxpool_forward(x, y):
    """x (N,C,H,W) -> y (N,C,H/2,W/2), 2x2 max; thread per y element."""
    t = cuda.grid(1)
    n_ch, ph, pw = y.shape[1], y.shape[2], y.shape[3]
    if t >= y.size:
        return
    s, r, c, n = t % pw, (t // pw) % ph, (t // (pw * ph)) % n_ch, t // (pw * ph * n_ch)
    y[n, c, r, s] = max(max(x[n, c, 2 * r, 2 * s], x[n, c, 2 * r, 2 * s + 1]),
                        max(x[n, c, 2 * r + 1, 2 * s], x[n, c, 2 * r + 1, 2 * s + 1]))


@cuda.jit
def maxpool_backward(dy, x, dx):
    """dy (N,C,H/2,W/2), x (N,C,H,W) -> dx (N,C,H,W); thread per window: the gradient goes to
    the first maximum in row-major order, the other three get zero."""
    t = cuda.grid(1)
    n_ch, ph, pw = dy.shape[1], dy.shape[2], dy.shape[3]
    if t >= dy.size:
        return
    s, r, c, n = t % pw, (t // pw) % ph, (t // (pw * ph)) % n_ch, t // (pw * ph * n_ch)
    best = 0
    for d in range(1, 4):
        if x[n, c, 2 * r + d // 2, 2 * s + d % 2] > x[n, c, 2 * r + best // 2, 2 * s + best % 2]:
            best = d
    for d in range(4):
        dx[n, c, 2 * r + d // 2, 2 * s + d % 2] = dy[n, c, r, s] if d == best else float32(0)


@cuda.jit
def dense_forward(x, wt, b, y, relu):
    """x (N,I), wt (I,O), b (O,) -> y (N,O) = x @ wt + b, ReLU if relu; thread per y element."""
    t = cuda.grid(1)
    if t >= y.size:
        return
    n, o = t // y.shape[1], t % y.shape[1]
    acc = b[o]
    for i in range(x.shape[1]):
        acc += x[n, i] * wt[i, o]
    y[n, o] = max(acc, float32(0)) if relu else acc


@cuda.jit
def dense_backward_data(dy, wt, a, dx, relu):
    """dy (N,O), wt (I,O) -> dx (N,I) = dy @ wt.T; if relu, zeroed where a <= 0 (a (N,I): the
    ReLU output the gradient flows back through); thread per dx element."""
    t = cuda.grid(1)
    if t >= dx.size:
        return
    n, i = t // dx.shape[1], t % dx.shape[1]
    acc = float32(0)
    for o in range(dy.shape[1]):
        acc += dy[n, o] * wt[i, o]
    dx[n, i] = float32(0) if relu and a[n, i] <= 0 else acc


@cuda.jit
def dense_backward_weight(dy, x, dwt):
    """dy (N,O), x (N,I) -> dwt (I,O) = x.T @ dy; thread per dwt element."""
    t = cuda.grid(1)
    if t >= dwt.size:
        return
    i, o = t // dwt.shape[1], t % dwt.shape[1]
    acc = float32(0)
    for n in range(dy.shape[0]):
        acc += x[n, i] * dy[n, o]
    dwt[i, o] = acc


@cuda.jit
def softmax_cross_entropy(logits, y, dlogits, losses):
    """logits (N,10), y (N,) -> losses (N,) per image, dlogits (N,10) gradient of their mean;
    thread per image."""
    n = cuda.grid(1)
    if n >= logits.shape[0]:
        return
    m = logits[n, 0]
    for k in range(1, logits.shape[1]):
        m = max(m, logits[n, k])
    s = float32(0)
    for k in range(logits.shape[1]):
        s += math.exp(logits[n, k] - m)
    losses[n] = math.log(s) - (logits[n, y[n]] - m)
    inv_n = float32(1) / float32(logits.shape[0])
    for k in range(logits.shape[1]):
        dlogits[n, k] = (math.exp(logits[n, k] - m) / s - (float32(1) if k == y[n] else float32(0))) * inv_n


@cuda.jit
def sgd(p, g, lr):
    """p -= lr * g over the flat parameter buffer (lr float32); thread per element."""
    t = cuda.grid(1)
    if t < p.size:
        p[t] -= lr * g[t]


@cuda.jit
def hold(ns):
    """Keep the stream busy for about `ns` nanoseconds, in 1 us sleeps (kernel-only timing,
    _device_timing)."""
    for _ in range((ns + 999) // 1000):
        cuda.nanosleep(1000)


@cuda.jit
def forward_fused(x, w1, b1, w2, b2, w3t, b3, w4t, b4, logits):
    """x (1,1,28,28) -> logits (1,10) in one block. Each thread computes whole pooled
    outputs (max of the 2x2 conv outputs, bias included); p1, p2, h live in shared memory.
    conv1 and conv2 are two loops on purpose: one loop over both (generic-layout views of x and
    p1) would change this timed kernel in ways only a GPU can measure, and a device function
    needs a driver to compile."""
    tid, nt = cuda.threadIdx.x, cuda.blockDim.x
    p1 = cuda.shared.array(P1_MAX, float32)          # C1*12*12, (c,h,w)
    p2 = cuda.shared.array(P2_MAX, float32)          # C2*4*4, (c,h,w) = the flatten order
    h = cuda.shared.array(H_MAX, float32)            # fc1 output after ReLU
    k = w1.shape[2]
    q1 = (x.shape[2] - k + 1) // 2                   # 12
    q2 = (q1 - k + 1) // 2                           # 4
    for t in range(tid, w1.shape[0] * q1 * q1, nt):  # conv1 + pool1
        o, r, s = t // (q1 * q1), (t // q1) % q1, t % q1
        best = float32(0)
        for d in range(4):
            acc = b1[o]
            for c in range(w1.shape[1]):
                for i in range(k):
                    for j in range(k):
                        acc += x[0, c, 2 * r + d // 2 + i, 2 * s + d % 2 + j] * w1[o, c, i, j]
            if d == 0 or acc > best:
                best = acc
        p1[t] = best
    cuda.syncthreads()
    for t in range(tid, w2.shape[0] * q2 * q2, nt):  # conv2 + pool2
        o, r, s = t // (q2 * q2), (t // q2) % q2, t % q2
        best = float32(0)
        for d in range(4):
            acc = b2[o]
            for c in range(w2.shape[1]):
                for i in range(k):
                    for j in range(k):
                        acc += p1[(c * q1 + 2 * r + d // 2 + i) * q1 + 2 * s + d % 2 + j] * w2[o, c, i, j]
            if d == 0 or acc > best:
                best = acc
        p2[t] = best
    cuda.syncthreads()
    for t in range(tid, w3t.shape[1], nt):           # fc1 + ReLU
        acc = b3[t]
        for i in range(w3t.shape[0]):
            acc += p2[i] * w3t[i, t]
        h[t] = max(acc, float32(0))
    cuda.syncthreads()
    for t in range(tid, w4t.shape[1], nt):           # fc2
        acc = b4[t]
        for i in range(w4t.shape[0]):
            acc += h[i] * w4t[i, t]
        logits[0, t] = acc
