"""The CUDA driver API through ctypes: the one wrapper of libcuda.so.1 in the project (why CUDA
cannot be used, the driver version, the GPU floors, the device-memory check). No Python GPU
package is needed.
"""
from __future__ import annotations

import ctypes
import functools


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


CUDA_REQUIRED = 13000       # cuDriverGetVersion of CUDA 13.0: what nvcc, NVRTC and the cu13 wheels need
CU_RESULT = {               # CUresult codes cuInit can return: (name, what it means)
    3: ("NOT_INITIALIZED", "the driver did not initialise"),
    34: ("STUB_LIBRARY", "libcuda.so.1 is the toolkit's stub, no NVIDIA driver is installed"),
    35: ("INSUFFICIENT_DRIVER", "the NVIDIA driver is too old"),
    46: ("DEVICE_UNAVAILABLE", "every CUDA device is busy or in exclusive use"),
    100: ("NO_DEVICE", "no CUDA device"),
    101: ("INVALID_DEVICE", "invalid CUDA device"),
    304: ("OPERATING_SYSTEM", "an operating system call failed (permissions on /dev/nvidia*?)"),
    802: ("SYSTEM_NOT_READY", "the system is not ready (nvidia-fabricmanager not running?)"),
    803: ("SYSTEM_DRIVER_MISMATCH", "the NVIDIA kernel module and libcuda.so.1 differ in version"),
    804: ("COMPAT_NOT_SUPPORTED_ON_DEVICE", "the forward-compatibility driver does not support this GPU"),
}


def cuda_problem(status: int, driver_version: int, devices: int = 1) -> str | None:
    """One line on why CUDA cannot be used, from cuInit's CUresult `status`, cuDriverGetVersion's
    `driver_version` (e.g. 12040; 0 if unknown) and the device count; None when all is well."""
    if 0 < driver_version < CUDA_REQUIRED:
        have, need = (f"{v // 1000}.{v % 1000 // 10}" for v in (driver_version, CUDA_REQUIRED))
        return f"CUDA driver {have} is older than CUDA {need} needs (update the NVIDIA driver)"
    if status != 0:
        name, words = CU_RESULT.get(status, ("", "the CUDA driver failed"))
        return f"{words} (cuInit returned {'CUDA_ERROR_' + name if name else 'CUresult'} {status})"
    if devices == 0:
        return "no CUDA device (the driver reports none)"
    return None


@functools.cache
def cuda_unavailable() -> str | None:
    """Why no CUDA device can be used here, asked of the driver directly (no framework import)."""
    try:
        cuda = Driver()
    except OSError:
        return "no CUDA driver (libcuda.so.1 not found)"
    version = cuda.version()
    status = cuda.status("cuInit", 0)
    count = ctypes.c_int(0)
    if status == 0 and cuda.status("cuDeviceGetCount", ctypes.byref(count)) != 0:
        count.value = 0
    return cuda_problem(status, version, count.value)
