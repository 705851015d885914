"""TensorFlow backend: LeNet in raw TF ops (tf.nn.conv2d, tf.nn.max_pool2d, tf.matmul, ...)
inside tf.functions with fixed input signatures (batch dimension None: traced once), trained
with tf.GradientTape and the reference's plain SGD. TF32 is off. Variant "eager" runs the same
ops one by one: beside Keras's model(x) it splits Keras's cost from TensorFlow's (docs/layers.md).

Layouts: activations NHWC on cpu (the only one TF's own CPU pooling takes; oneDNN, which TF turns
on only on CPUs with VNNI, BF16 or AMX, takes both), NCHW on gpu (cuDNN's float32 fast path);
filters HWIO; dense weights [in, out]. The canonical <-> TF conversion is _frameworks.to_tf /
from_tf (shared with Keras); TensorFlow is imported by _frameworks.import_tf (TF32 off, GPU memory
growth on).

No device_times_us: TensorFlow has no public CUDA events, and a tf.function's launches cannot be
bracketed from Python, so there is nothing honest to report beyond the host-to-host latency.
"""
from __future__ import annotations

import numpy as np

from ..model import ACTIVATION_SHAPES, IMAGE_SHAPE, POOL
from ..net import Net
from ._frameworks import from_tf, gpu_unavailable, import_tf, not_installed, to_tf

TIER = "framework"
DEVICES = ("cpu", "gpu")
VARIANTS = {
    "graph": "tf.function graph of raw tf.nn ops (TF's default executor)",
    "xla": "the same tf.functions with jit_compile=True (XLA)",
    "eager": "the same raw tf.nn ops run op by op, no tf.function: what Keras's model(x) runs below Keras",
}
SOURCES = ("python/lenet/backends/tensorflow.py", "python/lenet/backends/_frameworks.py")

_FLAT = int(np.prod(ACTIVATION_SHAPES["pool2"]))   # 800: what fc1 flattens


def unavailable(device: str) -> str | None:
    return gpu_unavailable("tensorflow") if device == "gpu" else not_installed("tensorflow")


def create(device: str, params: dict, variant: str | None = "graph") -> "TFNet":
    return TFNet(device, params, variant or "graph")


# --- the network ----------------------------------------------------------------------

class TFNet(Net):
    backend = "tensorflow"
    fork_safe = False                   # its thread pools do not survive fork() (docs/using.md)

    def __init__(self, device: str, params: dict, variant: str = "graph", layout: str | None = None):
        tf = self.tf = import_tf()
        self.device, self.variant = device, variant
        self.layout = layout or ("NCHW" if device == "gpu" else "NHWC")
        self._where = "/GPU:0" if device == "gpu" else "/CPU:0"
        self.layers_method = "TensorFlow's profiler: " + {"xla": "XLA ops", "eager": "eager kernels"}.get(
            variant, "executor kernels")
        c, h, w = IMAGE_SHAPE
        self._image = (c, h, w) if self.layout == "NCHW" else (h, w, c)
        with tf.device(self._where):
            self.vars = {n: tf.Variable(a, name=n) for n, a in to_tf(params, self.layout).items()}
        if variant == "eager":
            self._forward, self._step = self._logits, self._sgd_step
            return
        images = tf.TensorSpec([None, *self._image], tf.float32)
        jit = variant == "xla"
        self._forward = tf.function(self._logits, input_signature=[images], jit_compile=jit)
        self._step = tf.function(self._sgd_step, jit_compile=jit, input_signature=[
            images, tf.TensorSpec([None], tf.int32), tf.TensorSpec([], tf.float32)])

    def _logits(self, x):
        """x (N,28,28,1) NHWC or (N,1,28,28) NCHW -> logits (N,10)."""
        tf, v, fmt = self.tf, self.vars, self.layout
        with tf.device(self._where):
            def conv(x, name):
                y = tf.nn.conv2d(x, v[name + ".weight"], 1, "VALID", data_format=fmt)
                return tf.nn.bias_add(y, v[name + ".bias"], data_format=fmt)

            def pool(x):
                return tf.nn.max_pool2d(x, POOL, POOL, "VALID", data_format=fmt)

            x = pool(conv(x, "conv1"))                      # N,12,12,20 | N,20,12,12
            x = pool(conv(x, "conv2"))                      # N,4,4,50 | N,50,4,4
            x = tf.reshape(x, [-1, _FLAT])           # N,800 in to_tf's fc1 input order
            x = tf.nn.relu(tf.nn.bias_add(tf.matmul(x, v["fc1.weight"]), v["fc1.bias"]))  # N,500
            return tf.nn.bias_add(tf.matmul(x, v["fc2.weight"]), v["fc2.bias"])          # N,10

    def layer_times_us(self, x: np.ndarray, repeats: int) -> dict[str, list[float]] | None:
        """TensorFlow's profiler: each layer's kernels as the executor ran them (graph: oneDNN's fused
        conv+bias and matmul+bias+ReLU kernels; xla: XLA's compiled ops). GPU: None (not read)."""
        if self.device != "cpu":
            return None
        from ._profilers import tf_layer_times
        staged = self.upload(x)
        return tf_layer_times(self.tf, lambda: self.forward(staged).numpy(), repeats)

    def _sgd_step(self, x, y, lr):
        tf = self.tf
        with tf.GradientTape() as tape:
            losses = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=self._logits(x))
            loss = tf.reduce_mean(losses)
        variables = list(self.vars.values())
        for var, grad in zip(variables, tape.gradient(loss, variables)):
            var.assign_sub(lr * grad)
        return loss

    # timing split: upload copies to the device (GPU) or wraps (CPU); download waits
    def upload(self, x: np.ndarray):
        with self.tf.device(self._where):
            return self.tf.identity(x.reshape(len(x), *self._image))  # C = 1: NCHW -> NHWC is a reshape

    def forward(self, x):
        return self._forward(x)

    def download(self, out) -> np.ndarray:
        return out.numpy()

    def synchronize(self) -> None:
        if self.device == "gpu":
            self.tf.test.experimental.sync_devices()

    def _train_step(self, x, y, lr):
        with self.tf.device(self._where):
            labels = self.tf.constant(y)
        return self._step(self.upload(x), labels, self.tf.constant(lr, self.tf.float32)).numpy()

    def parameters(self) -> dict[str, np.ndarray]:
        return from_tf({n: v.numpy() for n, v in self.vars.items()}, self.layout)
