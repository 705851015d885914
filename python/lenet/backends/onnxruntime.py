"""onnxruntime backend, the peer for inference: ONNX Runtime running the ONNX export of the
weights (lenet.onnx_graph.build, serialised in memory), on its CPU execution provider, or on the
CUDA one where that is installed (unverified here). Inference only.
"""
from __future__ import annotations

import importlib.util
import json
import os
import tempfile

import numpy as np

from ..errors import UnavailableError
from ..model import PARAM_NAMES
from ..net import Net
from ._cuda_driver import cuda_unavailable

TIER = "peer"
DEVICES = ("cpu", "gpu")
VARIANTS = {
    "default": "ORT's default session options, what a user gets: its own thread count (one per core; in a process "
               "pinned to fewer CPUs than the machine has, one per CPU it may use), all graph optimizations",
    "1thread": "intra_op_num_threads=1, inter_op_num_threads=1",
}
SOURCES = ("python/lenet/backends/onnxruntime.py", "python/lenet/onnx_graph.py")
DOES_NOT_TRAIN = "onnxruntime is an inference engine: it does not train"


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


def pinned_cpus() -> int | None:
    """How many CPUs this process may use, where that is fewer than the machine has (taskset, a
    cpuset): ORT's own thread count is the machine's cores, whose threads would then share them."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return usable if usable and usable < (os.cpu_count() or usable) else None


def create(device: str, params: dict, variant: str | None = None) -> OrtNet:
    return OrtNet(device, params, variant or next(iter(VARIANTS)))


class OrtNet(Net):
    backend = "onnxruntime"
    layers_method = "ONNX Runtime's profiler: each node's kernel time (1 µs resolution)"

    def __init__(self, device: str, params: dict, variant: str):
        import onnxruntime as ort

        from ..onnx_graph import INPUT, OUTPUT, build

        self.device, self.variant = device, variant
        self._params = {n: np.array(params[n], np.float32) for n in PARAM_NAMES}   # copies
        self._model = build(self._params).SerializeToString()
        provider = "CUDAExecutionProvider" if device == "gpu" else "CPUExecutionProvider"
        self._session = ort.InferenceSession(self._model, self._options(), providers=[provider])
        if provider not in self._session.get_providers():   # ORT falls back to the CPU silently
            raise UnavailableError(f"onnxruntime could not start {provider} "
                                   f"(session runs on {', '.join(self._session.get_providers())})")
        self._io = INPUT, [OUTPUT]

    def _options(self):
        import onnxruntime as ort
        options = ort.SessionOptions()
        if self.variant == "1thread":
            options.intra_op_num_threads = options.inter_op_num_threads = 1
        elif (usable := pinned_cpus()) is not None:
            options.intra_op_num_threads = usable   # ORT counts the machine's cores, not the process's
        return options

    def forward(self, x):
        """Host to host on either device: session.run copies the input in and the logits out."""
        name, outputs = self._io
        return self._session.run(outputs, {name: x})[0]

    def layer_times_us(self, x, repeats):
        """ONNX Runtime's own profiler, in a second session of the same model and options with
        profiling on: each node's kernel time, assigned to layers by lenet.layers.by_layer (the export
        names its nodes by layer; ORT's fused Gemm+Relu is fc1, its inserted layout reorders go to
        the layer in progress). GPU: None (not read)."""
        import onnxruntime as ort

        from ..layers import by_layer, stack
        from ._profilers import WARMUP
        if self.device != "cpu":
            return None
        options = self._options()
        options.enable_profiling = True
        with tempfile.TemporaryDirectory(prefix="lenet-ortprof-") as tmp:
            options.profile_file_prefix = f"{tmp}/ort"
            session = ort.InferenceSession(self._model, options, providers=["CPUExecutionProvider"])
            name, outputs = self._io
            for _ in range(WARMUP + repeats):
                session.run(outputs, {name: x})
            with open(session.end_profiling()) as f:
                events = json.load(f)
        runs = [(e["ts"], e["ts"] + e["dur"]) for e in events if e["name"] == "model_run"][WARMUP:]
        nodes = [e for e in events if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")]
        return stack([by_layer((e["args"]["op_name"], e["dur"]) for e in nodes if start <= e["ts"] <= end)
                      for start, end in runs])

    # device_times_us stays None on the GPU too: session.run is one blocking host call that
    # uploads, runs and downloads, and ORT exposes no CUDA events around its kernels.

    def parameters(self) -> dict[str, np.ndarray]:
        return {n: v.copy() for n, v in self._params.items()}

    def _train_step(self, x, y, lr):
        raise UnavailableError(DOES_NOT_TRAIN)
