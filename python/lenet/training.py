"""Training and evaluation loops shared by `python -m lenet.train` and the benchmark."""
from __future__ import annotations

import numpy as np

from . import _fork, model
from .errors import InputError, TrainingError


def evaluate(net, x, y, batch_size: int = 500) -> float:
    """Fraction of `x` whose predicted class equals `y`."""
    if len(x) == 0:
        raise InputError("no test images to evaluate on (N = 0)")
    correct = sum(int((net.predict(x[i:i + batch_size]).argmax(1) == y[i:i + batch_size]).sum())
                  for i in range(0, len(x), batch_size))
    return correct / len(x)


def epoch_order(n: int, seed: int, epoch: int) -> np.ndarray:
    """The sample order of one epoch: the same for every backend given the same seed."""
    return np.random.default_rng([seed, epoch]).permutation(n)


def run_epoch(net, x, y, lr=model.LEARNING_RATE, batch_size=model.BATCH_SIZE, seed=model.SEED,
              epoch=0, progress=None) -> float:
    """One epoch of plain SGD in the seeded shuffled order of (seed, epoch), the same for every
    backend; returns the mean batch loss. No images, or a loss that diverged to NaN or infinity
    (a TrainingError naming the epoch, and the batch where the backend's loop can tell), stop it."""
    if len(x) == 0:
        raise InputError("no training images (N = 0)")
    _fork.check(net.backend, net.variant)        # before a backend's own loop (Keras's fit)
    try:
        loss = float(net.train_epoch(x, y, lr, batch_size, epoch_order(len(x), seed, epoch), progress))
    except TrainingError as exc:
        raise TrainingError(f"training diverged in epoch {epoch + 1}: {exc}") from None
    if not np.isfinite(loss):
        raise TrainingError(f"training diverged in epoch {epoch + 1}: its mean loss is {loss} "
                            f"(lower the learning rate)")
    return loss
