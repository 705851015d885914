"""Training and evaluation loops shared by `python -m lenet.train` and the benchmark."""
from __future__ import annotations

import numpy as np

from . import model


def evaluate(net, x, y, batch_size: int = 500) -> float:
    """Fraction of `x` whose predicted class equals `y`."""
    correct = sum(int((net.predict(x[i:i + batch_size]).argmax(1) == y[i:i + batch_size]).sum())
                  for i in range(0, len(x), batch_size))
    return correct / len(x)


def epoch_order(n: int, seed: int, epoch: int) -> np.ndarray:
    """The sample order of one epoch: the same for every backend given the same seed."""
    return np.random.default_rng([seed, epoch]).permutation(n)


def run_epoch(net, x, y, lr=model.LEARNING_RATE, batch_size=model.BATCH_SIZE, seed=model.SEED,
              epoch=0, progress=None) -> float:
    """One epoch of plain SGD in the seeded shuffled order of (seed, epoch), the same for every
    backend; returns the mean batch loss."""
    return float(net.train_epoch(x, y, lr, batch_size, epoch_order(len(x), seed, epoch), progress))
