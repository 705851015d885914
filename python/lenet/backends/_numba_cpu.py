"""The numba net on the CPU: the @njit kernels of _numba_cpu_kernels.py called layer by layer.

Variant "prange" splits every layer over the cores; "1thread" runs a single image on the calling
thread alone (numba's thread count is thread-local: set to 1 around that call and restored), and
batches and training as "prange". Activation buffers (and the im2col columns) are kept per batch
size; every call holds the net's lock (_numba_net). Construction compiles every kernel, or loads
it from numba's disk cache (NUMBA_CACHE_DIR if set), by running it once on zeros.
"""
from __future__ import annotations

import numpy as np

from ..layers import by_layer, stack, timed_calls
from ..model import FILTER_SIZE, IMAGE_SHAPE
from ._numba_net import NumbaNet, activation_shapes, pack, views


def _pixels(a: np.ndarray) -> np.ndarray:
    """Activations (N,C,H,W) -> (N,C,H*W) view, as the im2col conv kernels take them."""
    return a.reshape(a.shape[0], a.shape[1], -1)


def _matrix(w: np.ndarray) -> np.ndarray:
    """Conv weights (O,C,K,K) -> (O,C*K*K) view."""
    return w.reshape(w.shape[0], -1)


class CpuNet(NumbaNet):
    layers_method = "timed calls of the same kernels (the kernel table swapped)"
    device = "cpu"

    def __init__(self, params: dict, variant: str):
        super().__init__(params, variant)
        import numba

        from ._numba_cpu_kernels import KERNELS
        self.numba, self.kernels = numba, KERNELS
        self.flat_params = pack(params)
        self.flat_grads = np.zeros_like(self.flat_params)
        self.weights, self.grads = views(self.flat_params, self.shapes), views(self.flat_grads, self.shapes)
        x = np.zeros((2, *IMAGE_SHAPE), np.float32)                    # compile (or load) every kernel
        self.forward(x[:1])
        self._gradients(x, np.zeros(len(x), np.int32))
        self.kernels["sgd"](self.flat_params.copy(), self.flat_grads, 0.05)

    def upload(self, x):
        """Read-only arrays are copied: numba would compile a second version of every kernel."""
        return x if x.flags.writeable else x.copy()

    def activations(self, n: int, train: bool = False) -> dict:
        """Buffers for a batch of n: activations and im2col columns (n, C*K*K, OH*OW); when
        training also the gradients and the im2row rows (n, OH*OW, C*K*K)."""
        if (n, train) not in self.buffers:
            shapes, k = activation_shapes(self.shapes, n), FILTER_SIZE
            c0, c1 = self.shapes["conv1.weight"][1], self.shapes["conv2.weight"][1]
            shapes["cols1"] = (n, c0 * k * k, shapes["conv1"][2] * shapes["conv1"][3])
            shapes["cols2"] = (n, c1 * k * k, shapes["conv2"][2] * shapes["conv2"][3])
            shapes["rows1"], shapes["rows2"] = (n, *shapes["cols1"][:0:-1]), (n, *shapes["cols2"][:0:-1])
            self.buffers[n, train] = {name: np.empty(s, np.float32) for name, s in shapes.items()
                                      if train or not name.startswith(("d", "rows"))}
        return self.buffers[n, train]

    def forward(self, x):
        with self.lock:
            a = self.activations(len(x))
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

    def layer_times_us(self, x, repeats):
        """The forward with its kernel table swapped for timed calls of the same kernels (the timed
        path calls them directly): a layer is the sum of its kernels (a conv: im2col + the GEMM)."""
        with self.lock:
            kernels, calls, forwards = self.kernels, [], []
            self.kernels = timed_calls(kernels, calls)
            try:
                for _ in range(repeats):
                    calls.clear()
                    self.forward(x)
                    forwards.append(by_layer(calls))
            finally:
                self.kernels = kernels
        return stack(forwards)

    def _layers(self, x, a):
        k, w, n = self.kernels, self.weights, len(x)
        k["im2col"](x, FILTER_SIZE, a["cols1"])                                                   # N,25,576
        k["conv_forward"](a["cols1"], _matrix(w["conv1.weight"]), w["conv1.bias"], _pixels(a["conv1"]))  # N,20,24,24
        k["maxpool_forward"](a["conv1"], a["pool1"])                                                # N,20,12,12
        k["im2col"](a["pool1"], FILTER_SIZE, a["cols2"])                                          # N,500,64
        k["conv_forward"](a["cols2"], _matrix(w["conv2.weight"]), w["conv2.bias"], _pixels(a["conv2"]))  # N,50,8,8
        k["maxpool_forward"](a["conv2"], a["pool2"])                                                # N,50,4,4
        k["dense_forward"](a["pool2"].reshape(n, -1), w["fc1.weight"], w["fc1.bias"], a["fc1"], True)
        k["dense_forward"](a["fc1"], w["fc2.weight"], w["fc2.bias"], a["logits"], False)

    def _gradients(self, x, y) -> float:
        """Forward and backward of the batch; gradients into self.grads. Returns the mean loss."""
        k, w, g, n = self.kernels, self.weights, self.grads, len(x)
        a = self.activations(n, train=True)
        self._layers(x, a)
        loss = k["softmax_cross_entropy"](a["logits"], y, a["dlogits"])
        k["dense_backward"](a["dlogits"], a["fc1"], w["fc2.weight"], a["dfc1"], g["fc2.weight"], g["fc2.bias"])
        k["relu_backward"](a["dfc1"], a["fc1"])
        k["dense_backward"](a["dfc1"], a["pool2"].reshape(n, -1), w["fc1.weight"],
                            a["dpool2"].reshape(n, -1), g["fc1.weight"], g["fc1.bias"])
        k["maxpool_backward"](a["dpool2"], a["conv2"], a["dconv2"])
        k["im2row"](a["pool1"], FILTER_SIZE, a["rows2"])
        k["conv_backward_weight"](_pixels(a["dconv2"]), a["rows2"], _matrix(g["conv2.weight"]), g["conv2.bias"])
        k["conv_backward_data"](_pixels(a["dconv2"]), _matrix(w["conv2.weight"]), FILTER_SIZE, a["dpool1"])
        k["maxpool_backward"](a["dpool1"], a["conv1"], a["dconv1"])
        k["im2row"](x, FILTER_SIZE, a["rows1"])
        k["conv_backward_weight"](_pixels(a["dconv1"]), a["rows1"], _matrix(g["conv1.weight"]), g["conv1.bias"])
        return loss

    def _train_step(self, x, y, lr):
        with self.lock:
            loss = self._gradients(self.upload(x), self.upload(y))
            self.kernels["sgd"](self.flat_params, self.flat_grads, lr)
            return loss
