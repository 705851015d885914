"""Keras backend: a keras.Sequential LeNet written the way Keras users write it, on the Keras 3
backend its variant names: "<backend>/<mode>" with backend tensorflow, jax or torch, e.g. jax/call.
Keras fixes its backend when it is first imported, so the first Keras net of a process sets
KERAS_BACKEND from its variant and imports Keras; a later one on another backend is refused in one
line (the benchmark runs each variant in a fresh process). The default variant is <the backend
KERAS_BACKEND or keras.json names>/call, so plain lenet.load("keras") keeps following KERAS_BACKEND.

Inference has three separately timed modes: model(x, training=False), the per-batch
predict_on_batch, and model.predict with its per-call overhead. Training uses train_on_batch, or
fit for a whole epoch (train_epoch), with keras.optimizers.SGD and
SparseCategoricalCrossentropy(from_logits=True); the learning rate is set before every call.

Layout: channels_last on tensorflow and jax (TF's CPU kernels and XLA want NHWC), channels_first
on torch (PyTorch's native layout; channels_last would transpose around every conv). Conv weights
are HWIO and Dense [in, out] on every backend; the canonical <-> Keras conversion is to_keras /
from_keras, on top of _frameworks.to_tf / from_tf. Each framework is imported by _frameworks (TF32
off; TF memory growth, JAX without preallocation, so frameworks can share a GPU).

No device_times_us: Keras has no CUDA events of its own (TensorFlow and JAX expose none), so only
the host-to-host latency is reported.
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import sys

import numpy as np

from .._files import read_json
from ..errors import InputError, UnavailableError
from ..model import IMAGE_SHAPE, LEARNING_RATE, PARAM_NAMES, POOL
from ..net import Net
from ..inputs import check_images, check_labels, check_lr
from . import first_line
from ._cuda_driver import cuda_unavailable
from ._frameworks import IMPORT, from_tf, gpu_unavailable, no_jax_preallocation, not_installed, to_tf

TIER = "framework"
DEVICES = ("cpu", "gpu")
SOURCES = ("python/lenet/backends/keras.py", "python/lenet/backends/_frameworks.py")

KERAS_BACKENDS = ("tensorflow", "jax", "torch")     # each is also the name of its package
MODES = {
    "call": "model(x, training=False)",
    "predict_on_batch": "model.predict_on_batch(x)",
    "predict": "model.predict(x, batch_size=len(x), verbose=0)",
}
VARIANTS = {f"{b}/{m}": f"{call} on Keras's {b} backend" for b in KERAS_BACKENDS for m, call in MODES.items()}
SPLITS = ({"title": "Where Keras's time goes", "row": ["keras", "cpu", "tensorflow/call"], "base": ["tensorflow", "cpu", "eager"],
           "text": "of Keras-on-TensorFlow's {total} µs for one image (`model(x)`, p50), {top} µs ({top_share}) is "
                   "Keras, {dispatch} µs ({dispatch_share}) TensorFlow's eager dispatch and {arithmetic} µs "
                   "({arithmetic_share}) arithmetic. Arithmetic: Keras's own eager kernels (Σ layers above); "
                   "TensorFlow's dispatch: the same ops run eagerly without Keras (tensorflow eager, {base} µs p50) "
                   "less their kernels; Keras: the rest."},)   # the report's comparisons (lenet.bench.results.Split)


def keras_backend() -> str:
    """The Keras backend in use or to be used, found as Keras finds it, without importing it:
    KERAS_BACKEND, else "backend" in $KERAS_HOME/keras.json (~/.keras), else tensorflow."""
    if "keras" in sys.modules and hasattr(sys.modules["keras"], "backend"):
        return sys.modules["keras"].backend.backend()
    if os.environ.get("KERAS_BACKEND"):
        return os.environ["KERAS_BACKEND"]
    home = os.environ.get("KERAS_HOME") or os.path.join(os.path.expanduser("~"), ".keras")
    try:
        return str(read_json(os.path.join(home, "keras.json"), InputError).get("backend", "tensorflow"))
    except (InputError, AttributeError):          # a FIFO there is not opened: it would block
        return "tensorflow"


DEFAULT_VARIANT = {d: f"{keras_backend()}/call" for d in DEVICES} if keras_backend() in KERAS_BACKENDS else {}


def unavailable(device: str) -> str | None:
    reason = not_installed("keras")
    if reason:
        return reason
    version = importlib.metadata.version("keras")
    if int(version.split(".")[0]) < 3:
        return f"keras {version} is Keras 2; Keras 3 is needed (pip install 'keras>=3')"
    name = keras_backend()
    if name not in KERAS_BACKENDS:
        return f"Keras backend {name!r} (KERAS_BACKEND or keras.json) cannot train LeNet; use tensorflow, jax or torch"
    if not any(importlib.util.find_spec(b) for b in KERAS_BACKENDS):
        return "none of its backends is installed (pip install '.[tf]', '.[torch]' or jax)"
    return cuda_unavailable() if device == "gpu" else None


def _import_keras(name: str, device: str):
    """Keras on backend `name`, its framework imported first by _frameworks; one line if it cannot
    be had here (the package, the GPU, or Keras already imported on another backend)."""
    where = f"keras on {device}: Keras backend {name}"
    no_jax_preallocation()                                     # Keras imports jax wherever it is installed
    reason = gpu_unavailable(name) if device == "gpu" else not_installed(name)
    if reason:
        raise UnavailableError(f"{where}: {reason}")
    if "keras" not in sys.modules:
        os.environ["KERAS_BACKEND"] = name                     # read once, when Keras is imported
    try:
        IMPORT[name]()
        import keras
    except UnavailableError as exc:
        raise UnavailableError(f"{where}: {exc}") from None
    except Exception as exc:
        raise UnavailableError(f"{where}: keras failed to import: {type(exc).__name__}: {first_line(exc)}") from None
    if keras.backend.backend() != name:
        raise UnavailableError(f"{where}: this process imported Keras on {keras.backend.backend()}, and Keras "
                               f"fixes its backend at import (run {name}/... in a fresh process)")
    return keras


def create(device: str, params: dict, variant: str | None = None) -> "KerasNet":
    return KerasNet(device, params, variant or DEFAULT_VARIANT.get(device) or next(iter(VARIANTS)))


# --- the model and the one place layouts change ------------------------------------

def build_model(keras, data_format: str):
    c, h, w = IMAGE_SHAPE
    layers = keras.layers
    return keras.Sequential([
        keras.Input(shape=(h, w, c) if data_format == "channels_last" else (c, h, w)),
        layers.Conv2D(20, 5, data_format=data_format, name="conv1"),            # 24x24x20
        layers.MaxPooling2D(POOL, data_format=data_format, name="pool1"),       # 12x12x20
        layers.Conv2D(50, 5, data_format=data_format, name="conv2"),            # 8x8x50
        layers.MaxPooling2D(POOL, data_format=data_format, name="pool2"),       # 4x4x50
        layers.Flatten(data_format="channels_last"),    # 800 in memory order, no transpose
        layers.Dense(500, activation="relu", name="fc1"),
        layers.Dense(10, name="fc2"),                                           # logits
    ], name="lenet")


def to_keras(params: dict, data_format: str) -> list[np.ndarray]:
    """Canonical {name: array} -> model.set_weights list (conv weights HWIO, Dense [in, out],
    fc1's inputs in the flatten order of `data_format`)."""
    arrays = to_tf(params, "NHWC" if data_format == "channels_last" else "NCHW")
    return [arrays[n] for n in PARAM_NAMES]


def from_keras(weights: list, data_format: str) -> dict[str, np.ndarray]:
    """Inverse of to_keras: model.get_weights() -> canonical float32 {name: array}."""
    return from_tf(dict(zip(PARAM_NAMES, weights)), "NHWC" if data_format == "channels_last" else "NCHW")


# --- the network ----------------------------------------------------------------------

class KerasNet(Net):
    backend = "keras"
    fork_safe = False                   # its thread pools do not survive fork() (docs/using.md)

    def __init__(self, device: str, params: dict, variant: str = "tensorflow/call"):
        self.keras_backend, self.mode = variant.split("/")
        self.runtime = f"Keras on {self.keras_backend}"
        keras = _import_keras(self.keras_backend, device)
        self.keras, self.device, self.variant = keras, device, variant
        self.layers_method = {"torch": "torch.profiler: each layer's top-level aten ops",
                             "tensorflow": "TensorFlow's profiler: " + ("eager kernels" if self.mode == "call" else
                                                                        "the traced function's kernels or XLA ops"),
                             "jax": "jax's profiler: " + ("each eager op's XLA module" if self.mode == "call" else
                                                          "the compiled step's XLA ops, by the layers their HLO names"),
                             }[self.keras_backend]
        self.data_format = "channels_first" if self.keras_backend == "torch" else "channels_last"
        # "cpu" | "gpu" name a device on every Keras backend; "cpu:0" would make Keras-on-torch
        # copy each new Parameter to "cpu:0" (a non-leaf tensor) and then train nothing
        self._where = device
        with keras.device(self._where):
            self.model = build_model(keras, self.data_format)
            self.model.compile(optimizer=keras.optimizers.SGD(learning_rate=LEARNING_RATE),
                               loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
            self.model.set_weights(to_keras(params, self.data_format))

    def _images(self, x: np.ndarray) -> np.ndarray:
        """Canonical (N,1,28,28) -> the model's input layout; C = 1 makes NHWC a reshape."""
        return x if self.data_format == "channels_first" else x.reshape(len(x), *IMAGE_SHAPE[1:], 1)

    # timing split; only "call" has device tensors between the steps, the predict modes
    # take and return host arrays, so their forward is the whole round trip
    def upload(self, x: np.ndarray):
        x = self._images(x)
        if self.mode != "call":
            return x
        with self.keras.device(self._where):
            return self.keras.ops.convert_to_tensor(x)

    def forward(self, x):
        with self.keras.device(self._where):
            if self.mode == "call":
                return self.model(x, training=False)
            if self.mode == "predict_on_batch":
                return self.model.predict_on_batch(x)
            return self.model.predict(x, batch_size=len(x), verbose=0)

    def download(self, out) -> np.ndarray:
        return np.asarray(self.keras.ops.convert_to_numpy(out), dtype=np.float32)

    def synchronize(self) -> None:
        if self.device != "gpu":
            return
        framework = IMPORT[self.keras_backend]()
        if self.keras_backend == "tensorflow":
            framework.test.experimental.sync_devices()
        elif self.keras_backend == "torch":
            framework.cuda.synchronize()
        else:
            framework.block_until_ready(framework.live_arrays())

    def layer_times_us(self, x: np.ndarray, repeats: int) -> dict[str, list[float]] | None:
        """The Keras backend's own profiler over this mode's forward: TensorFlow's (eager kernels for
        call, the traced function's kernels or XLA ops for the predict modes), torch.profiler's
        top-level aten ops, or jax's XLA ops (lenet.backends._profilers). GPU: None."""
        if self.device != "cpu":
            return None
        from ._profilers import jax_layer_times, tf_layer_times, torch_layer_times
        staged = self.upload(x)
        forward = lambda: self.download(self.forward(staged))   # noqa: E731
        if self.keras_backend == "torch":
            return torch_layer_times(forward, repeats)
        if self.keras_backend == "jax":
            return jax_layer_times(IMPORT["jax"](), forward, repeats)
        return tf_layer_times(IMPORT["tensorflow"](), forward, repeats)

    # training: the learning rate is a variable of the optimizer, assigned before each call
    def _train_step(self, x, y, lr):
        self.model.optimizer.learning_rate = lr
        with self.keras.device(self._where):
            return float(self.model.train_on_batch(self._images(x), y))

    def train_epoch(self, x, y, lr, batch_size, order, progress=None) -> float:
        """One epoch of `fit` over the samples in `order`, unshuffled; the sample-weighted mean loss."""
        x = check_images(x)
        y, lr = check_labels(y, len(x)), check_lr(lr)
        self.model.optimizer.learning_rate = lr
        with self.keras.device(self._where):
            history = self.model.fit(self._images(x)[order], y[order], batch_size=int(batch_size),
                                     epochs=1, shuffle=False, verbose=0)
        if progress is not None:
            progress.update(len(x))
        return float(history.history["loss"][-1])

    def parameters(self) -> dict[str, np.ndarray]:
        return from_keras(self.model.get_weights(), self.data_format)
