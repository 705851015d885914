"""The LeNet architecture: the one place every backend reads it from (docs/architecture.md).

Canonical layouts: activations NCHW, conv weights OIHW, dense weights [out, in], biases 1-D.
"""
from __future__ import annotations

import numpy as np

IMAGE_SHAPE = (1, 28, 28)          # C, H, W of one input image, pixels in [0, 1]
NUM_CLASSES = 10
FILTER_SIZE = 5                    # convolution filter height and width, stride 1, no padding
POOL = 2                           # max-pool window and stride

# name -> shape, in the order tensors are stored and listed everywhere
PARAM_SHAPES: dict[str, tuple[int, ...]] = {
    "conv1.weight": (20, 1, 5, 5),
    "conv1.bias": (20,),
    "conv2.weight": (50, 20, 5, 5),
    "conv2.bias": (50,),
    "fc1.weight": (500, 800),
    "fc1.bias": (500,),
    "fc2.weight": (10, 500),
    "fc2.bias": (10,),
}
PARAM_NAMES = tuple(PARAM_SHAPES)

# activation shapes per image, after each layer
ACTIVATION_SHAPES = {
    "input": (1, 28, 28),
    "conv1": (20, 24, 24),
    "pool1": (20, 12, 12),
    "conv2": (50, 8, 8),
    "pool2": (50, 4, 4),
    "fc1": (500,),
    "fc2": (10,),
}

# the layers of the forward, in order (fc1 includes its ReLU; the forward ends at the logits)
LAYERS = tuple(name for name in ACTIVATION_SHAPES if name != "input")

NUM_PARAMS = sum(int(np.prod(s)) for s in PARAM_SHAPES.values())   # 431 080
LAYER_MULTIPLY_ADDS = {            # per image forward; the pools have none
    "conv1": 20 * 24 * 24 * 1 * 5 * 5,      # 288 000
    "pool1": 0,
    "conv2": 50 * 8 * 8 * 20 * 5 * 5,       # 1 600 000
    "pool2": 0,
    "fc1": 500 * 800,                       # 400 000
    "fc2": 10 * 500,                        # 5 000
}
MULTIPLY_ADDS = sum(LAYER_MULTIPLY_ADDS.values())                   # 2 293 000 per image

# The shared training hyper-parameters: plain SGD, mean softmax cross-entropy.
LEARNING_RATE = 0.05
BATCH_SIZE = 64
SEED = 0


def init_params(seed: int = SEED) -> dict[str, np.ndarray]:
    """Seeded initialisation: Caffe's "xavier" filler, U(±sqrt(3 / fan_in)), zero biases."""
    rng = np.random.default_rng(seed)
    params = {}
    for name, shape in PARAM_SHAPES.items():
        if name.endswith(".bias"):
            params[name] = np.zeros(shape, np.float32)
        else:
            fan_in = int(np.prod(shape[1:]))
            limit = np.sqrt(3.0 / fan_in)
            params[name] = rng.uniform(-limit, limit, shape).astype(np.float32)
    return params


assert NUM_PARAMS == 431_080 and MULTIPLY_ADDS == 2_293_000 and tuple(LAYER_MULTIPLY_ADDS) == LAYERS
