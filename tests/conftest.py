import numpy as np
import pytest

import lenet


@pytest.fixture(scope="session")
def dataset():
    """The embedded real MNIST digits (4 000 train, 1 000 test)."""
    return lenet.data.embedded()


@pytest.fixture(scope="session")
def params():
    """The shipped weights, canonical float32."""
    return lenet.weights.load()


@pytest.fixture(scope="session")
def batch(dataset):
    """A fixed real training batch of 64 digits with labels."""
    return dataset.train_x[:: len(dataset.train_x) // 64][:64].copy(), dataset.train_y[:: len(dataset.train_x) // 64][:64].copy()
