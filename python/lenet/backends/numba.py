"""numba backend: LeNet kernels written in Python and compiled by Numba, on cpu and gpu.

cpu: @njit loops, split over cores with prange (_numba_cpu.py); variant "1thread" runs a single
image on one thread (no thread-pool hand-off, steadier p90 on a busy machine).
gpu: @cuda.jit kernels, one per layer, and a fused single-image forward (_numba_cuda.py).
Each variant name belongs to one device (VARIANT_DEVICES).
Parameters (and gradients) live in one flat float32 buffer each, in canonical order with the
dense weights transposed to [in, out]; SGD is one kernel over the buffer. On gpu both buffers
stay on the device. create() compiles every kernel by running it once on scratch data, so
timings never include JIT; cpu kernels are also cached on disk (NUMBA_CACHE_DIR if set).
"""
from __future__ import annotations

import importlib.util
import warnings

import numpy as np

from ..errors import UnavailableError
from ..model import FILTER_SIZE, IMAGE_SHAPE, PARAM_NAMES
from ..net import Net
from . import _device_timing, cuda_unavailable, first_line

LAYER = "raw kernels"
DEVICES = ("cpu", "gpu")
VARIANTS = {
    "prange": "cpu: one njit kernel per layer, prange-parallel over the cores (im2col convolutions)",
    "1thread": "cpu: the prange kernels on one thread for a single image (no thread-pool hand-off); "
               "batches and training as prange",
    "fused": "gpu: a single image's forward in one cuda.jit launch (one block, activations in shared "
             "memory); batches and training as per-layer",
    "per-layer": "gpu: one cuda.jit launch per layer",
}
VARIANT_DEVICES = {"prange": ("cpu",), "1thread": ("cpu",), "fused": ("gpu",), "per-layer": ("gpu",)}
DEFAULT_VARIANT = {"cpu": "prange", "gpu": "fused"}  # cpu: measured in bench/results/cpu-2core; gpu: by design
SOURCES = ("python/lenet/backends/numba.py", "python/lenet/backends/_numba_cpu.py",
           "python/lenet/backends/_numba_cuda.py")


def unavailable(device: str) -> str | None:
    if device == "gpu" and (reason := cuda_unavailable()):
        return reason
    if importlib.util.find_spec("numba") is None:
        return "numba not installed (pip install numba)"
    return None


def create(device: str, params: dict, variant: str | None = None) -> Net:
    reason = unavailable(device)
    if reason:
        raise UnavailableError(f"numba on {device}: {reason}")
    variant = variant or DEFAULT_VARIANT[device]
    return (CpuNet if device == "cpu" else GpuNet)(params, variant)


# --- parameters and activations, shared by both devices --------------------------------

def _is_dense(name: str) -> bool:
    return name.startswith("fc") and name.endswith(".weight")


def pack(params: dict) -> np.ndarray:
    """Canonical params -> one flat float32 buffer, dense weights transposed to [in, out]."""
    return np.concatenate([np.asarray(params[k], np.float32).T.ravel() if _is_dense(k) else
                           np.asarray(params[k], np.float32).ravel() for k in PARAM_NAMES])


def views(flat, shapes: dict) -> dict:
    """Named views into a flat buffer (numpy or device array); shapes are canonical."""
    out, at = {}, 0
    for k in PARAM_NAMES:
        shape = shapes[k][::-1] if _is_dense(k) else shapes[k]
        size = int(np.prod(shape))
        out[k] = flat[at:at + size].reshape(shape)
        at += size
    return out


def unpack(flat: np.ndarray, shapes: dict) -> dict:
    return {k: np.ascontiguousarray(v.T if _is_dense(k) else v, dtype=np.float32)
            for k, v in views(flat, shapes).items()}


def activation_shapes(shapes: dict, n: int) -> dict:
    """Per-layer activation shapes for a batch of n images (channel counts read from shapes)."""
    c1, c2, k = shapes["conv1.weight"][0], shapes["conv2.weight"][0], shapes["conv1.weight"][2]
    h1 = IMAGE_SHAPE[1] - k + 1
    h2 = h1 // 2 - k + 1
    a = {"conv1": (n, c1, h1, h1), "pool1": (n, c1, h1 // 2, h1 // 2), "conv2": (n, c2, h2, h2),
         "pool2": (n, c2, h2 // 2, h2 // 2), "fc1": (n, shapes["fc1.weight"][0]),
         "logits": (n, shapes["fc2.weight"][0])}
    return a | {"d" + name: shape for name, shape in a.items()}     # and their gradients


class _Numba(Net):
    backend = "numba"

    def __init__(self, params: dict, variant: str):
        self.variant = variant
        self.shapes = {k: tuple(np.shape(params[k])) for k in PARAM_NAMES}
        self._acts = {}

    def parameters(self):
        return unpack(self.download(self.flat), self.shapes)


# --- cpu --------------------------------------------------------------------------------

def _pix(a: np.ndarray) -> np.ndarray:
    """Activations (N,C,H,W) -> (N,C,H*W) view, as the im2col conv kernels take them."""
    return a.reshape(a.shape[0], a.shape[1], -1)


def _mat(w: np.ndarray) -> np.ndarray:
    """Conv weights (O,C,K,K) -> (O,C*K*K) view."""
    return w.reshape(w.shape[0], -1)


class CpuNet(_Numba):
    device = "cpu"

    def __init__(self, params: dict, variant: str):
        super().__init__(params, variant)
        import numba

        from . import _numba_cpu
        self.numba, self.k = numba, _numba_cpu.par
        self.flat = pack(params)
        self.grad = np.zeros_like(self.flat)
        self.p, self.g = views(self.flat, self.shapes), views(self.grad, self.shapes)
        x = np.zeros((2, 1, 28, 28), np.float32)                  # compile (or load) every kernel
        self.forward(x[:1]), self._gradients(x, np.zeros(2, np.int32))
        self.k["sgd"](self.flat.copy(), self.grad, 0.05)

    def upload(self, x):
        """Read-only arrays are copied: numba would compile a second version of every kernel."""
        return x if x.flags.writeable else x.copy()

    def acts(self, n: int, train: bool = False) -> dict:
        """Buffers for a batch of n: activations and im2col columns (n, C*K*K, OH*OW); when
        training also the gradients and the im2row rows (n, OH*OW, C*K*K)."""
        if (n, train) not in self._acts:
            shapes = activation_shapes(self.shapes, n)
            c0, c1, k = self.shapes["conv1.weight"][1], self.shapes["conv2.weight"][1], FILTER_SIZE
            shapes["cols1"] = (n, c0 * k * k, shapes["conv1"][2] * shapes["conv1"][3])
            shapes["cols2"] = (n, c1 * k * k, shapes["conv2"][2] * shapes["conv2"][3])
            shapes["rows1"], shapes["rows2"] = (n, *shapes["cols1"][:0:-1]), (n, *shapes["cols2"][:0:-1])
            self._acts[n, train] = {name: np.empty(s, np.float32) for name, s in shapes.items()
                                    if train or not name.startswith(("d", "rows"))}
        return self._acts[n, train]

    def forward(self, x):
        a = self.acts(len(x))
        if self.variant == "1thread" and len(x) == 1:     # one image: no thread-pool hand-off
            threads = self.numba.get_num_threads()
            self.numba.set_num_threads(1)
            try:
                self._layers(x, a)
            finally:
                self.numba.set_num_threads(threads)
        else:
            self._layers(x, a)
        return a["logits"].copy()

    def _layers(self, x, a):
        k, p, n = self.k, self.p, len(x)
        k["im2col"](x, FILTER_SIZE, a["cols1"])                                      # N,25,576
        k["conv_forward"](a["cols1"], _mat(p["conv1.weight"]), p["conv1.bias"], _pix(a["conv1"]))  # N,20,24,24
        k["maxpool_forward"](a["conv1"], a["pool1"])                                   # N,20,12,12
        k["im2col"](a["pool1"], FILTER_SIZE, a["cols2"])                             # N,500,64
        k["conv_forward"](a["cols2"], _mat(p["conv2.weight"]), p["conv2.bias"], _pix(a["conv2"]))  # N,50,8,8
        k["maxpool_forward"](a["conv2"], a["pool2"])                                   # N,50,4,4
        k["dense_forward"](a["pool2"].reshape(n, -1), p["fc1.weight"], p["fc1.bias"], a["fc1"], True)
        k["dense_forward"](a["fc1"], p["fc2.weight"], p["fc2.bias"], a["logits"], False)

    def _gradients(self, x, y) -> float:
        """Forward and backward of the batch; gradients into self.g. Returns the mean loss."""
        k, p, g, a, n = self.k, self.p, self.g, self.acts(len(x), train=True), len(x)
        self._layers(x, a)
        loss = k["softmax_cross_entropy"](a["logits"], y, a["dlogits"])
        k["dense_backward"](a["dlogits"], a["fc1"], p["fc2.weight"], a["dfc1"], g["fc2.weight"], g["fc2.bias"])
        k["relu_backward"](a["dfc1"], a["fc1"])
        k["dense_backward"](a["dfc1"], a["pool2"].reshape(n, -1), p["fc1.weight"],
                            a["dpool2"].reshape(n, -1), g["fc1.weight"], g["fc1.bias"])
        k["maxpool_backward"](a["dpool2"], a["conv2"], a["dconv2"])
        k["im2row"](a["pool1"], FILTER_SIZE, a["rows2"])
        k["conv_backward_weight"](_pix(a["dconv2"]), a["rows2"], _mat(g["conv2.weight"]), g["conv2.bias"])
        k["conv_backward_data"](_pix(a["dconv2"]), _mat(p["conv2.weight"]), FILTER_SIZE, a["dpool1"])
        k["maxpool_backward"](a["dpool1"], a["conv1"], a["dconv1"])
        k["im2row"](x, FILTER_SIZE, a["rows1"])
        k["conv_backward_weight"](_pix(a["dconv1"]), a["rows1"], _mat(g["conv1.weight"]), g["conv1.bias"])
        return loss

    def _train_step(self, x, y, lr):
        loss = self._gradients(self.upload(x), self.upload(y))
        self.k["sgd"](self.flat, self.grad, lr)
        return loss


# --- gpu --------------------------------------------------------------------------------

class GpuNet(_Numba):
    device = "gpu"

    def __init__(self, params: dict, variant: str):
        super().__init__(params, variant)
        # small grids are the point at batch 1 (the fused kernel is one block): no warning per launch
        warnings.filterwarnings("ignore", message="Grid size .* will likely result in GPU under-utilization")
        try:
            from numba import cuda
            from . import _numba_cuda
            self.cuda, self.k = cuda, _numba_cuda
            self.flat = cuda.to_device(pack(params))
            self.grad = cuda.device_array_like(self.flat)
            self.p, self.g = views(self.flat, self.shapes), views(self.grad, self.shapes)
            x = np.zeros((2, 1, 28, 28), np.float32)              # compile every kernel
            self.download(self.forward(self.upload(x[:1])))
            self._gradients(self.upload(x), self.upload(np.zeros(2, np.int32)))
            self.k.launch(self.k.sgd, self.flat.size, cuda.device_array_like(self.flat), self.grad, np.float32(0.05))
            self.synchronize()
        except Exception as exc:      # no usable CUDA driver, toolkit or NVVM for numba: one line
            raise UnavailableError(f"numba on gpu: {type(exc).__name__}: {first_line(exc)}".rstrip(": ")) from exc

    def acts(self, n: int) -> dict:
        if n not in self._acts:
            self._acts[n] = {k: self.cuda.device_array(s, np.float32)
                             for k, s in activation_shapes(self.shapes, n).items()} | {
                             "losses": self.cuda.device_array(n, np.float32)}
        return self._acts[n]

    def upload(self, x):
        return self.cuda.to_device(x)

    def download(self, out):
        return out.copy_to_host()

    def synchronize(self):
        self.cuda.synchronize()

    def forward(self, x):
        """x device (N,1,28,28) -> logits device (N,10), asynchronous."""
        p, a = self.p, self.acts(x.shape[0])
        if self._fused(x.shape[0]):
            self.k.forward_fused[1, self.k.FUSED_THREADS](
                x, p["conv1.weight"], p["conv1.bias"], p["conv2.weight"], p["conv2.bias"],
                p["fc1.weight"], p["fc1.bias"], p["fc2.weight"], p["fc2.bias"], a["logits"])
        else:
            self._layers(x, a)
        return a["logits"]

    def _fused(self, n: int) -> bool:
        return self.variant == "fused" and n == 1

    def _layers(self, x, a, launch=None):
        """The per-layer forward; `launch(kernel, threads, *args)` defaults to launching now."""
        k, p, n, launch = self.k, self.p, x.shape[0], launch or self.k.launch
        launch(k.conv_forward, a["conv1"].size, x, p["conv1.weight"], p["conv1.bias"], a["conv1"])
        launch(k.maxpool_forward, a["pool1"].size, a["conv1"], a["pool1"])
        launch(k.conv_forward, a["conv2"].size, a["pool1"], p["conv2.weight"], p["conv2.bias"], a["conv2"])
        launch(k.maxpool_forward, a["pool2"].size, a["conv2"], a["pool2"])
        launch(k.dense_forward, a["fc1"].size, a["pool2"].reshape(n, -1), p["fc1.weight"], p["fc1.bias"], a["fc1"], True)
        launch(k.dense_forward, a["logits"].size, a["fc1"], p["fc2.weight"], p["fc2.bias"], a["logits"], False)

    def _gradients(self, x, y):
        """Forward and backward on the device; gradients into self.g. Returns per-image losses (device)."""
        k, p, g, a, n = self.k, self.p, self.g, self.acts(x.shape[0]), x.shape[0]
        flat2, bias4 = (lambda v: v.reshape(n, -1)), (lambda v: v.reshape(v.shape[0], v.shape[1], 1, 1))
        self._layers(x, a)
        k.launch(k.softmax_cross_entropy, n, a["logits"], y, a["dlogits"], a["losses"])
        k.launch(k.dense_backward_weight, g["fc2.weight"].size, a["dlogits"], a["fc1"], g["fc2.weight"])
        k.launch(k.bias_backward, g["fc2.bias"].size, bias4(a["dlogits"]), g["fc2.bias"])
        k.launch(k.dense_backward_data, a["dfc1"].size, a["dlogits"], p["fc2.weight"], a["fc1"], a["dfc1"], True)
        k.launch(k.dense_backward_weight, g["fc1.weight"].size, a["dfc1"], flat2(a["pool2"]), g["fc1.weight"])
        k.launch(k.bias_backward, g["fc1.bias"].size, bias4(a["dfc1"]), g["fc1.bias"])
        k.launch(k.dense_backward_data, a["dpool2"].size, a["dfc1"], p["fc1.weight"], a["dfc1"],
                 flat2(a["dpool2"]), False)                               # no ReLU: mask unused
        k.launch(k.maxpool_backward, a["dpool2"].size, a["dpool2"], a["conv2"], a["dconv2"])
        k.launch(k.conv_backward_weight, g["conv2.weight"].size, a["dconv2"], a["pool1"], g["conv2.weight"])
        k.launch(k.bias_backward, g["conv2.bias"].size, a["dconv2"], g["conv2.bias"])
        k.launch(k.conv_backward_data, a["dpool1"].size, a["dconv2"], p["conv2.weight"], a["dpool1"])
        k.launch(k.maxpool_backward, a["dpool1"].size, a["dpool1"], a["conv1"], a["dconv1"])
        k.launch(k.conv_backward_weight, g["conv1.weight"].size, a["dconv1"], x, g["conv1.weight"])
        k.launch(k.bias_backward, g["conv1.bias"].size, a["dconv1"], g["conv1.bias"])
        return a["losses"]

    def _train_step(self, x, y, lr):
        losses = self._gradients(self.upload(x), self.upload(y))
        self.k.launch(self.k.sgd, self.flat.size, self.flat, self.grad, np.float32(lr))
        return float(losses.copy_to_host().astype(np.float64).mean())

    def device_times_us(self, x, repeats):
        """Events around the forward as enqueued; kernel-only: the same for the fused kernel, else
        the summed events around each per-layer launch (_device_timing)."""
        d_x = self.upload(x)
        self.forward(d_x), self.hold(1000)                  # compiled before anything is timed
        forward = _device_timing.forward_us(self, lambda: self.forward(d_x), repeats)
        if self._fused(len(x)):
            return {"forward": forward, "kernels": forward}
        launches = []
        self._layers(d_x, self.acts(len(x)), lambda *args: launches.append(lambda: self.k.launch(*args)))
        return {"forward": forward, "kernels": _device_timing.kernels_us(self, launches, repeats)}

    # the timer of _device_timing, on numba's default stream
    def event(self):
        return self.cuda.event(timing=True)

    def record(self, event):
        event.record()

    def elapsed_ms(self, start, end):
        end.synchronize()
        return self.cuda.event_elapsed_time(start, end)

    def hold(self, ns):
        self.k.hold[1, 1](max(1, ns // 1000))
