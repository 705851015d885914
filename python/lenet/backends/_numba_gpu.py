"""The numba net on a CUDA GPU: the @cuda.jit kernels of _numba_gpu_kernels.py.

Variant "fused" runs a single image's forward as one launch of `forward_fused`; batches and
training use the per-layer kernels, as variant "per-layer" does throughout. Parameters,
gradients and activations stay on the device; `forward` is asynchronous on numba's default
stream and returns the net's own logits buffer, so `predict` and `train_step` hold the net's
lock (_numba_net) from upload to download. Construction compiles every kernel by running it
once on zeros, so no timing includes JIT. Device times come from CUDA events (_device_timing).
"""
from __future__ import annotations

import warnings

import numpy as np

from ..errors import UnavailableError
from ..model import IMAGE_SHAPE
from . import _device_timing, first_line
from ._numba_net import NumbaNet, activation_shapes, pack, views


def numpy_aliases_for_numba_cuda() -> None:
    """numba-cuda 0.30.4 registers an overload of np.row_stack when numba.cuda first imports; NumPy
    2.5 removed that alias of np.vstack (deprecated since 2.0), so the import fails there (seen on
    the lent H100's image: NumPy 2.5.2). Restore the alias for numba-cuda only where NumPy lacks it."""
    if not hasattr(np, "row_stack"):
        np.row_stack = np.vstack


class GpuNet(NumbaNet):
    layers_method = "CUDA events around each kernel launch"
    device = "gpu"

    def __init__(self, params: dict, variant: str):
        super().__init__(params, variant)
        # small grids are the point at batch 1 (the fused kernel is one block): no warning per launch
        warnings.filterwarnings("ignore", message="Grid size .* will likely result in GPU under-utilization")
        try:
            numpy_aliases_for_numba_cuda()
            from numba import cuda

            from . import _numba_gpu_kernels
            self.cuda, self.kernels = cuda, _numba_gpu_kernels
            self.flat_params = cuda.to_device(pack(params))
            self.flat_grads = cuda.to_device(np.zeros(self.flat_params.size, np.float32))
            self.weights, self.grads = views(self.flat_params, self.shapes), views(self.flat_grads, self.shapes)
            x = np.zeros((2, *IMAGE_SHAPE), np.float32)               # compile every kernel
            self.download(self.forward(self.upload(x[:1])))
            self._gradients(self.upload(x), self.upload(np.zeros(len(x), np.int32)))
            # SGD compiled on an initialised scratch copy: compute-sanitizer's initcheck on an H100 reported
            # this launch's reads of an uninitialised one (device_array_like), 862 160 times
            scratch = cuda.to_device(np.zeros(self.flat_params.size, np.float32))
            self.kernels.launch(self.kernels.sgd, self.flat_params.size, scratch, self.flat_grads, np.float32(0.05))
            self.synchronize()
        except Exception as exc:      # no usable CUDA driver, toolkit or NVVM for numba: one line
            raise UnavailableError(f"numba on gpu: {type(exc).__name__}: {first_line(exc)}".rstrip(": ")) from exc

    def activations(self, n: int) -> dict:
        """Device buffers for a batch of n: activations, their gradients, per-image losses."""
        if n not in self.buffers:
            self.buffers[n] = {k: self.cuda.device_array(s, np.float32)
                               for k, s in activation_shapes(self.shapes, n).items()} | {
                               "losses": self.cuda.device_array(n, np.float32)}
        return self.buffers[n]

    def predict(self, x):
        with self.lock:
            return super().predict(x)

    def upload(self, x):
        return self.cuda.to_device(x)

    def download(self, out):
        return out.copy_to_host()

    def synchronize(self):
        self.cuda.synchronize()

    def forward(self, x):
        """x device (N,1,28,28) -> logits device (N,10), asynchronous."""
        k, w, a = self.kernels, self.weights, self.activations(x.shape[0])
        if self._fused(x.shape[0]):
            k.forward_fused[1, k.FUSED_THREADS](
                x, w["conv1.weight"], w["conv1.bias"], w["conv2.weight"], w["conv2.bias"],
                w["fc1.weight"], w["fc1.bias"], w["fc2.weight"], w["fc2.bias"], a["logits"])
        else:
            self._layers(x, a)
        return a["logits"]

    def _fused(self, n: int) -> bool:
        return self.variant == "fused" and n == 1

    def _layers(self, x, a, launch=None):
        """The per-layer forward; `launch(kernel, threads, *args)` defaults to launching now."""
        k, w, n, launch = self.kernels, self.weights, x.shape[0], launch or self.kernels.launch
        launch(k.conv_forward, a["conv1"].size, x, w["conv1.weight"], w["conv1.bias"], a["conv1"])
        launch(k.maxpool_forward, a["pool1"].size, a["conv1"], a["pool1"])
        launch(k.conv_forward, a["conv2"].size, a["pool1"], w["conv2.weight"], w["conv2.bias"], a["conv2"])
        launch(k.maxpool_forward, a["pool2"].size, a["conv2"], a["pool2"])
        launch(k.dense_forward, a["fc1"].size, a["pool2"].reshape(n, -1), w["fc1.weight"], w["fc1.bias"], a["fc1"], True)
        launch(k.dense_forward, a["logits"].size, a["fc1"], w["fc2.weight"], w["fc2.bias"], a["logits"], False)

    def _gradients(self, x, y):
        """Forward and backward on the device; gradients into self.grads. Returns per-image losses (device)."""
        k, w, g, n = self.kernels, self.weights, self.grads, x.shape[0]
        a = self.activations(n)
        flat2, bias4 = (lambda v: v.reshape(n, -1)), (lambda v: v.reshape(v.shape[0], v.shape[1], 1, 1))
        self._layers(x, a)
        k.launch(k.softmax_cross_entropy, n, a["logits"], y, a["dlogits"], a["losses"])
        k.launch(k.dense_backward_weight, g["fc2.weight"].size, a["dlogits"], a["fc1"], g["fc2.weight"])
        k.launch(k.bias_backward, g["fc2.bias"].size, bias4(a["dlogits"]), g["fc2.bias"])
        k.launch(k.dense_backward_data, a["dfc1"].size, a["dlogits"], w["fc2.weight"], a["fc1"], a["dfc1"], True)
        k.launch(k.dense_backward_weight, g["fc1.weight"].size, a["dfc1"], flat2(a["pool2"]), g["fc1.weight"])
        k.launch(k.bias_backward, g["fc1.bias"].size, bias4(a["dfc1"]), g["fc1.bias"])
        k.launch(k.dense_backward_data, a["dpool2"].size, a["dfc1"], w["fc1.weight"], a["dfc1"],
                 flat2(a["dpool2"]), False)                               # no ReLU: mask unused
        k.launch(k.maxpool_backward, a["dpool2"].size, a["dpool2"], a["conv2"], a["dconv2"])
        k.launch(k.conv_backward_weight, g["conv2.weight"].size, a["dconv2"], a["pool1"], g["conv2.weight"])
        k.launch(k.bias_backward, g["conv2.bias"].size, a["dconv2"], g["conv2.bias"])
        k.launch(k.conv_backward_data, a["dpool1"].size, a["dconv2"], w["conv2.weight"], a["dpool1"])
        k.launch(k.maxpool_backward, a["dpool1"].size, a["dpool1"], a["conv1"], a["dconv1"])
        k.launch(k.conv_backward_weight, g["conv1.weight"].size, a["dconv1"], x, g["conv1.weight"])
        k.launch(k.bias_backward, g["conv1.bias"].size, a["dconv1"], g["conv1.bias"])
        return a["losses"]

    def _train_step(self, x, y, lr):
        with self.lock:
            losses = self._gradients(self.upload(x), self.upload(y))
            self.kernels.launch(self.kernels.sgd, self.flat_params.size, self.flat_params, self.flat_grads,
                                np.float32(lr))
            return float(losses.copy_to_host().astype(np.float64).mean())

    def device_times_us(self, x, repeats):
        """Events around the forward as enqueued; kernel-only: the same for the fused kernel, else
        the summed events around each per-layer launch (_device_timing)."""
        with self.lock:
            d_x = self.upload(x)
            self.forward(d_x)                           # compiled before anything is timed
            self.hold(1000)
            forward = _device_timing.forward_us(self, lambda: self.forward(d_x), repeats)
            if self._fused(len(x)):
                return {"forward": forward, "kernels": forward}
            launches = []
            self._layers(d_x, self.activations(len(x)), lambda *args: launches.append(lambda: self.kernels.launch(*args)))
            return {"forward": forward, "kernels": _device_timing.kernels_us(self, launches, repeats)}

    def layer_times_us(self, x, repeats):
        """Each layer's kernels from the event pairs around each per-layer launch (fused: one group).
        Ran on an H100 (bench/results/h100/)."""
        with self.lock:
            d_x = self.upload(x)
            self.forward(d_x)
            self.hold(1000)
            if self._fused(len(x)):
                return _device_timing.layer_times_us(self, [lambda: self.forward(d_x)], ["forward_fused"], repeats)
            calls = []                                          # (kernel, threads, *args) per launch
            self._layers(d_x, self.activations(len(x)), lambda *args: calls.append(args))
            return _device_timing.layer_times_us(self, [lambda c=c: self.kernels.launch(*c) for c in calls],
                                                 [c[0].py_func.__name__ for c in calls], repeats)

    # the timer of _device_timing, on numba's default stream
    def event(self):
        return self.cuda.event(timing=True)

    def record(self, event):
        event.record()

    def elapsed_ms(self, start, end):
        end.synchronize()
        return self.cuda.event_elapsed_time(start, end)

    def hold(self, ns):
        self.kernels.hold[1, 1](max(1, int(ns)))
