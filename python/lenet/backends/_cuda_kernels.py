"""What the cupy and pycuda backends run, as plain data: the .cu sources, the kernel versions,
their compile-time constants, the parameter layout, ALL launch geometry, and the forward /
training launch sequences. How they run (staging, launchers, the net) is _cuda_net.py.

Compile-time constants (tile sizes, block sizes, cluster size) are defined here and given to
every .cu file as -D options (OPTIONS); sizes derive from lenet.model.

A sequence is a list of `Launch(kernel, grid, block, args)` whose pointer arguments are
`Buf(name, offset)` references (offset in elements) into named device buffers (a parameter
tensor's `Buf` also names the tensor and its size, which the emulator checks). A launcher
(cupy.py, pycuda.py, lenet.emu's EmuGPU: a `_cuda_net.Launcher`) compiles the
sources, allocates buffers, binds a sequence once (kernel handles and argument tuples resolved
ahead of time) and replays it: no per-call allocation and no per-call argument building in the
hot path.

Parameters and their gradients each live in one flat device buffer (every tensor aligned to
256 bytes, so fused.cu can read fc1 rows as float4), and one sgd_update launch updates them all.
"""
from __future__ import annotations

import enum
from math import ceil, prod
from pathlib import Path
from typing import NamedTuple

import numpy as np

from ..model import ACTIVATION_SHAPES, FILTER_SIZE, IMAGE_SHAPE, NUM_CLASSES, PARAM_SHAPES, POOL

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
    "hold.cu": ("hold_ns",),
}
FILE_OF = {k: f for f, names in KERNEL_FILES.items() for k in names}
SOURCES = tuple(f"python/lenet/kernels/{f}" for f in KERNEL_FILES) + ("python/lenet/backends/_cuda_kernels.py",
                                                                     "python/lenet/backends/_cuda_net.py")
VERSIONS = {
    "3": "fused: whole forward in one launch, 8-CTA cluster per image (sm_90); trains with v2",
    "2": "tiled: shared-memory conv, one tiled GEMM for the dense layers",
    "1": "simple: one thread per output element, one kernel per layer",
}
FUSED_MIN_CC = (9, 0)       # thread block clusters


# --- compile-time constants: defined here only; every .cu file gets them all as -D options and
# has no #define of its own for them, so a file compiled without OPTIONS does not compile
BLOCK = 256                 # threads per block of the 1-D kernels (a launch setting only)
CONV_OT = 10                # conv.cu: output channels per conv_forward_v2 block (divides 20 and 50)
TILE = 16                   # dense.cu: gemm_v2 output tile, TILE x TILE threads
BIAS_THREADS = 256          # dense.cu: the bias_backward block, a power of two
LOSS_THREADS = 256          # loss.cu: its single block, a power of two
CLUSTER = 8                 # fused.cu: CTAs per image, one thread block cluster
FUSED_THREADS = 1024        # fused.cu: threads per CTA
DEFINES = {"KSIZE": FILTER_SIZE, "CLASSES": NUM_CLASSES, "CONV_MAX_HW": IMAGE_SHAPE[1] * IMAGE_SHAPE[2],
           "CONV_OT": CONV_OT, "TILE": TILE, "BIAS_THREADS": BIAS_THREADS, "LOSS_THREADS": LOSS_THREADS,
           "CLUSTER": CLUSTER, "FUSED_THREADS": FUSED_THREADS,
           # fused.cu: the layer sizes of lenet.model
           "IMAGE_HW": IMAGE_SHAPE[1], "CONV1_OUT": PARAM_SHAPES["conv1.weight"][0],
           "CONV2_OUT": PARAM_SHAPES["conv2.weight"][0], "FC1_OUT": PARAM_SHAPES["fc1.weight"][0]}
OPTIONS = tuple(f"-D{name}={value}" for name, value in DEFINES.items())     # NVRTC and nvcc alike


def source(file: str) -> str:
    return (KERNEL_DIR / file).read_text()


# --- layer sizes, from lenet.model: (channels, side) of each conv's input and its output channels
CONV1 = (IMAGE_SHAPE[0], IMAGE_SHAPE[1], PARAM_SHAPES["conv1.weight"][0])                     # 1, 28, 20
CONV2 = (ACTIVATION_SHAPES["pool1"][0], ACTIVATION_SHAPES["pool1"][1], PARAM_SHAPES["conv2.weight"][0])   # 20, 12, 50
FC1 = PARAM_SHAPES["fc1.weight"][::-1]          # (in, out): 800, 500
FC2 = PARAM_SHAPES["fc2.weight"][::-1]          # 500, 10


def conv_out(H):
    return H - FILTER_SIZE + 1


def pooled(H):
    return H // POOL


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
    tensor: str = ""        # the one tensor of a packed buffer it points to, of `count` elements
    count: int = 0


class Launch(NamedTuple):
    kernel: str
    grid: tuple
    block: tuple
    args: tuple


def param(name):            # a parameter tensor in the flat buffer
    return Buf("params", PARAM_OFFSETS[name], name, prod(PARAM_SHAPES[name]))


def grad(name):             # its gradient
    return Buf("grads", PARAM_OFFSETS[name], name, prod(PARAM_SHAPES[name]))


# the activation buffers the sequences use -> the lenet.model layer they hold, per image
ACTIVATIONS = {"x": "input", "c1": "conv1", "p1": "pool1", "c2": "conv2", "p2": "pool2", "h": "fc1", "z": "fc2"}
PER_IMAGE = ({buf: prod(ACTIVATION_SHAPES[layer]) for buf, layer in ACTIVATIONS.items()}     # elements
             | {"d" + buf: prod(ACTIVATION_SHAPES[layer]) for buf, layer in ACTIVATIONS.items() if buf != "x"}
             | {"labels": 1})                                                                   # int32
FIXED = ("params", "grads", "loss")       # allocated once, whatever the batch size
i32, f32 = np.int32, np.float32


class Gemm(enum.IntFlag):
    """gemm_v2's epilogue (dense.cu)."""
    BIAS = 1                # add bias[n]
    RELU = 2                # then max(0, .)
    MASK = 4                # then zero where mask[m, n] <= 0 (the ReLU backward of the layer below)


def _grid(total):
    return (ceil(total / BLOCK), 1, 1), (BLOCK, 1, 1)


def _gemm(A, B, C, bias, mask, M, N, K, sam, sak, sbk, sbn, flags: Gemm):
    """C[M, N] = A[M, K] B[K, N], A and B given by element strides, then the epilogue `flags`."""
    return Launch("gemm_v2", (ceil(N / TILE), ceil(M / TILE), 1), (TILE, TILE, 1),
                  (A, B, C, bias, mask, i32(M), i32(N), i32(K), i32(sam), i32(sak), i32(sbk), i32(sbn), i32(flags)))


# --- one layer each: forward -------------------------------------------------------------
def conv_forward(v, x, w, b, y, n, C, H, O):
    """x (n, C, H, H) -> y (n, O, H-4, H-4)."""
    args = (x, w, b, y, i32(n), i32(C), i32(H), i32(H), i32(O))
    if v == "1":
        return Launch("conv_forward_v1", *_grid(n * O * conv_out(H) ** 2), args)
    return Launch("conv_forward_v2", (n, O // CONV_OT, 1), (ceil(conv_out(H) ** 2 / 32) * 32, 1, 1), args)


def maxpool_forward(x, y, nc, H):
    """x (nc, H, H) -> y (nc, H/2, H/2)."""
    return Launch("maxpool_forward", *_grid(nc * pooled(H) ** 2), (x, y, i32(nc), i32(H), i32(H)))


def dense_forward(v, x, w, b, y, n, IN, OUT, relu):
    """x (n, IN), w (OUT, IN) -> y (n, OUT), ReLU if relu."""
    if v == "1":
        return Launch("dense_forward_v1", *_grid(n * OUT), (x, w, b, y, i32(n), i32(IN), i32(OUT), i32(relu)))
    return _gemm(x, w, y, b, y, n, OUT, IN, IN, 1, 1, IN, Gemm.BIAS | (Gemm.RELU if relu else 0))


def fused_forward(x, z, n):
    """x (n, 1, 28, 28) -> z (n, 10), one launch."""
    return Launch("lenet_forward_v3", (CLUSTER * n, 1, 1), (FUSED_THREADS, 1, 1),
                  (x, param("conv1.weight"), param("conv1.bias"), param("conv2.weight"), param("conv2.bias"),
                   param("fc1.weight"), param("fc1.bias"), param("fc2.weight"), param("fc2.bias"), z))


# --- one layer each: backward ------------------------------------------------------------
def softmax_xent(z, labels, dz, loss, n):
    return Launch("softmax_xent", (1, 1, 1), (LOSS_THREADS, 1, 1), (z, labels, dz, loss, i32(n)))


def bias_backward(dy, db, n, O, pixels):
    return Launch("bias_backward", (O, 1, 1), (BIAS_THREADS, 1, 1), (dy, db, i32(n), i32(O), i32(pixels)))


def dense_backward(v, dy, x, w, dx, dw, db, n, IN, OUT, mask=None):
    """dy (n, OUT) -> dw (OUT, IN), db (OUT), and dx (n, IN) (times mask > 0) unless dx is None."""
    if v == "1":
        out = [Launch("dense_backward_weight_v1", *_grid(OUT * IN), (dy, x, dw, i32(n), i32(IN), i32(OUT)))]
        if dx is not None:
            out.append(Launch("dense_backward_data_v1", *_grid(n * IN),
                              (dy, w, dx if mask is None else mask, dx, i32(n), i32(IN), i32(OUT), i32(mask is not None))))
    else:
        out = [_gemm(dy, x, dw, dw, dw, OUT, IN, n, 1, OUT, IN, 1, Gemm(0))]    # dw = dy^T x
        if dx is not None:                                                    # dx = dy w
            out.append(_gemm(dy, w, dx, dx, dx if mask is None else mask, n, IN, OUT, OUT, 1, IN, 1,
                             Gemm(0) if mask is None else Gemm.MASK))
    return out + [bias_backward(dy, db, n, OUT, 1)]


def maxpool_backward(dy, x, dx, nc, H):
    return Launch("maxpool_backward", *_grid(nc * pooled(H) ** 2), (dy, x, dx, i32(nc), i32(H), i32(H)))


def conv_backward(v, dy, x, w, dx, dw, db, n, C, H, O):
    """dy (n, O, H-4, H-4) -> dw (O, C, 5, 5), db (O), and dx (n, C, H, H) unless dx is None."""
    args = (dy, x, dw, i32(n), i32(C), i32(H), i32(H), i32(O))
    out = [Launch("conv_backward_filter_v1", *_grid(O * C * FILTER_SIZE ** 2), args) if v == "1" else
           Launch("conv_backward_filter_v2", (C, O, 1), (BLOCK, 1, 1), args),
           bias_backward(dy, db, n, O, conv_out(H) ** 2)]
    if dx is not None:
        out.append(Launch("conv_backward_data_v1", *_grid(n * C * H * H), (dy, w, dx, i32(n), i32(C), i32(H), i32(H), i32(O))))
    return out


def sgd(params, grads, lr, count):
    return Launch("sgd_update", (min(ceil(count / BLOCK), 1024), 1, 1), (BLOCK, 1, 1), (params, grads, f32(lr), i32(count)))


# --- the network ---------------------------------------------------------------------------
def forward(v, n):
    """Launches of one forward pass of kernel version v at batch n: Buf('x') -> Buf('z')."""
    if v == "3":
        return [fused_forward(Buf("x"), Buf("z"), n)]
    b = Buf
    (C1, H1, O1), (C2, H2, O2) = CONV1, CONV2
    return [conv_forward(v, b("x"), param("conv1.weight"), param("conv1.bias"), b("c1"), n, C1, H1, O1),  # n,20,24,24
            maxpool_forward(b("c1"), b("p1"), n * O1, conv_out(H1)),                                # n,20,12,12
            conv_forward(v, b("p1"), param("conv2.weight"), param("conv2.bias"), b("c2"), n, C2, H2, O2),  # n,50,8,8
            maxpool_forward(b("c2"), b("p2"), n * O2, conv_out(H2)),                                # n,800
            dense_forward(v, b("p2"), param("fc1.weight"), param("fc1.bias"), b("h"), n, *FC1, True),   # n,500
            dense_forward(v, b("h"), param("fc2.weight"), param("fc2.bias"), b("z"), n, *FC2, False)]   # n,10


def train_step(v, n, lr):
    """Forward, loss, backward and SGD of version v (v3 is forward-only: it trains with v2)."""
    v = "2" if v == "3" else v
    b = Buf
    (C1, H1, O1), (C2, H2, O2) = CONV1, CONV2
    return (forward(v, n)
            + [softmax_xent(b("z"), b("labels"), b("dz"), b("loss"), n)]
            + dense_backward(v, b("dz"), b("h"), param("fc2.weight"), b("dh"), grad("fc2.weight"), grad("fc2.bias"), n, *FC2, mask=b("h"))
            + dense_backward(v, b("dh"), b("p2"), param("fc1.weight"), b("dp2"), grad("fc1.weight"), grad("fc1.bias"), n, *FC1)
            + [maxpool_backward(b("dp2"), b("c2"), b("dc2"), n * O2, conv_out(H2))]
            + conv_backward(v, b("dc2"), b("p1"), param("conv2.weight"), b("dp1"), grad("conv2.weight"), grad("conv2.bias"), n, C2, H2, O2)
            + [maxpool_backward(b("dp1"), b("c1"), b("dc1"), n * O1, conv_out(H1))]
            + conv_backward(v, b("dc1"), b("x"), param("conv1.weight"), None, grad("conv1.weight"), grad("conv1.bias"), n, C1, H1, O1)
            + [sgd(b("params"), b("grads"), lr, PARAM_FLOATS)])


def hold(ns):
    """hold.cu: keep the stream busy for `ns` nanoseconds (kernel-only timing)."""
    return Launch("hold_ns", (1, 1, 1), (1, 1, 1), (np.uint64(ns),))
