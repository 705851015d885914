"""The network object every backend returns from `lenet.load`."""
from __future__ import annotations

import numpy as np

from . import _fork
from .errors import TrainingError, UnavailableError
from .inputs import check_images, check_labels, check_lr
from .model import LEARNING_RATE


class Net:
    """What `lenet.load` returns. Subclasses implement `forward`, `_train_step`, `parameters`,
    and, on a device, `upload`/`download`/`synchronize`.

    Timing split (docs/architecture.md): predict(x) == download(forward(upload(x))); `download`
    waits for the result. `device_times_us` gives CUDA-event times of the forward on a GPU.
    Optional, with working defaults: `train_epoch` (a backend with its own epoch loop, e.g.
    Keras `fit`) and `describe` (what the backend chose: algorithms, plans).
    """

    backend: str = ""
    device: str = "cpu"
    variant: str | None = None
    layers_method: str = ""            # how layer_times_us measures, one phrase for the report
    handoffs_us: list[float] | None = None   # the last layer_times_us's hand-offs, where it records them (cblas)
    row_splits: int | None = None            # of its forwards, how many split one image by rows (cblas)
    cuts: list[int] | None = None            # where one image was cut between two threads before them (cblas)
    runtime: str | None = None         # what it runs on that backend and variant do not say ("Keras on jax")

    @property
    def fork_safe(self) -> bool:
        """Whether a fork() child may use this net (lenet._fork); a backend whose thread pools
        do not survive fork() says False."""
        return self.device == "cpu"

    def predict(self, x: np.ndarray) -> np.ndarray:
        """(N, 1, 28, 28) float32 host images -> (N, 10) float32 host logits."""
        if _fork.refused:                       # only ever in a fork() child
            _fork.check(self.backend, self.variant)
        return self.download(self.forward(self.upload(check_images(x))))

    def train_step(self, x: np.ndarray, y: np.ndarray, lr: float = LEARNING_RATE) -> float:
        """One plain SGD step on mean softmax cross-entropy, in place; returns the batch loss."""
        if _fork.refused:                       # only ever in a fork() child
            _fork.check(self.backend, self.variant)
        x = check_images(x)
        return float(self._train_step(x, check_labels(y, len(x)), check_lr(lr)))

    def parameters(self) -> dict[str, np.ndarray]:
        """Current parameters, canonical names, layouts and float32."""
        raise NotImplementedError

    # timing split; the CPU defaults are identities
    def upload(self, x: np.ndarray):
        return x

    def forward(self, x):
        raise NotImplementedError

    def download(self, out) -> np.ndarray:
        return np.asarray(out, dtype=np.float32)

    def synchronize(self) -> None:
        pass

    def device_times_us(self, x: np.ndarray, repeats: int) -> dict[str, list[float]] | None:
        """`repeats` CUDA-event timings (µs) of the forward of the already validated images `x`,
        upload and download excluded, keyed by what they measure (the same for every GPU backend):
          "forward"  device time of the forward as `forward()` enqueues it: an event before the
                     first launch to one after the last, so the host's launch gaps count;
          "kernels"  kernel-only time: a replay of the same launches as one CUDA graph, or the
                     sum of per-kernel events (one fused kernel: the same as "forward").
        None where there is no device to time."""
        return None

    def layer_times_us(self, x: np.ndarray, repeats: int) -> dict[str, list[float]] | None:
        """`repeats` wall times (µs) of each layer of a single-image forward of the already validated
        image `x` (1, 1, 28, 28), keyed by `lenet.model`'s layer names in forward order; layers the
        backend runs fused are one key naming them all ("conv1+pool1"). A profiled run, apart from
        the timed ones. None where the backend has no per-layer instrumentation."""
        return None

    def train_epoch(self, x: np.ndarray, y: np.ndarray, lr: float, batch_size: int, order: np.ndarray,
                    progress=None) -> float:
        """One epoch of SGD steps over the samples in `order`, `batch_size` at a time; the mean
        batch loss. `progress`, if given, is updated with the number of images done. A loss that
        is NaN or infinite stops it with a TrainingError naming the batch."""
        losses = []
        for start in range(0, len(x), batch_size):
            idx = order[start:start + batch_size]
            with np.errstate(all="ignore"):      # divergence is reported below, not as NumPy warnings
                losses.append(self.train_step(np.ascontiguousarray(x[idx]), y[idx], lr))
            if not np.isfinite(losses[-1]):
                raise TrainingError(f"the loss is {losses[-1]} at batch {len(losses)} of "
                                    f"{-(-len(x) // batch_size)} (lower the learning rate)")
            if progress is not None:
                progress.update(len(idx))
        return float(np.mean(losses))

    def describe(self) -> str:
        """What this backend chose at load time (algorithms, plans), or "" when nothing."""
        return ""

    def _train_step(self, x: np.ndarray, y: np.ndarray, lr: float) -> float:
        raise UnavailableError(f"{self.backend} does not train")

    def __repr__(self) -> str:
        variant = f", variant={self.variant!r}" if self.variant else ""
        return f"<lenet {self.backend} on {self.device}{variant}>"
