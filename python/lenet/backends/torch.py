"""PyTorch backend, the peer: an eager nn.Sequential LeNet, torch.inference_mode for
prediction, torch.optim.SGD for training, TF32 off; cpu and gpu (cuDNN autotuned).

PyTorch's layouts are the canonical ones (NCHW, OIHW, Linear [out, in], flatten (c, h, w)),
and the module's state_dict keys are the canonical names, so to_torch / from_torch only move
tensors between host and device.
"""
from __future__ import annotations

import importlib.util
from collections import OrderedDict

import numpy as np

from ..errors import UnavailableError
from ..model import LEARNING_RATE, PARAM_NAMES
from ..net import Net
from ..inputs import check_images
from . import cuda_unavailable, first_line

LAYER = "peer"
DEVICES = ("cpu", "gpu")
KERNELS = {"eager": "nn.Sequential in eager mode, torch.inference_mode"}
SOURCES = ("python/lenet/backends/torch.py",)


def import_torch():
    """Import PyTorch with TF32 off for cuBLAS and cuDNN (DESIGN.md §6); a broken install is one line."""
    try:
        import torch
    except Exception as exc:
        raise UnavailableError(f"torch failed to import: {type(exc).__name__}: {first_line(exc)}") from None
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    return torch


def unavailable(device: str) -> str | None:
    if importlib.util.find_spec("torch") is None:
        return "torch not installed (pip install '.[torch]')"
    if device == "gpu":
        reason = cuda_unavailable()
        if reason:
            return reason
        try:
            torch = import_torch()
        except UnavailableError as exc:
            return str(exc)
        if torch.version.cuda is None:
            return f"torch {torch.__version__} is a CPU-only build (install a CUDA wheel from download.pytorch.org)"
        if not torch.cuda.is_available():
            return f"torch {torch.__version__} (CUDA {torch.version.cuda}) cannot use the GPU (driver too old?)"
    return None


def create(device: str, params: dict, kernel: str | None = None) -> "TorchNet":
    return TorchNet(device, params)


def build_model(nn):
    return nn.Sequential(OrderedDict(
        conv1=nn.Conv2d(1, 20, 5),      # N,20,24,24
        pool1=nn.MaxPool2d(2),          # N,20,12,12
        conv2=nn.Conv2d(20, 50, 5),     # N,50,8,8
        pool2=nn.MaxPool2d(2),          # N,50,4,4
        flatten=nn.Flatten(),           # N,800 in (c, h, w) order
        fc1=nn.Linear(800, 500),        # N,500
        relu=nn.ReLU(),
        fc2=nn.Linear(500, 10),         # N,10
    ))


def to_torch(params: dict, device) -> dict:
    """Canonical {name: array} -> a state_dict on `device` (same layouts, same names)."""
    import torch
    return {n: torch.from_numpy(np.asarray(params[n], np.float32)).to(device) for n in PARAM_NAMES}


def from_torch(state: dict) -> dict[str, np.ndarray]:
    """A state_dict -> canonical float32 host arrays (copies)."""
    return {n: state[n].detach().cpu().numpy().copy() for n in PARAM_NAMES}


class TorchNet(Net):
    backend = "torch"
    kernel = "eager"

    def __init__(self, device: str, params: dict):
        torch = self.torch = import_torch()
        self.device = device
        self.dev = torch.device("cuda" if device == "gpu" else "cpu")
        if device == "gpu":
            torch.backends.cudnn.benchmark = True     # fixed shapes: autotune conv algorithms
        self.model = build_model(torch.nn).to(self.dev)
        self.model.load_state_dict(to_torch(params, self.dev))
        self.opt = torch.optim.SGD(self.model.parameters(), lr=LEARNING_RATE)

    # timing split: upload copies to the GPU (wraps on CPU), download waits for the result
    def upload(self, x: np.ndarray):
        return self.torch.from_numpy(x).to(self.dev)

    def forward(self, x):
        with self.torch.inference_mode():
            return self.model(x)

    def download(self, out) -> np.ndarray:
        return out.cpu().numpy()

    def synchronize(self) -> None:
        if self.device == "gpu":
            self.torch.cuda.synchronize()

    def device_times_us(self, x: np.ndarray, repeats: int) -> list[float] | None:
        """Forward times measured with CUDA events around each call (gpu only)."""
        if self.device != "gpu":
            return None
        torch, x = self.torch, self.upload(check_images(x))
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        times = []
        with torch.inference_mode():
            for _ in range(repeats):
                start.record()
                self.model(x)
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end) * 1000.0)
        return times

    def _train_step(self, x, y, lr):
        torch = self.torch
        for group in self.opt.param_groups:
            group["lr"] = lr
        labels = torch.from_numpy(y).to(self.dev, torch.int64)
        self.opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(self.model(self.upload(x)), labels)
        loss.backward()
        self.opt.step()
        return loss.item()

    def parameters(self) -> dict[str, np.ndarray]:
        return from_torch(self.model.state_dict())
