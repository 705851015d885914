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
    """64 real held-out digits with labels, spread over every class. Held out, so the shipped
    weights have not fitted them and one SGD step moves every tensor well above float32 rounding."""
    pick = slice(None, None, len(dataset.test_x) // 64)
    return dataset.test_x[pick][:64].copy(), dataset.test_y[pick][:64].copy()
