"""What the cupy and pycuda backends share: the .cu sources, the kernel versions, ALL launch
geometry, and the forward / training launch sequences, written once as plain data.

A sequence is a list of `Launch(kernel, grid, block, args)` whose pointer arguments are
`Buf(name, offset)` references (offset in elements) into named device buffers. A launcher
(cupy.py, pycuda.py) only compiles the sources, allocates buffers, binds a sequence once
(kernel handles and argument tuples resolved ahead of time) and replays it: no per-call
allocation and no per-call argument building in the hot path.

Parameters and their gradients each live in one flat device buffer (every tensor aligned to
256 bytes, so fused.cu can read fc1 rows as float4), and one sgd_update launch updates them all.
"""
from __future__ import annotations

from math import ceil, prod
from pathlib import Path
from typing import NamedTuple

import numpy as np

from ..errors import UnavailableError
from ..model import PARAM_SHAPES
from ..net import Net

KERNEL_DIR = Path(__file__).resolve().parent.parent / "kernels"
KERNEL_FILES = {            # file -> the extern "C" kernels the sequences below launch from it
    "conv.cu": ("conv_forward_v1", "conv_forward_v2", "conv_backward_data_v1",
                "conv_backward_filter_v1", "conv_backward_filter_v2"),
    "pool.cu": ("maxpool_forward", "maxpool_backward"),
    "dense.cu": ("dense_forward_v1", "dense_backward_data_v1", "dense_backward_weight_v1",
                 "gemm_v2", "bias_backward"),
    "loss.cu": ("softmax_xent",),
    "sgd.cu": ("sgd_update",),
    "fused.cu": ("lenet_forward_v3",),
}
FILE_OF = {k: f for f, names in KERNEL_FILES.items() for k in names}
SOURCES = tuple(f"python/lenet/kernels/{f}" for f in KERNEL_FILES) + ("python/lenet/backends/_cuda_kernels.py",)
VERSIONS = {
    "3": "fused: whole forward in one launch, 8-CTA cluster per image (sm_90); trains with v2",
    "2": "tiled: shared-memory conv, one tiled GEMM for the dense layers",
    "1": "simple: one thread per output element, one kernel per layer",
}
FUSED_MIN_CC = (9, 0)       # thread block clusters


def source(file: str) -> str:
    return (KERNEL_DIR / file).read_text()


# --- parameters: one flat buffer -------------------------------------------------------
ALIGN = 64                  # floats: every tensor starts on a 256-byte boundary


def _layout():
    offsets, at = {}, 0
    for name, shape in PARAM_SHAPES.items():
        offsets[name] = at
        at += ceil(prod(shape) / ALIGN) * ALIGN
    return offsets, at


PARAM_OFFSETS, PARAM_FLOATS = _layout()


def flatten(params: dict) -> np.ndarray:
    flat = np.zeros(PARAM_FLOATS, np.float32)
    for name, shape in PARAM_SHAPES.items():
        flat[PARAM_OFFSETS[name]:PARAM_OFFSETS[name] + prod(shape)] = np.asarray(params[name], np.float32).ravel()
    return flat


def unflatten(flat: np.ndarray) -> dict[str, np.ndarray]:
    return {name: flat[PARAM_OFFSETS[name]:PARAM_OFFSETS[name] + prod(shape)].reshape(shape).copy()
            for name, shape in PARAM_SHAPES.items()}


# --- launch records ---------------------------------------------------------------------
class Buf(NamedTuple):
    name: str
    offset: int = 0


class Launch(NamedTuple):
    kernel: str
    grid: tuple
    block: tuple
    args: tuple


def P(name):                # a parameter tensor
    return Buf("params", PARAM_OFFSETS[name])


def G(name):                # its gradient
    return Buf("grads", PARAM_OFFSETS[name])


# per-image element counts of the activation buffers the sequences use (labels are int32)
PER_IMAGE = {"x": 784, "c1": 11520, "p1": 2880, "c2": 3200, "p2": 800, "h": 500, "z": 10,
             "labels": 1, "dz": 10, "dh": 500, "dp2": 800, "dc2": 3200, "dp1": 2880, "dc1": 11520}
FIXED = ("params", "grads", "loss")       # allocated once, whatever the batch size

T = 256                     # threads per block of the 1-D kernels
CONV_OT = 10                # conv.cu: output channels per conv_forward_v2 block
TILE = 16                   # dense.cu: gemm_v2 tile
LOSS_THREADS = 256          # loss.cu: one block, a power of two
BIAS_THREADS = 256          # dense.cu: bias_backward block
CLUSTER, FUSED_THREADS = 8, 1024   # fused.cu
i32, f32 = np.int32, np.float32


def _grid(total):
    return (ceil(total / T), 1, 1), (T, 1, 1)


def _gemm(A, B, C, bias, mask, M, N, K, sam, sak, sbk, sbn, flags):
    """C[M, N] = A[M, K] B[K, N], A and B given by element strides; flags 1 bias, 2 ReLU, 4 mask."""
    return Launch("gemm_v2", (ceil(N / TILE), ceil(M / TILE), 1), (TILE, TILE, 1),
                  (A, B, C, bias, mask, i32(M), i32(N), i32(K), i32(sam), i32(sak), i32(sbk), i32(sbn), i32(flags)))


# --- one layer each: forward -------------------------------------------------------------
def conv_forward(v, x, w, b, y, n, C, H, O):
    """x (n, C, H, H) -> y (n, O, H-4, H-4)."""
    args = (x, w, b, y, i32(n), i32(C), i32(H), i32(H), i32(O))
    if v == "1":
        return Launch("conv_forward_v1", *_grid(n * O * (H - 4) ** 2), args)
    return Launch("conv_forward_v2", (n, O // CONV_OT, 1), (ceil((H - 4) ** 2 / 32) * 32, 1, 1), args)


def maxpool_forward(x, y, nc, H):
    """x (nc, H, H) -> y (nc, H/2, H/2)."""
    return Launch("maxpool_forward", *_grid(nc * (H // 2) ** 2), (x, y, i32(nc), i32(H), i32(H)))


def dense_forward(v, x, w, b, y, n, IN, OUT, relu):
    """x (n, IN), w (OUT, IN) -> y (n, OUT), ReLU if relu."""
    if v == "1":
        return Launch("dense_forward_v1", *_grid(n * OUT), (x, w, b, y, i32(n), i32(IN), i32(OUT), i32(relu)))
    return _gemm(x, w, y, b, y, n, OUT, IN, IN, 1, 1, IN, 1 | (2 if relu else 0))


def fused_forward(x, z, n):
    """x (n, 1, 28, 28) -> z (n, 10), one launch."""
    return Launch("lenet_forward_v3", (CLUSTER * n, 1, 1), (FUSED_THREADS, 1, 1),
                  (x, P("conv1.weight"), P("conv1.bias"), P("conv2.weight"), P("conv2.bias"),
                   P("fc1.weight"), P("fc1.bias"), P("fc2.weight"), P("fc2.bias"), z))


# --- one layer each: backward ------------------------------------------------------------
def softmax_xent(z, labels, dz, loss, n):
    return Launch("softmax_xent", (1, 1, 1), (LOSS_THREADS, 1, 1), (z, labels, dz, loss, i32(n)))


def bias_backward(dy, db, n, O, P_):
    return Launch("bias_backward", (O, 1, 1), (BIAS_THREADS, 1, 1), (dy, db, i32(n), i32(O), i32(P_)))


def dense_backward(v, dy, x, w, dx, dw, db, n, IN, OUT, mask=None):
    """dy (n, OUT) -> dw (OUT, IN), db (OUT), and dx (n, IN) (times mask > 0) unless dx is None."""
    if v == "1":
        out = [Launch("dense_backward_weight_v1", *_grid(OUT * IN), (dy, x, dw, i32(n), i32(IN), i32(OUT)))]
        if dx is not None:
            out.append(Launch("dense_backward_data_v1", *_grid(n * IN),
                              (dy, w, dx if mask is None else mask, dx, i32(n), i32(IN), i32(OUT), i32(mask is not None))))
    else:
        out = [_gemm(dy, x, dw, dw, dw, OUT, IN, n, 1, OUT, IN, 1, 0)]          # dw = dy^T x
        if dx is not None:                                                    # dx = dy w
            out.append(_gemm(dy, w, dx, dx, dx if mask is None else mask, n, IN, OUT, OUT, 1, IN, 1, 0 if mask is None else 4))
    return out + [bias_backward(dy, db, n, OUT, 1)]


def maxpool_backward(dy, x, dx, nc, H):
    return Launch("maxpool_backward", *_grid(nc * (H // 2) ** 2), (dy, x, dx, i32(nc), i32(H), i32(H)))


def conv_backward(v, dy, x, w, dx, dw, db, n, C, H, O):
    """dy (n, O, H-4, H-4) -> dw (O, C, 5, 5), db (O), and dx (n, C, H, H) unless dx is None."""
    args = (dy, x, dw, i32(n), i32(C), i32(H), i32(H), i32(O))
    out = [Launch("conv_backward_filter_v1", *_grid(O * C * 25), args) if v == "1" else
           Launch("conv_backward_filter_v2", (C, O, 1), (T, 1, 1), args),
           bias_backward(dy, db, n, O, (H - 4) ** 2)]
    if dx is not None:
        out.append(Launch("conv_backward_data_v1", *_grid(n * C * H * H), (dy, w, dx, i32(n), i32(C), i32(H), i32(H), i32(O))))
    return out


def sgd(params, grads, lr, count):
    return Launch("sgd_update", (min(ceil(count / T), 1024), 1, 1), (T, 1, 1), (params, grads, f32(lr), i32(count)))


# --- the network ---------------------------------------------------------------------------
def forward(v, n):
    """Launches of one forward pass of kernel version v at batch n: Buf('x') -> Buf('z')."""
    if v == "3":
        return [fused_forward(Buf("x"), Buf("z"), n)]
    b = Buf
    return [conv_forward(v, b("x"), P("conv1.weight"), P("conv1.bias"), b("c1"), n, 1, 28, 20),   # n,20,24,24
            maxpool_forward(b("c1"), b("p1"), n * 20, 24),                                       # n,20,12,12
            conv_forward(v, b("p1"), P("conv2.weight"), P("conv2.bias"), b("c2"), n, 20, 12, 50), # n,50,8,8
            maxpool_forward(b("c2"), b("p2"), n * 50, 8),                                         # n,800
            dense_forward(v, b("p2"), P("fc1.weight"), P("fc1.bias"), b("h"), n, 800, 500, True), # n,500
            dense_forward(v, b("h"), P("fc2.weight"), P("fc2.bias"), b("z"), n, 500, 10, False)]  # n,10


def train_step(v, n, lr):
    """Forward, loss, backward and SGD of version v (v3 is forward-only: it trains with v2)."""
    v = "2" if v == "3" else v
    b = Buf
    return (forward(v, n)
            + [softmax_xent(b("z"), b("labels"), b("dz"), b("loss"), n)]
            + dense_backward(v, b("dz"), b("h"), P("fc2.weight"), b("dh"), G("fc2.weight"), G("fc2.bias"), n, 500, 10, mask=b("h"))
            + dense_backward(v, b("dh"), b("p2"), P("fc1.weight"), b("dp2"), G("fc1.weight"), G("fc1.bias"), n, 800, 500)
            + [maxpool_backward(b("dp2"), b("c2"), b("dc2"), n * 50, 8)]
            + conv_backward(v, b("dc2"), b("p1"), P("conv2.weight"), b("dp1"), G("conv2.weight"), G("conv2.bias"), n, 20, 12, 50)
            + [maxpool_backward(b("dp1"), b("c1"), b("dc1"), n * 20, 24)]
            + conv_backward(v, b("dc1"), b("x"), P("conv1.weight"), None, G("conv1.weight"), G("conv1.bias"), n, 1, 28, 20)
            + [sgd(b("params"), b("grads"), lr, PARAM_FLOATS)])


def bind(gpu, launches, bufs):
    """Resolve kernel handles and pointer arguments once: a list the launcher replays."""
    return [gpu.bind(gpu.function(FILE_OF[l.kernel], l.kernel), l.grid, l.block,
                     tuple(gpu.pointer(bufs[a.name], a.offset) if isinstance(a, Buf) else a for a in l.args))
            for l in launches]


class DeviceBatch(NamedTuple):
    """A batch of n images (upload) or logits (forward) sitting in the network's device buffers."""
    n: int


class CudaNet(Net):
    """LeNet on the GPU through a launcher `gpu` (see cupy.py and pycuda.py for the interface).

    Device buffers are reused from call to call: a forward result stays valid until the next
    upload of the same network.
    """

    device = "gpu"

    def __init__(self, backend, gpu, params, kernel, graphs=False):
        if kernel[0] == "3" and gpu.compute_capability() < FUSED_MIN_CC:
            raise UnavailableError("kernel 3 needs compute capability %d.%d (thread block clusters), this GPU has %d.%d"
                                   % (*FUSED_MIN_CC, *gpu.compute_capability()))
        self.backend, self.gpu, self.kernel, self.version, self.graphs = backend, gpu, kernel, kernel[0], graphs
        self.bufs = {"params": gpu.to_device(flatten(params)), "grads": gpu.zeros(PARAM_FLOATS, np.float32),
                     "loss": gpu.zeros(1, np.float32)}
        self.capacity = {}              # activation buffer name -> images it holds
        self._bound = {}                # ("forward", n) | ("train", n, lr) -> bound launches or a graph

    def _sequence(self, key):
        """The bound launches for key, allocating (or growing) the buffers they name first."""
        run = self._bound.get(key)
        if run is None:
            n = key[1]
            launches = forward(self.version, n) if key[0] == "forward" else train_step(self.version, n, key[2])
            for name in {a.name for l in launches for a in l.args if isinstance(a, Buf)} - set(FIXED):
                if self.capacity.get(name, 0) < n:
                    dtype = np.int32 if name == "labels" else np.float32
                    self.bufs[name] = self.gpu.empty(PER_IMAGE[name] * n, dtype)
                    self.capacity[name] = n
                    self._bound.clear()         # pointers moved: everything bound before is stale
            if key[0] == "train":               # one learning rate per batch size stays bound
                for old in [k for k in self._bound if k[:2] == key[:2]]:
                    del self._bound[old]
            run = bind(self.gpu, launches, self.bufs)
            if self.graphs and key[0] == "forward":
                run = self.gpu.capture(run)
            self._bound[key] = run
        return run

    def upload(self, x):
        n = len(x)
        self._sequence(("forward", n))      # allocates the buffers on first use
        self.gpu.upload(self.bufs["x"], x)
        return DeviceBatch(n)

    def forward(self, batch):
        self.gpu.run(self._sequence(("forward", batch.n)))
        return batch

    def download(self, batch):
        return self.gpu.download(self.bufs["z"], batch.n * 10).reshape(batch.n, 10)

    def synchronize(self):
        self.gpu.synchronize()

    def device_times_us(self, x, repeats):
        batch = self.upload(x)
        self.forward(batch)
        return self.gpu.time_us(lambda: self.forward(batch), repeats)

    def _train_step(self, x, y, lr):
        run = self._sequence(("train", len(x), lr))
        self.gpu.upload(self.bufs["x"], x)
        self.gpu.upload(self.bufs["labels"], y)
        self.gpu.run(run)
        return float(self.gpu.download(self.bufs["loss"], 1)[0])

    def parameters(self):
        return unflatten(self.gpu.download(self.bufs["params"], PARAM_FLOATS))
