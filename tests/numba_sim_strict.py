"""A strict layer over numba's CUDA simulator, for the tests: it reports what the simulator alone
lets pass, each as a SimulatorReport naming the kind, the kernel's file:line, and (through the
simulator's own prefix) the thread and block, tid=[x, y, z] ctaid=[x, y, z]:

  negative index          a[i - 1] at i = 0 reads a[-1]: NumPy, the simulator and compiled numba
                          all wrap it to the last element; no kernel here means that, so any
                          negative index into a device or shared array is reported;
  shared-memory race      two threads touch one element of a cuda.shared.array between the same
                          two syncthreads, at least one writing (the simulator runs the threads
                          in an order of its own, so a missing barrier only sometimes gives a
                          wrong value);
  uninitialised read      a shared element read before any thread of the block wrote it (the
                          simulator's shared arrays hold whatever np.empty found, or the last
                          block's values); reported at the block's next barrier or its end, so
                          that a missing barrier is reported as the race it is;
  divergent syncthreads   a barrier not reached by every thread of the block at the same call
                          site (the simulator releases the threads still alive, so a barrier
                          inside `if tid < 16` or after an early return passes silently);
  uninitialised device    a float read by a kernel from a cuda.device_array (or _like) that nothing
  read                    wrote: such arrays start filled with a NaN of a payload of their own
                          (cudaMalloc: "the memory is not cleared"), the simulator's start with
                          whatever np.ndarray found (compute-sanitizer's initcheck found one on an
                          H100 that the simulator had let pass).

Not covered: races in global memory, local arrays, atomics. Shared arrays are checked element by
element as the kernel indexes them (a slice is checked whole when taken, not where it is used).

It patches the simulator's internals (FakeCUDAArray, FakeCUDAShared, BlockThread, BlockManager)
as numba-cuda 0.30 (with numba 0.68) has them; `unsupported()` names why it cannot run on other
versions, and `strict()` patches for the duration of a `with` block only. The simulator must be
chosen (NUMBA_ENABLE_CUDASIM=1) before numba is first imported.
"""
from __future__ import annotations

import importlib.metadata
import os
import sys
import threading
from contextlib import contextmanager

import numpy as np

WRITTEN_FOR = {"numba": "0.68.", "numba-cuda": "0.30."}     # version prefixes
BRINGS = {"numba": "the JIT compiler", "numba-cuda": "numba's maintained CUDA target and its simulator"}
_LOCK = threading.Lock()                                     # tracker updates, from simulated threads
UNWRITTEN = {np.dtype(np.float32): np.uint32(0x7FA5A5A5).view(np.float32),     # a quiet NaN's own payload
             np.dtype(np.float64): np.uint64(0x7FF4A5A5A5A5A5A5).view(np.float64)}


class SimulatorReport(Exception):
    """One finding; a single-string constructor, as the simulator rebuilds a thread's exception."""


def unsupported() -> str | None:
    """Why the strict layer cannot run here, or None."""
    for package, prefix in WRITTEN_FOR.items():
        try:
            version = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            return (f"{package} is not installed: `pip install {package}` (or the extra `.[numba]`, which `.[cpu]` "
                    f"includes) brings {BRINGS[package]}; the strict simulator layer was written for {prefix}x")
        if not version.startswith(prefix):
            return (f"{package} {version}: the strict simulator layer patches the simulator's internals "
                    f"as {package} {prefix}x has them; check them and update WRITTEN_FOR")
    if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
        return "numba's CUDA simulator is not chosen (NUMBA_ENABLE_CUDASIM=1 before numba is imported)"
    return None


def _sim():
    from numba.cuda.simulator import kernel, kernelapi
    from numba.cuda.simulator.cudadrv import devicearray
    return kernel, kernelapi, devicearray


def _kernel_site() -> str:
    """file:line (function) of the innermost frame outside the simulator and this module."""
    sim_dir = os.path.dirname(_sim()[0].__file__)
    frame = sys._getframe(1)
    while frame.f_code.co_filename.startswith(sim_dir) or frame.f_code.co_filename == __file__:
        frame = frame.f_back
    return f"{frame.f_code.co_filename}:{frame.f_lineno} ({frame.f_code.co_name})"


def _in_kernel():
    return hasattr(threading.current_thread(), "syncthreads_event")      # a simulator BlockThread


def _check_index(key, what: str) -> None:
    for part in key if isinstance(key, tuple) else (key,):
        bounds = (part.start, part.stop) if isinstance(part, slice) else (part,)
        if any(isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v < 0 for v in bounds):
            raise SimulatorReport(f"negative index {key!r} into {what} at {_kernel_site()}")


class TrackedShared:
    """A block's cuda.shared.array, every element access checked against the block's barriers.
    Per element: the last writer and its epoch (the writer's count of barriers passed), and the
    epoch's reader (a thread id, or -2 for several)."""

    def __init__(self, array: np.ndarray, site: str):
        self.array, self.site = array, site
        self.index = np.arange(array.size).reshape(array.shape)
        self.writer, self.write_epoch, self.reader, self.read_epoch = (
            np.full(array.size, -1, np.int64) for _ in range(4))

    shape = property(lambda self: self.array.shape)
    size = property(lambda self: self.array.size)
    dtype = property(lambda self: self.array.dtype)

    def __len__(self):
        return len(self.array)

    def __getitem__(self, key):
        self._access(key, write=False)
        return self.array[key]

    def __setitem__(self, key, value):
        self._access(key, write=True)
        self.array[key] = value

    def _access(self, key, write: bool) -> None:
        what = f"the shared array allocated at {self.site}"
        _check_index(key, what)
        thread = threading.current_thread()
        me, epoch = thread.thread_id, getattr(thread, "strict_epoch", 0)
        with _LOCK:
            for i in np.atleast_1d(self.index[key]).ravel():
                other = self.writer[i]
                if other not in (-1, me) and self.write_epoch[i] == epoch:
                    raise SimulatorReport(f"shared-memory race: thread {me} {'writes' if write else 'reads'} "
                                          f"element {i} of {what}, which thread {other} wrote with no "
                                          f"syncthreads between, at {_kernel_site()}")
                if write:
                    if self.read_epoch[i] == epoch and self.reader[i] != me:
                        readers = "several threads" if self.reader[i] == -2 else f"thread {self.reader[i]}"
                        raise SimulatorReport(f"shared-memory race: thread {me} writes element {i} of {what}, "
                                              f"which {readers} read with no syncthreads between, at {_kernel_site()}")
                    self.writer[i], self.write_epoch[i] = me, epoch
                    continue
                if other == -1:     # reported at the next barrier, unless a race first
                    thread._manager.strict_unwritten.append((epoch, me, i, what, _kernel_site()))
                if self.read_epoch[i] != epoch:
                    self.reader[i], self.read_epoch[i] = me, epoch
                elif self.reader[i] != me:
                    self.reader[i] = -2


def _report_unwritten(manager, epoch, where: str = "") -> None:
    """Raise for the first read of a never-written shared element in `epoch` (None: any)."""
    for read_epoch, thread, i, what, site in manager.strict_unwritten:
        if epoch is None or read_epoch == epoch:
            raise SimulatorReport(f"uninitialised read: thread {thread}{where} read element {i} of {what}, "
                                  f"which no thread of the block wrote, at {site}")


def _patches():
    """{(owner, attribute): replacement}: what strict() swaps into the simulator."""
    kernel, kernelapi, devicearray = _sim()
    import numba.cuda as simulator
    array_get, array_set = devicearray.FakeCUDAArray.__getitem__, devicearray.FakeCUDAArray.__setitem__
    device_array = devicearray.device_array
    shared_array, syncthreads, run = kernelapi.FakeCUDAShared.array, kernel.BlockThread.syncthreads, kernel.BlockManager.run

    def getitem(self, key):
        if not _in_kernel():
            return array_get(self, key)
        _check_index(key, f"a {self._ary.ndim}-d device array")
        value = array_get(self, key)
        poison = UNWRITTEN.get(np.asarray(value).dtype) if np.ndim(value) == 0 else None
        if poison is not None and np.asarray(value).tobytes() == np.asarray(poison).tobytes():
            raise SimulatorReport(f"uninitialised read: element {key!r} of a {self._ary.ndim}-d device array "
                                  f"that nothing wrote (cuda.device_array), at {_kernel_site()}")
        return value

    def poisoned(*args, **kwargs):                         # cudaMalloc: "the memory is not cleared"
        array = device_array(*args, **kwargs)
        if array._ary.dtype in UNWRITTEN:
            array._ary.fill(UNWRITTEN[array._ary.dtype])
        return array

    def setitem(self, key, value):
        if _in_kernel():
            _check_index(key, f"a {self._ary.ndim}-d device array")
        return array_set(self, key, value)

    def shared(self, shape, dtype, alignment=None):
        if shape == 0:                                     # dynamic shared memory: left as it is
            return shared_array(self, shape, dtype, alignment)
        if isinstance(dtype, kernelapi.types.Type):
            dtype = kernelapi.numpy_support.as_dtype(dtype)
        site, manager = _kernel_site(), threading.current_thread()._manager
        with _LOCK:                                        # one array per call site and launch, as the
            if site not in self._allocations:              # simulator keeps it; one tracker per block
                self._allocations[site] = np.empty(shape, dtype)
            if site not in manager.strict_shared:
                manager.strict_shared[site] = TrackedShared(self._allocations[site], site)
            return manager.strict_shared[site]

    def barrier(self):
        epoch, manager = getattr(self, "strict_epoch", 0), self._manager
        with _LOCK:
            manager.strict_arrivals.setdefault(epoch, {})[self.thread_id] = _kernel_site()
        syncthreads(self)                                  # released when every live thread waits
        self.strict_epoch = epoch + 1
        _report_unwritten(manager, epoch)
        arrived = manager.strict_arrivals[epoch]
        block = int(np.prod(manager._block_dim))
        if len(arrived) < block or len(set(arrived.values())) > 1:
            sites = {s: sum(v == s for v in arrived.values()) for s in sorted(set(arrived.values()))}
            raise SimulatorReport(f"divergent syncthreads: of {block} threads " + ", ".join(
                f"{n} waited at {s}" for s, n in sites.items()) +
                (f", {block - len(arrived)} had exited" if len(arrived) < block else ""))

    def run_block(self, grid_point, *args):
        self.strict_shared, self.strict_arrivals, self.strict_unwritten = {}, {}, []
        run(self, grid_point, *args)
        _report_unwritten(self, None, f" in block ctaid={list(grid_point)}")

    return {(devicearray.FakeCUDAArray, "__getitem__"): getitem, (devicearray.FakeCUDAArray, "__setitem__"): setitem,
            (kernelapi.FakeCUDAShared, "array"): shared, (kernel.BlockThread, "syncthreads"): barrier,
            (kernel.BlockManager, "run"): run_block, (devicearray, "device_array"): poisoned,
            (simulator, "device_array"): poisoned}


@contextmanager
def strict():
    """The simulator with the checks above, for the duration of the block."""
    reason = unsupported()
    if reason:
        raise RuntimeError(reason)
    patches = _patches()
    saved = {(owner, name): owner.__dict__[name] for owner, name in patches}
    for (owner, name), replacement in patches.items():
        setattr(owner, name, replacement)
    try:
        yield
    finally:
        for (owner, name), original in saved.items():
            setattr(owner, name, original)
