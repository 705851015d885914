"""The CUDA driver API through ctypes: the one wrapper of libcuda.so.1 in the project (why CUDA
cannot be used, the driver version, the GPU floors, the device-memory check). No Python GPU
package is needed.
"""
from __future__ import annotations

import ctypes


class Driver:
    """The driver library; calling it runs one driver function and raises on any other status
    than CUDA_SUCCESS. OSError when libcuda.so.1 is not found."""

    def __init__(self):
        self.lib = ctypes.CDLL("libcuda.so.1")

    def __call__(self, name: str, *args):
        status = self.status(name, *args)
        if status != 0:
            text = ctypes.c_char_p()
            self.lib.cuGetErrorString(status, ctypes.byref(text))
            raise RuntimeError(f"{name} failed: CUresult {status} ({(text.value or b'?').decode()})")

    def status(self, name: str, *args) -> int:
        """Run driver function `name`; its CUresult, unchecked."""
        return getattr(self.lib, name)(*args)

    def version(self) -> int:
        """cuDriverGetVersion (e.g. 13000), which works before (and without) cuInit; 0 if unknown."""
        value = ctypes.c_int(0)
        return value.value if self.status("cuDriverGetVersion", ctypes.byref(value)) == 0 else 0

    def attribute(self, attr: int, dev) -> int:
        value = ctypes.c_int()
        self("cuDeviceGetAttribute", ctypes.byref(value), attr, dev)
        return value.value

    def event_ms(self, fn, runs: int) -> float:
        """Best of `runs` CUDA-event timings (ms) of fn()'s work on the default stream, after one warm-up."""
        start, stop = ctypes.c_void_p(), ctypes.c_void_p()
        self("cuEventCreate", ctypes.byref(start), 0)
        self("cuEventCreate", ctypes.byref(stop), 0)
        try:
            fn()
            best = float("inf")
            for _ in range(runs):
                self("cuEventRecord", start, None)
                fn()
                self("cuEventRecord", stop, None)
                self("cuEventSynchronize", stop)
                ms = ctypes.c_float()
                self("cuEventElapsedTime", ctypes.byref(ms), start, stop)
                best = min(best, ms.value)
            return best
        finally:
            self("cuEventDestroy_v2", start)
            self("cuEventDestroy_v2", stop)
