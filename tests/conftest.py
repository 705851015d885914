import numpy as np
import pytest

import lenet
from lenet.check import step_batch


@pytest.fixture(scope="session")
def dataset():
    """The embedded real MNIST digits (4 000 train, 1 000 test)."""
    return lenet.data.embedded()


@pytest.fixture(scope="session")
def params():
    """The shipped weights, canonical float32."""
    return lenet.weights.load()


@pytest.fixture(scope="session")
def batch(params, dataset):
    """64 real held-out digits with labels for the SGD-step tests, spread over every class and
    away from ties at the shipped weights (lenet.check.step_batch)."""
    return step_batch(params, dataset.test_x, dataset.test_y)
