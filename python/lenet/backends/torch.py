"""PyTorch backend, the peer: an nn.Sequential LeNet, TF32 off, cuDNN autotuned on the GPU, in the
three ways a PyTorch user runs small-batch inference (VARIANTS):

  eager    the module called under torch.inference_mode (the default);
  graph    GPU only: per batch size, the eager forward captured once as a torch.cuda.CUDAGraph over a
           static input and output (after a warm-up on a side stream) and replayed: upload copies the
           images into the static input, download copies the static output out; the GRAPHS most
           recently used batch sizes keep their graphs;
  compile  torch.compile(mode="reduce-overhead"): inductor's kernels, replayed as CUDA graphs on the
           GPU (on the CPU, inductor's C++ kernels); each new batch shape compiles first (seconds).

Training is the eager module with torch.optim.SGD on every variant; the update is in place, so
captured graphs and compiled code read the new weights.

PyTorch's layouts are the canonical ones (NCHW, OIHW, Linear [out, in], flatten (c, h, w)), and
the module's state_dict keys are the canonical names, so to_torch / from_torch only move tensors.
"""
from __future__ import annotations

import functools
from collections import OrderedDict
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from ..layers import stack
from ..model import IMAGE_SHAPE, LAYERS, LEARNING_RATE, PARAM_NAMES
from ..net import Net
from . import _device_timing
from ._frameworks import gpu_unavailable, import_torch, not_installed

TIER = "peer"
DEVICES = ("cpu", "gpu")
VARIANTS = {
    "eager": "nn.Sequential in eager mode, torch.inference_mode",
    "graph": "GPU: the eager forward captured per batch size as a torch.cuda.CUDAGraph, replayed",
    "compile": 'torch.compile(mode="reduce-overhead"): inductor kernels, CUDA-graph replays on the GPU',
}
VARIANT_DEVICES = {"graph": ("gpu",)}
SOURCES = ("python/lenet/backends/torch.py",)
GRAPHS = 4             # batch sizes whose captured graphs the "graph" variant keeps (least recently used goes)


def unavailable(device: str) -> str | None:
    return gpu_unavailable("torch") if device == "gpu" else not_installed("torch")


def create(device: str, params: dict, variant: str | None = "eager") -> "TorchNet":
    variant = variant or "eager"
    return TorchNet(device, params, variant)


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


def layer_steps(model) -> list:
    """build_model's forward as one callable per layer of LAYERS (flatten with pool2, ReLU with fc1)."""
    m = model
    return [m.conv1, m.pool1, m.conv2, lambda t: m.flatten(m.pool2(t)), lambda t: m.relu(m.fc1(t)), m.fc2]


def to_torch(params: dict, device) -> dict:
    """Canonical {name: array} -> a state_dict on `device` (same layouts, same names)."""
    torch = import_torch()
    return {n: torch.from_numpy(np.asarray(params[n], np.float32)).to(device) for n in PARAM_NAMES}


def from_torch(state: dict) -> dict[str, np.ndarray]:
    """A state_dict -> canonical float32 host arrays (copies)."""
    return {n: state[n].detach().cpu().numpy().copy() for n in PARAM_NAMES}


_COMPILED_GROUPS = ("conv1+pool1", "conv2+pool2", "fc1", "fc2")


def _compiled_spans(forward_range) -> dict[str, float]:
    """A torch.compile forward's profiler range -> {group: µs} from each extern call's start to the
    next one's (the last: to the compiled graph's end)."""
    def walk(event):
        yield event
        for child in event.cpu_children:
            yield from walk(child)

    graph = next(e for e in walk(forward_range) if e.name.startswith("## Call CompiledFxGraph"))
    starts = [op.time_range.start for op in graph.cpu_children if op.name in ("aten::convolution", "aten::addmm")]
    if len(starts) != len(_COMPILED_GROUPS):
        raise RuntimeError(f"torch.compile's graph made {len(starts)} extern calls, not the expected "
                           f"{len(_COMPILED_GROUPS)} (convolution x2, addmm x2): its layers cannot be told apart")
    ends = starts[1:] + [graph.time_range.end]
    return {group: end - start for group, start, end in zip(_COMPILED_GROUPS, starts, ends)}


class _TorchTimer:
    """_device_timing's timer on torch's current CUDA stream; hold spins the GPU with torch.cuda._sleep
    for 2 cycles per nanosecond asked (at least that long at clocks up to 2 GHz; the H100's is 1.98)."""
    def __init__(self, torch):
        self.cuda = torch.cuda

    def event(self):
        return self.cuda.Event(enable_timing=True)

    def record(self, event):
        event.record()

    def elapsed_ms(self, start, end):
        end.synchronize()
        return start.elapsed_time(end)

    def hold(self, ns):
        self.cuda._sleep(int(ns * 2))


class Captured(NamedTuple):
    """One batch size of the "graph" variant: replay() recomputes y (N,10) from x (N,1,28,28) in place."""
    x: object
    replay: Callable[[], None]
    y: object


class TorchNet(Net):
    backend = "torch"
    fork_safe = False                   # its thread pools do not survive fork() (docs/using.md)

    def __init__(self, device: str, params: dict, variant: str = "eager",
                 capture: Callable[[int], Captured] | None = None):
        """capture(n): how a batch size is captured for the "graph" variant (default: a CUDA graph)."""
        torch = self.torch = import_torch()
        self.device, self.variant = device, variant
        self.dev = torch.device("cuda" if device == "gpu" else "cpu")
        if device == "gpu":
            torch.backends.cudnn.benchmark = True     # fixed shapes: autotune conv algorithms
        self.model = build_model(torch.nn).to(self.dev)
        self.model.load_state_dict(to_torch(params, self.dev))
        self.layers_method = ("torch.profiler: spans between inductor's extern calls" if variant == "compile"
                             else "torch.profiler: each layer's top-level aten ops" if device == "cpu"
                             else "CUDA events around each layer's modules in the eager forward, the GPU held "
                                  "until all are enqueued")
        self.opt = torch.optim.SGD(self.model.parameters(), lr=LEARNING_RATE)
        self._module = torch.compile(self.model, mode="reduce-overhead") if variant == "compile" else self.model
        # batch size -> Captured, made on first use: the "graph" variant's forward, and on the GPU the
        # "kernels" time of device_times_us for every variant
        self._graphs = functools.lru_cache(maxsize=GRAPHS)(capture or self._capture_cuda_graph)

    def _capture_cuda_graph(self, n: int) -> Captured:
        """The eager forward at batch n as a CUDA graph over a static input (PyTorch's recipe: warm up
        on a side stream, so cuDNN autotuning and lazy initialisation such as per-stream cuBLAS
        workspaces stay out of the capture, which then runs on that same stream)."""
        torch = self.torch
        x = torch.zeros((n, *IMAGE_SHAPE), device=self.dev)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side), torch.inference_mode():
            for _ in range(3):
                self.model(x)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.inference_mode(), torch.cuda.graph(graph, stream=side):   # a private memory pool per graph
            y = self.model(x)
        return Captured(x, graph.replay, y)

    # timing split: upload copies to the GPU (wraps on the CPU; graph: into the static input),
    # forward runs the variant, download copies the logits to the host and so waits for them
    def upload(self, x: np.ndarray):
        host = self.torch.from_numpy(x)
        if self.variant != "graph":
            return host.to(self.dev)
        captured = self._graphs(len(x))
        captured.x.copy_(host)
        return captured

    def forward(self, x):
        if self.variant == "graph":
            x.replay()
            return x.y
        with self.torch.inference_mode():
            return self._module(x)

    def download(self, out) -> np.ndarray:
        return out.to("cpu", copy=self.variant == "graph").numpy()   # graph: y is reused by the next replay

    def synchronize(self) -> None:
        if self.device == "gpu":
            self.torch.cuda.synchronize()

    def device_times_us(self, x: np.ndarray, repeats: int) -> dict[str, list[float]] | None:
        """CUDA-event times (lenet.net.Net.device_times_us), interleaved: "forward" around this variant's
        forward as enqueued; "kernels" a CUDA-graph replay of the eager forward (graph: the same replay;
        compile: the forward's own samples, since reduce-overhead's forward already is a graph replay)."""
        if self.device != "gpu":
            return None
        torch = self.torch
        staged = self.upload(x)
        for _ in range(3):                   # warm: compile, then reduce-overhead records its graph
            self.forward(staged)
        graph = self._graphs(len(x))
        graph.x.copy_(torch.from_numpy(x))
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

        def timed(run) -> float:
            start.record()
            run()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) * 1000.0

        forward, kernels = [], []
        for _ in range(repeats):
            forward.append(timed(lambda: self.forward(staged)))
            kernels.append(forward[-1] if self.variant == "compile" else timed(graph.replay))
        return {"forward": forward, "kernels": kernels}

    def layer_times_us(self, x: np.ndarray, repeats: int) -> dict[str, list[float]] | None:
        """torch.profiler. CPU: eager, each layer's top-level aten ops; compile: inductor's own C++
        kernels (pools, bias, ReLU) are not profiler ops, so the compiled graph is split where its
        extern calls start (convolution, addmm): conv1+pool1, conv2+pool2, fc1, fc2, the last to the
        graph's end. GPU (ran on an H200, bench/results/h200/): CUDA events around each layer's modules
        of the eager forward, the stream held until all are enqueued (_device_timing, as for the raw
        kernels); the graph variant replays exactly those kernels, so it is timed eagerly too;
        compile: None (inductor's Triton kernels in a graph). Not torch.profiler on the GPU: on an
        H100 (torch 2.11, CUDA 13) every process that profiled with CUDA activity later died of heap
        corruption (SIGABRT in training, or at exit)."""
        if self.device == "cpu":
            from ._profilers import torch_layer_times
            staged = self.upload(x)
            return torch_layer_times(lambda: self.forward(staged), repeats,
                                     _compiled_spans if self.variant == "compile" else None)
        if self.variant == "compile":
            return None
        m, torch = self.model, self.torch
        steps = layer_steps(m)
        outs = [torch.from_numpy(x).to(self.dev)] + [None] * len(steps)

        def launch(i):
            outs[i + 1] = steps[i](outs[i])
        with torch.inference_mode():
            for _ in range(3):                       # warm: cuDNN's autotuning (cudnn.benchmark)
                m(outs[0])
            samples = _device_timing.per_launch_us(_TorchTimer(torch), [lambda i=i: launch(i) for i in range(len(steps))],
                                                   repeats)
        return stack([dict(zip(LAYERS, sample)) for sample in samples])

    def _train_step(self, x, y, lr):
        torch = self.torch
        for group in self.opt.param_groups:
            group["lr"] = lr
        labels = torch.from_numpy(y).to(self.dev, torch.int64)
        self.opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(self.model(torch.from_numpy(x).to(self.dev)), labels)
        loss.backward()
        self.opt.step()
        return loss.item()

    def parameters(self) -> dict[str, np.ndarray]:
        return from_torch(self.model.state_dict())
