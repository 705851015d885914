"""The shared weights file: safetensors, the eight canonical float32 tensors, with metadata.

The format (little-endian u64 header size, JSON header, raw tensor bytes) is written and read
here directly, so every failure can say exactly what is wrong. The metadata carries a SHA-256
of the tensor bytes, so corruption is caught, not loaded.
"""
from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

import numpy as np

from ._files import atomic_write
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
    missing = [n for n in PARAM_NAMES if n not in params]
    extra = sorted(set(params) - set(PARAM_NAMES))
    if missing or extra:
        raise WeightsError(f"{source}: missing tensors {missing}, unexpected tensors {extra}")
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


def save(path, params: dict, metadata: dict | None = None) -> Path:
    """Write params atomically (temporary file in the same directory, then rename)."""
    path = Path(path)
    params = check_params(params)
    blobs = [params[n].tobytes() for n in PARAM_NAMES]
    header, offset = {}, 0
    for name, blob in zip(PARAM_NAMES, blobs):
        header[name] = {"dtype": "F32", "shape": list(PARAM_SHAPES[name]),
                        "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
    meta = {str(k): str(v) for k, v in (metadata or {}).items()}
    meta.update(format="lenet-weights", format_version=FORMAT_VERSION,
                sha256=hashlib.sha256(b"".join(blobs)).hexdigest())
    header = {"__metadata__": meta, **header}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)                       # the data starts 8-byte aligned
    return atomic_write(path, struct.pack("<Q", len(text)) + text + b"".join(blobs))


def read(path=None) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """(params, metadata) from a weights file, validated; WeightsError on any problem."""
    path = Path(path) if path is not None else default_path()
    fix = f"regenerate it with: {REGENERATE.format(path=path)}"

    def fail(problem: str):
        return WeightsError(f"{path}: {problem}; {fix}")

    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise fail("no such file") from None
    except IsADirectoryError:
        raise fail("is a directory, not a weights file") from None
    if len(raw) < 8:
        raise fail(f"truncated ({len(raw)} bytes, not a safetensors file)")
    (size,) = struct.unpack("<Q", raw[:8])
    if size > len(raw) - 8:
        raise fail(f"not a safetensors file or truncated (header of {size} bytes, file of {len(raw)})")
    try:
        header = json.loads(raw[8:8 + size])
        assert isinstance(header, dict)
    except (ValueError, AssertionError):
        raise fail("not a safetensors file (header is not a JSON object)") from None
    meta = header.pop("__metadata__", {}) or {}
    data = raw[8 + size:]
    params = {}
    for name, entry in header.items():
        try:
            begin, end = entry["data_offsets"]
            dtype, shape = entry["dtype"], tuple(entry["shape"])
        except (KeyError, TypeError, ValueError):
            raise fail(f"malformed header entry for {name!r}") from None
        if dtype != "F32":
            raise fail(f"{name} has dtype {dtype}, expected F32 (float32)")
        if end > len(data) or begin > end or (end - begin) != 4 * int(np.prod(shape)):
            raise fail(f"truncated or inconsistent data for {name} (bytes {begin}..{end} of {len(data)})")
        params[name] = np.frombuffer(data, np.float32, int(np.prod(shape)), begin).reshape(shape).copy()
    expected = meta.get("sha256")
    if expected and hashlib.sha256(data).hexdigest() != expected:
        raise fail("corrupted (SHA-256 of the tensor data does not match its metadata)")
    try:
        params = check_params(params, source="tensors")
    except WeightsError as exc:
        raise fail(str(exc).removeprefix("tensors: ")) from None
    return params, meta


def load(path=None) -> dict[str, np.ndarray]:
    """{name: float32 array} in canonical layouts, from `path` or the shipped weights."""
    return read(path)[0]
