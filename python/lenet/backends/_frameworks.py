"""What the framework backends (tensorflow, keras, torch) share: each framework imported one way,
with reduced precision off (TF32 and the like) and GPU memory taken as needed rather than up front, so
several frameworks can share one GPU in one process; why a framework cannot use the GPU; and the
canonical <-> TensorFlow layout conversions (Keras uses them too).

TF/Keras layouts: filters HWIO, dense weights [in, out]; with NHWC activations fc1's inputs are
flattened in (h, w, c) order, so to_tf reorders fc1's rows and no activation is ever transposed.
"""
from __future__ import annotations

import importlib.util
import os
import sys

import numpy as np

from ..errors import UnavailableError
from ..model import ACTIVATION_SHAPES, PARAM_NAMES
from . import first_line
from ._cuda_driver import cuda_unavailable

INSTALL = {"tensorflow": "'.[tf]'", "keras": "'.[keras]'", "torch": "'.[torch]'", "jax": "jax"}

_C, _H, _W = ACTIVATION_SHAPES["pool2"]            # 50, 4, 4: what fc1 flattens


def not_installed(package: str) -> str | None:
    """"<package> not installed (pip install ...)" without importing it, or None if it is."""
    return None if importlib.util.find_spec(package) else f"{package} not installed (pip install {INSTALL[package]})"


def _failed(package: str, exc: Exception) -> UnavailableError:
    return UnavailableError(f"{package} failed to import: {type(exc).__name__}: {first_line(exc)}")


def import_tf():
    """TensorFlow with TF32 off and memory growth on every GPU (set before any op, else TF takes
    nearly all GPU memory when it initialises); a broken install is one line."""
    try:
        import tensorflow as tf
    except Exception as exc:
        raise _failed("tensorflow", exc) from None
    for gpu in tf.config.list_physical_devices("GPU"):
        try:
            tf.config.experimental.set_memory_growth(gpu, True)
        except RuntimeError:      # the runtime is initialised already: set then, or by the user
            pass
    tf.config.experimental.enable_tensor_float_32_execution(False)
    return tf


def import_torch():
    """PyTorch with TF32 off for cuBLAS and cuDNN (its caching allocator takes GPU memory as needed)."""
    try:
        import torch
    except Exception as exc:
        raise _failed("torch", exc) from None
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    return torch


def no_jax_preallocation() -> None:
    """Unless the user set XLA_PYTHON_CLIENT_PREALLOCATE, keep JAX from taking 75% of the GPU when it
    starts. Call before anything imports jax (Keras imports it on every backend where installed)."""
    if "jax" not in sys.modules:
        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")


def import_jax():
    """JAX with full float32 matmul precision, without preallocation (no_jax_preallocation)."""
    no_jax_preallocation()
    try:
        import jax
    except Exception as exc:
        raise _failed("jax", exc) from None
    jax.config.update("jax_default_matmul_precision", "highest")
    return jax


IMPORT = {"tensorflow": import_tf, "torch": import_torch, "jax": import_jax}


def gpu_unavailable(package: str) -> str | None:
    """Why `package` (tensorflow, torch or jax) cannot use a GPU here, or None. Imports it."""
    reason = not_installed(package) or cuda_unavailable()
    if reason:
        return reason
    try:
        fw = IMPORT[package]()
    except UnavailableError as exc:
        return str(exc)
    if package == "tensorflow":
        if not fw.test.is_built_with_cuda():
            return f"tensorflow {fw.__version__} is built without CUDA (tensorflow-cpu?); pip install 'tensorflow[and-cuda]'"
        if not fw.config.list_physical_devices("GPU"):
            return f"tensorflow {fw.__version__} sees no GPU (its CUDA/cuDNN libraries did not load)"
    elif package == "torch":
        if fw.version.cuda is None:
            return f"torch {fw.__version__} is a CPU-only build (install a CUDA build of PyTorch)"
        if not fw.cuda.is_available():
            return f"torch {fw.__version__} (CUDA {fw.version.cuda}) cannot use the GPU (driver too old?)"
    else:
        try:
            fw.devices("gpu")
        except RuntimeError:
            return f"jax {fw.__version__} sees no GPU (a CPU-only jaxlib? pip install 'jax[cuda13]')"
    return None


# --- the one place layouts change (canonical: lenet/model.py) ----------------------------------

def to_tf(params: dict, layout: str) -> dict[str, np.ndarray]:
    """Canonical {name: array} -> TF arrays: conv OIHW -> HWIO, dense [out, in] -> [in, out];
    with NHWC activations fc1's inputs go from (c, h, w) to the (h, w, c) flatten order."""
    out = {}
    for name in PARAM_NAMES:
        a = np.asarray(params[name], np.float32)
        if name in ("conv1.weight", "conv2.weight"):
            a = a.transpose(2, 3, 1, 0)                                             # H,W,I,O
        elif name == "fc1.weight" and layout == "NHWC":
            a = a.reshape(-1, _C, _H, _W).transpose(2, 3, 1, 0).reshape(_H * _W * _C, -1)  # 800 (h,w,c),500
        elif name.endswith(".weight"):
            a = a.T                                                                 # in,out
        out[name] = np.ascontiguousarray(a)
    return out


def from_tf(arrays: dict, layout: str) -> dict[str, np.ndarray]:
    """Inverse of to_tf: TF arrays -> canonical float32 {name: array}."""
    out = {}
    for name in PARAM_NAMES:
        a = np.asarray(arrays[name], np.float32)
        if name in ("conv1.weight", "conv2.weight"):
            a = a.transpose(3, 2, 0, 1)                                             # O,I,H,W
        elif name == "fc1.weight" and layout == "NHWC":
            a = a.reshape(_H, _W, _C, -1).transpose(3, 2, 0, 1).reshape(-1, _C * _H * _W)  # 500,800 (c,h,w)
        elif name.endswith(".weight"):
            a = a.T                                                                 # out,in
        out[name] = np.ascontiguousarray(a)
    return out
