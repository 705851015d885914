"""How the cupy and pycuda backends (and lenet.emu's EmuGPU) run the plans of _cuda_kernels.py:
binding a launch sequence once, pinned staging of host copies, the Launcher base that holds
everything the launchers share, and CudaNet, the network on top of any launcher.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import NamedTuple

import numpy as np

from ..errors import UnavailableError
from ..model import NUM_CLASSES
from ..net import Net
from . import _device_timing
from ._cuda_kernels import FILE_OF, FIXED, FUSED_MIN_CC, PARAM_FLOATS, PER_IMAGE, Buf, flatten, forward, hold, \
    train_step, unflatten

def bind(gpu, launches, bufs):
    """Resolve kernel handles and pointer arguments once: a list the launcher replays. The
    arguments that point to one tensor of a packed buffer go with their extents, {index: (name,
    bytes)}, so that the emulator can check each access against its own tensor."""
    return [gpu.bind(gpu.function(FILE_OF[l.kernel], l.kernel), l.grid, l.block,
                     tuple(gpu.pointer(bufs[a.name], a.offset) if isinstance(a, Buf) else a for a in l.args),
                     {i: (f"{a.name}[{a.tensor}]", a.count * bufs[a.name].dtype.itemsize)
                      for i, a in enumerate(l.args) if isinstance(a, Buf) and a.tensor})
            for l in launches]


class Staging:
    """Pinned host staging buffers, one per device buffer key (address, dtype, size), at most
    `keep` of them: a new one evicts the least recently used after its last copy has finished,
    so the buffers of batch sizes outgrown (their device buffers freed) do not pile up.
    `allocate(key)` makes (pinned host array, event recorded after each copy)."""

    def __init__(self, allocate, keep=8):
        self.allocate, self.keep, self.entries = allocate, keep, OrderedDict()

    def get(self, key):
        """(host array, event) for `key`, once its previous copy has finished."""
        entry = self.entries.pop(key, None)
        if entry is None:
            while len(self.entries) >= self.keep:
                _, (_, event) = self.entries.popitem(last=False)
                event.synchronize()         # a copy may still read or write it
            entry = self.allocate(key)
        self.entries[key] = entry
        entry[1].synchronize()
        return entry


# struct letters of the scalar kernel arguments (pycuda's prepare() format; the emulator checks
# them against each kernel's signature); a device pointer is "P"
SCALAR_CODES = {np.int32: "i", np.float32: "f", np.uint64: "Q"}


def arg_codes(args) -> str:
    """The signature letters of bound kernel arguments: a pointer is an int (an address)."""
    return "".join("P" if isinstance(a, int) else SCALAR_CODES[type(a)] for a in args)


class DeviceBuffer:
    """A device allocation with its element type and count (what cupy arrays carry themselves)."""

    def __init__(self, alloc, dtype, size, ptr):
        self.alloc, self.dtype, self.size, self.ptr = alloc, np.dtype(dtype), size, ptr


def fill_bits(value, dtype) -> int:
    """The 32-bit pattern a 4-byte element `value` of `dtype` is stored as (for 32-bit memsets)."""
    return int(np.array(value, dtype).view(np.uint32))


class Launcher:
    """What every launcher (cupy.py, pycuda.py, lenet.emu.launcher) shares: zero-filled buffers,
    staged copies, the launch loop and the timer of _device_timing. A subclass supplies only its
    API's own calls:
      memory    empty(count, dtype), to_device(host), fill(buf, value) (every element);
                pointer(buf, offset) (a kernel argument) and address(buf) (an int) unless its
                buffers are DeviceBuffers
      copies    _pinned_empty(count, dtype), _copy_htod(address, host), _copy_dtoh(host, address)
      events    event(timing=True), _elapsed_ms(a, b)
      kernels   function(file, name), bind(fn, grid, block, args, extents), launch(bound item),
                compute_capability(); capture(bound) where it has CUDA graphs
    and sets self.stream (with .synchronize()) before calling Launcher.__init__.
    """

    def __init__(self):
        self._staging = Staging(lambda key: (self._pinned_empty(key[2], np.dtype(key[1])), self.event(timing=False)))

    def zeros(self, count, dtype):
        buf = self.empty(count, dtype)
        self.fill(buf, 0)
        return buf

    # a DeviceBuffer's kernel argument and address (cupy passes its arrays themselves)
    def pointer(self, buf, offset):
        return buf.ptr + offset * buf.dtype.itemsize

    def address(self, buf):
        return buf.ptr

    def _pinned(self, buf, count):
        host, event = self._staging.get((self.address(buf), buf.dtype.str, buf.size))
        return host[:count], event

    def upload(self, buf, x):
        host, event = self._pinned(buf, x.size)
        np.copyto(host, x.ravel(), casting="no")
        self._copy_htod(self.address(buf), host)
        event.record(self.stream)

    def download(self, buf, count):
        host, _ = self._pinned(buf, count)
        self._copy_dtoh(host, self.address(buf))
        self.stream.synchronize()
        return host.copy()

    def synchronize(self):
        self.stream.synchronize()

    def run(self, bound):
        for item in bound:
            self.launch(item)

    # the timer of _device_timing
    def record(self, event):
        event.record(self.stream)

    def elapsed_ms(self, start, end):
        end.synchronize()
        return self._elapsed_ms(start, end)

    def hold(self, ns):
        self.run(bind(self, [hold(ns)], {}))


class DeviceBatch(NamedTuple):
    """A batch of n images (upload) or logits (forward) sitting in the network's device buffers."""
    n: int


class CudaNet(Net):
    """LeNet on the GPU through a launcher `gpu` (the Launcher interface above).

    Device buffers are reused from call to call: a forward result stays valid until the next
    upload of the same network.
    """

    device = "gpu"

    def __init__(self, backend, gpu, params, variant, graphs=False):
        if variant[0] == "3" and gpu.compute_capability() < FUSED_MIN_CC:
            need, have = (".".join(map(str, cc)) for cc in (FUSED_MIN_CC, gpu.compute_capability()))
            raise UnavailableError(f"variant 3 (the fused kernel) needs compute capability {need} "
                                   f"(thread block clusters), this GPU has {have}")
        self.backend, self.gpu, self.variant, self.version, self.graphs = backend, gpu, variant, variant[0], graphs
        self.layers_method = "CUDA events around each kernel launch"
        self.bufs = {"params": gpu.to_device(flatten(params)), "grads": gpu.zeros(PARAM_FLOATS, np.float32),
                     "loss": gpu.zeros(1, np.float32)}
        self.capacity = {}              # activation buffer name -> images it holds
        self._bound = {}                # ("forward", n) | ("train", n, lr) -> bound launches or a graph

    def _sequence(self, key):
        """The bound launches for key, allocating (or growing) the buffers they name first."""
        run = self._bound.get(key)
        if run is None:
            n = key[1]
            launches = forward(self.version, n) if key[0] == "forward" else train_step(self.version, n, key[2])
            for name in {a.name for l in launches for a in l.args if isinstance(a, Buf)} - set(FIXED):
                if self.capacity.get(name, 0) < n:
                    dtype = np.int32 if name == "labels" else np.float32
                    self.bufs[name] = self.gpu.empty(PER_IMAGE[name] * n, dtype)
                    self.capacity[name] = n
                    self._bound.clear()         # pointers moved: everything bound before is stale
            if key[0] == "train":               # one learning rate per batch size stays bound
                for old in [k for k in self._bound if k[:2] == key[:2]]:
                    del self._bound[old]
            run = bind(self.gpu, launches, self.bufs)
            if self.graphs and key[0] == "forward":
                run = self.gpu.capture(run)
            self._bound[key] = run
        return run

    def upload(self, x):
        n = len(x)
        self._sequence(("forward", n))      # allocates the buffers on first use
        self.gpu.upload(self.bufs["x"], x)
        return DeviceBatch(n)

    def forward(self, batch):
        self.gpu.run(self._sequence(("forward", batch.n)))
        return batch

    def download(self, batch):
        return self.gpu.download(self.bufs["z"], batch.n * NUM_CLASSES).reshape(batch.n, NUM_CLASSES)

    def synchronize(self):
        self.gpu.synchronize()

    def device_times_us(self, x, repeats):
        """Events around the forward as enqueued; kernel-only: the same when the forward is one
        graph launch or one kernel, else the summed events around each launch (_device_timing)."""
        batch = self.upload(x)
        run = self._sequence(("forward", batch.n))
        self.gpu.run(run)                               # compiled and bound before anything is timed
        self.gpu.hold(1000)
        forward = _device_timing.forward_us(self.gpu, lambda: self.gpu.run(run), repeats)
        if self.graphs or len(run) == 1:
            return {"forward": forward, "kernels": forward}
        launches = [lambda one=(item,): self.gpu.run(one) for item in run]
        return {"forward": forward, "kernels": _device_timing.kernels_us(self.gpu, launches, repeats)}

    def layer_times_us(self, x, repeats):
        """Each layer's kernels from the event pairs around each launch of the forward (the graph
        variants' launches issued one by one; v3: one fused group). Ran on an H100 (bench/results/h100/)."""
        batch = self.upload(x)
        plan = forward(self.version, batch.n)
        run = bind(self.gpu, plan, self.bufs)
        self.gpu.run(run)
        self.gpu.hold(1000)
        launches = [lambda one=(item,): self.gpu.run(one) for item in run]
        return _device_timing.layer_times_us(self.gpu, launches, [launch.kernel for launch in plan], repeats)

    def _train_step(self, x, y, lr):
        run = self._sequence(("train", len(x), lr))
        self.gpu.upload(self.bufs["x"], x)
        self.gpu.upload(self.bufs["labels"], y)
        self.gpu.run(run)
        return float(self.gpu.download(self.bufs["loss"], 1)[0])

    def parameters(self):
        return unflatten(self.gpu.download(self.bufs["params"], PARAM_FLOATS))
