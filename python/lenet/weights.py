"""The shared weights file: safetensors, the eight canonical float32 tensors, with metadata.

Read and written by the `safetensors` library; on top of it, the project's checks: names,
shapes, dtype, finiteness, and a SHA-256 of the tensor bytes (in canonical name order) carried
in the metadata, so corruption is caught, not loaded. Every problem is a one-line WeightsError.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import safetensors
import safetensors.numpy

from ._files import atomic_write, open_regular, os_reason, parse_json
from .errors import WeightsError
from .model import PARAM_NAMES, PARAM_SHAPES

FORMAT_VERSION = "1"
FILENAME = "lenet-mnist.safetensors"
REGENERATE = "python -m lenet.train --backend numpy --epochs 40 --augment 2 --export {path}"


def default_path() -> Path:
    """The shipped weights: inside the installed package, or weights/ of a source checkout."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "shipped" / FILENAME, here.parents[1] / "weights" / FILENAME):
        if candidate.is_file():
            return candidate
    return here / "shipped" / FILENAME


def check_params(params, source: str = "params") -> dict[str, np.ndarray]:
    """The eight canonical tensors as contiguous float32 copies, or a WeightsError naming the problem."""
    if not isinstance(params, dict):
        raise WeightsError(f"{source}: expected a dict of arrays, got {type(params).__name__}")
    check_names(params, source)
    out = {}
    for name, shape in PARAM_SHAPES.items():
        value = params[name]
        if not isinstance(value, np.ndarray) or value.dtype.kind != "f":
            raise WeightsError(f"{source}: {name} must be a floating-point numpy array, got "
                               f"{getattr(value, 'dtype', type(value).__name__)}")
        if value.shape != shape:
            raise WeightsError(f"{source}: {name} has shape {value.shape}, expected {shape}")
        if not np.isfinite(value).all():
            raise WeightsError(f"{source}: {name} contains NaN or infinity")
        out[name] = np.ascontiguousarray(value, dtype=np.float32)
    return out


def check_names(names, source: str) -> None:
    missing = [n for n in PARAM_NAMES if n not in names]
    extra = sorted(set(names) - set(PARAM_NAMES))
    if missing or extra:
        raise WeightsError(f"{source}: missing tensors {missing}, unexpected tensors {extra}")


def check_header(tensors: dict[str, tuple[str, tuple]]) -> None:
    """A file's {name: (safetensors dtype, shape)}, checked before any tensor is read."""
    check_names(tensors, "tensors")
    for name, shape in PARAM_SHAPES.items():
        dtype, got = tensors[name]
        if dtype != "F32":
            raise WeightsError(f"tensors: {name} has dtype {dtype}, expected F32 (float32)")
        if got != shape:
            raise WeightsError(f"tensors: {name} has shape {got}, expected {shape}")


MAX_HEADER = 100_000_000      # bytes; the safetensors library's own limit


def read_header(f, size: int) -> dict[str, tuple[str, tuple]] | None:
    """{name: (dtype, shape)} from a safetensors file's header (8-byte length, then JSON), read by
    itself: nothing past it is read or mapped. None if it is not well formed (the safetensors
    library then says what is wrong)."""
    head = f.read(8)
    length = int.from_bytes(head, "little") if len(head) == 8 else 0
    if not 0 < length <= min(MAX_HEADER, size - 8):
        return None
    try:
        header = parse_json(f.read(length))
        tensors = {name: (t["dtype"], tuple(t["shape"])) for name, t in header.items() if name != "__metadata__"}
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    well_formed = all(isinstance(d, str) and all(type(n) is int and n >= 0 for n in shape)
                      for d, shape in tensors.values())
    return tensors if well_formed else None


def checksum(params: dict) -> str:
    """SHA-256 of the tensors' bytes, concatenated in canonical name order."""
    return hashlib.sha256(b"".join(np.ascontiguousarray(params[n]).tobytes() for n in PARAM_NAMES)).hexdigest()


def file_size() -> int:
    """A weights file's size, with room for its header and metadata (its tensors are 1.7 MB)."""
    return sum(4 * int(np.prod(shape)) for shape in PARAM_SHAPES.values()) + 64 * 1024


def save(path, params: dict, metadata: dict | None = None) -> Path:
    """Write params atomically (temporary file in the same directory, then rename)."""
    params = check_params(params)
    meta = {str(k): str(v) for k, v in (metadata or {}).items()}
    meta.update(format="lenet-weights", format_version=FORMAT_VERSION, sha256=checksum(params))
    return atomic_write(path, safetensors.numpy.save(params, metadata=meta))


def read(path=None) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """(params, metadata) from a weights file, validated; WeightsError on any problem.
    Names, dtypes and shapes are checked from the header, before any tensor data is read."""
    path = Path(path) if path is not None else default_path()
    fix = f"; regenerate it with: {REGENERATE.format(path=path)}" if is_shipped(path) else ""

    def fail(problem: str):
        return WeightsError(f"{path}: {' '.join(problem.split())}{fix}")

    try:
        with open_regular(path, WeightsError) as f:         # never a FIFO, a device or a directory
            tensors = read_header(f, os.fstat(f.fileno()).st_size)
        if tensors is not None:
            check_header(tensors)                           # before the file is mapped
        with safetensors.safe_open(str(path), framework="numpy") as f:
            meta = f.metadata() or {}
            check_header({name: (f.get_slice(name).get_dtype(), tuple(f.get_slice(name).get_shape()))
                          for name in f.keys()})
            params = {name: f.get_tensor(name) for name in PARAM_NAMES}
        if meta.get("sha256") and checksum(params) != meta["sha256"]:
            raise WeightsError("tensors: corrupted (SHA-256 of the tensor data does not match its metadata)")
        return check_params(params, source="tensors"), meta
    except safetensors.SafetensorError as exc:
        detail = str(exc).removeprefix("Error while deserializing header: ")
        raise fail(f"not a safetensors file, or truncated or malformed ({detail})") from None
    except OSError as exc:
        raise fail(f"cannot read it ({os_reason(exc)})") from None
    except WeightsError as exc:
        raise fail(str(exc).removeprefix("tensors: ").removeprefix(f"{path}: ")) from None


def is_shipped(path: Path) -> bool:
    try:
        return path == default_path() or os.path.samefile(path, default_path())
    except OSError:
        return False


def load(path=None) -> dict[str, np.ndarray]:
    """{name: float32 array} in canonical layouts, from `path` or the shipped weights."""
    return read(path)[0]
