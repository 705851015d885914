"""Metadata of a run: versions, machine, GPU clocks (read with nvidia-smi, never set), git commit."""
from __future__ import annotations

import datetime
import importlib.metadata as md
import os
import platform
import re
import shlex
import subprocess
import sys
from pathlib import Path

from .._repo import source_root
from .floors.cpu import cores

MODULES = ("numpy", "torch", "tensorflow", "keras", "jax", "cupy", "pycuda", "numba", "numba_cuda",
           "onnxruntime", "scipy_openblas32", "safetensors", "pygount", "matplotlib")   # import names
NVIDIA_SMI_FIELDS = ("name", "driver_version", "pstate", "clocks.sm", "clocks.mem", "clocks.max.sm",
                     "clocks.max.mem", "clocks.applications.graphics", "power.limit", "temperature.gpu",
                     "memory.total")


def _run(cmd, cwd=None) -> str | None:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=20, cwd=cwd)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def versions() -> dict:
    """{import name: version} of the packages that matter, whichever distribution provides them
    (tensorflow-cpu provides tensorflow), and of the nvidia-* wheels; from distribution metadata,
    so nothing heavy is imported."""
    provided = md.packages_distributions()
    out = {}
    for module in MODULES:
        for dist in provided.get(module, ()):
            name, version = md.metadata(dist)["Name"], md.version(dist)
            out[module] = version if name.lower() == module.replace("_", "-") else f"{version} ({name})"
    for dist in md.distributions():
        name = (dist.metadata["Name"] or "").lower()
        if name.startswith("nvidia-"):
            out[name] = dist.version
    out["lenet"] = lenet_version()         # the package that ran, not whatever else is installed
    return dict(sorted(out.items()))


def lenet_version(installed: str | None = None, root: Path | None = None) -> str:
    """lenet's version as installed, or, run from a source checkout that is not installed, the
    version its pyproject.toml declares (the commit is in meta.git); "unknown" if neither."""
    from .. import __version__

    installed = installed or __version__
    root = root or source_root()
    if installed != "unknown" or root is None:
        return installed
    try:
        text = (root / "pyproject.toml").read_text(encoding="utf-8")
    except OSError:
        return installed
    project = text.split("[project]", 1)[-1].split("\n[", 1)[0]
    found = re.search(r'^version\s*=\s*"([^"]+)"', project, re.M)
    return f"{found[1]} (source tree)" if found else installed


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gpus() -> list[dict] | None:
    """One dict per GPU from nvidia-smi (clocks as read now), or None without nvidia-smi."""
    text = _run(["nvidia-smi", f"--query-gpu={','.join(NVIDIA_SMI_FIELDS)}", "--format=csv,noheader"])
    if text is None:
        return None
    return [dict(zip(NVIDIA_SMI_FIELDS, (v.strip() for v in line.split(",")))) for line in text.splitlines()]


def cuda() -> dict:
    """CUDA driver / toolkit versions and what the native module was built with."""
    out = {"driver_cuda_version": None, "nvcc": None, "native": None}
    try:
        from ..backends._cuda_driver import Driver
        v = Driver().version()
        out["driver_cuda_version"] = f"{v // 1000}.{v % 1000 // 10}" if v else None
    except OSError:
        pass
    nvcc = _run(["nvcc", "--version"]) or _run(["/usr/local/cuda/bin/nvcc", "--version"])
    out["nvcc"] = nvcc.splitlines()[-1] if nvcc else None
    try:
        from .. import _native
        out["native"] = {"with_cuda": bool(getattr(_native, "WITH_CUDA", False)),
                         "cuda_why": getattr(_native, "CUDA_WHY", None) or None,
                         "cudnn_version": getattr(_native, "CUDNN_VERSION", None)}
    except ImportError as exc:
        out["native"] = {"error": " ".join(str(exc).split())}
    return out


def git(root: Path | None = None, out: Path | None = None) -> dict:
    """The checkout's commit, and whether its tracked files differ from it; changes under `out`,
    the run's own output directory (a committed run's results being replaced), do not count."""
    root = root or source_root()
    if root is None:
        return {"commit": None, "dirty": None}
    commit = _run(["git", "rev-parse", "HEAD"], cwd=root)
    status = ["git", "status", "--porcelain", "--untracked-files=no", "--", "."]
    if out is not None and Path(out).resolve().is_relative_to(root.resolve()):
        status.append(f":(exclude){Path(out).resolve().relative_to(root.resolve()).as_posix()}")
    dirty = _run(status, cwd=root)
    return {"commit": commit, "dirty": bool(dirty) if dirty is not None else None}


def collect(argv, out: Path | None = None) -> dict:
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": shlex.join(["python", "-m", "lenet.bench", *argv]),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpu_affinity": cores(),
        "load_average": os.getloadavg() if hasattr(os, "getloadavg") else None,
        "gpus": gpus(),
        "cuda": cuda(),
        "versions": versions(),
        "git": git(out=out),
        "env": {k: v for k, v in os.environ.items()
                if k.startswith(("OMP_", "OPENBLAS_", "MKL_", "KERAS_", "TF_CPP_", "TF_ENABLE_", "TF_GPU_",
                                     "TF_XLA", "CUDA_", "CUBLAS_", "CUDNN_", "NUMBA_", "LENET_"))},
    }
