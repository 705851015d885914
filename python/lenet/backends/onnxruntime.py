"""onnxruntime backend, the peer for inference: ONNX Runtime running the ONNX export of the
weights (lenet.export.build, serialised in memory), on its CPU execution provider, or on the
CUDA one where that is installed (unverified here). Inference only.
"""
from __future__ import annotations

import importlib.util

import numpy as np

from ..errors import UnavailableError
from ..model import PARAM_NAMES
from ..net import Net
from . import cuda_unavailable

LAYER = "peer"
DEVICES = ("cpu", "gpu")
VARIANTS = {
    "default": "ORT's default session options, what a user gets: its own thread count, all graph optimizations",
    "1thread": "intra_op_num_threads=1, inter_op_num_threads=1",
}
SOURCES = ("python/lenet/backends/onnxruntime.py", "python/lenet/export.py")


def unavailable(device: str) -> str | None:
    missing = [m for m in ("onnx", "onnxruntime") if importlib.util.find_spec(m) is None]
    if missing:
        return f"{' and '.join(missing)} not installed (pip install '.[onnx]')"
    if device == "gpu":
        reason = cuda_unavailable()
        if reason:
            return reason
        import onnxruntime
        if "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
            return (f"onnxruntime {onnxruntime.__version__} has no CUDAExecutionProvider "
                    "(pip install onnxruntime-gpu)")
    return None


def create(device: str, params: dict, variant: str | None = None) -> OrtNet:
    return OrtNet(device, params, variant or next(iter(VARIANTS)))


class OrtNet(Net):
    backend = "onnxruntime"

    def __init__(self, device: str, params: dict, variant: str):
        import onnxruntime as ort

        from ..export import INPUT, OUTPUT, build

        self.device, self.variant = device, variant
        self._params = {n: np.array(params[n], np.float32) for n in PARAM_NAMES}   # copies
        options = ort.SessionOptions()
        if variant == "1thread":
            options.intra_op_num_threads = options.inter_op_num_threads = 1
        provider = "CUDAExecutionProvider" if device == "gpu" else "CPUExecutionProvider"
        self._session = ort.InferenceSession(build(self._params).SerializeToString(), options,
                                             providers=[provider])
        if provider not in self._session.get_providers():   # ORT falls back to the CPU silently
            raise UnavailableError(f"onnxruntime could not start {provider} "
                                   f"(session runs on {', '.join(self._session.get_providers())})")
        self._io = INPUT, [OUTPUT]

    def forward(self, x):
        """Host to host on either device: session.run copies the input in and the logits out."""
        name, outputs = self._io
        return self._session.run(outputs, {name: x})[0]

    # device_times_us stays None on the GPU too: session.run is one blocking host call that
    # uploads, runs and downloads, and ORT exposes no CUDA events around its kernels.

    def parameters(self) -> dict[str, np.ndarray]:
        return {n: v.copy() for n, v in self._params.items()}

    def _train_step(self, x, y, lr):
        raise UnavailableError("onnxruntime is an inference engine: it does not train")
