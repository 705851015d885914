import gzip
import re
import struct

import numpy as np
import pytest

from lenet import data
from lenet.errors import DataError


def test_embedded_digits_are_real_and_split_by_class(dataset):
    assert dataset.train_x.shape == (4000, 1, 28, 28) and dataset.test_x.shape == (1000, 1, 28, 28)
    assert dataset.train_x.dtype == np.float32 and 0 <= dataset.train_x.min() and dataset.train_x.max() == 1
    assert np.bincount(dataset.test_y).tolist() == [100] * 10
    assert np.bincount(dataset.train_y).tolist() == [400] * 10


def test_read_idx_on_the_shipped_real_files():
    images = data.read_idx(data.EMBEDDED_DIR / "mnist5k-images-idx3-ubyte.gz")
    labels = data.read_idx(data.EMBEDDED_DIR / "mnist5k-labels-idx1-ubyte.gz")
    assert images.shape == (5000, 28, 28) and images.dtype == np.uint8 and labels.shape == (5000,)
    # MNIST digits: dark background, bright strokes, about a fifth of the pixels lit
    assert images[:, 0, :].max() == 0 and 0.1 < (images > 128).mean() < 0.3


@pytest.mark.skipif(not data.FASHION_DIRS[0].is_dir(), reason="Debian's dataset-fashion-mnist is not installed")
def test_fashion_mnist_found_automatically():
    ds = data.load("fashion-mnist")
    assert ds.train_x.shape == (60000, 1, 28, 28) and ds.test_x.shape == (10000, 1, 28, 28)


def test_idx_round_trip_raw_and_gzip(tmp_path):
    a = np.arange(2 * 28 * 28, dtype=np.uint8).reshape(2, 28, 28)
    for name in ("a.idx", "a.idx.gz"):
        data.write_idx(tmp_path / name, a)
        assert np.array_equal(data.read_idx(tmp_path / name), a)


@pytest.mark.parametrize("mangle, message", [
    (lambda raw: raw[:-1], "truncated"),
    (lambda raw: raw[:10], "truncated"),
    (lambda raw: raw + b"\0", "trailing bytes"),
    (lambda raw: b"\x00\x00\x08\x00" + raw[4:], "bad magic"),
    (lambda raw: b"PK\x03\x04" + raw[4:], "bad magic"),
    (lambda raw: b"", "bad magic"),
])
def test_bad_idx_files_are_rejected_with_a_clear_error(tmp_path, mangle, message):
    good = tmp_path / "good.idx"
    data.write_idx(good, np.zeros((3, 28, 28), np.uint8))
    bad = tmp_path / "bad.idx"
    bad.write_bytes(mangle(good.read_bytes()))
    with pytest.raises(DataError, match=message):
        data.read_idx(bad)


def test_corrupt_gzip_is_a_data_error(tmp_path):
    path = tmp_path / "x.idx.gz"
    path.write_bytes(gzip.compress(b"\0\0\x08\x01\0\0\0\x05abcde")[:-6])
    with pytest.raises(DataError, match="corrupt gzip"):
        data.read_idx(path)


@pytest.mark.parametrize("shape, message", [
    ((7_500_000, 28, 28), "dimensions (7500000, 28, 28) need 5,880,000,000 bytes of data, more than the 2,147,483,648"),
    ((2**32 - 1,) * 3,                                                   # no overflow to a negative count
     "dimensions (4294967295, 4294967295, 4294967295) need 79,228,162,458,924,105,385,300,197,375 bytes"),
])
def test_the_size_an_idx_header_implies_is_checked_before_its_data_is_read(tmp_path, shape, message):
    """A gzip bomb: 1 MB of zeros behind a header that claims 5.9 GB. Refused from its header."""
    header = bytes([0, 0, 0x08, len(shape)]) + struct.pack(f">{len(shape)}I", *shape)
    bomb = tmp_path / "bomb.idx.gz"
    bomb.write_bytes(gzip.compress(header + bytes(1_000_000)))
    with pytest.raises(DataError, match=re.escape(f"{bomb}: {message}")):
        data.read_idx(bomb)


def test_a_raw_idx_file_of_the_wrong_size_is_refused_before_reading(tmp_path):
    path = tmp_path / "short.idx"
    path.write_bytes(bytes([0, 0, 0x08, 3]) + struct.pack(">3I", 1000, 28, 28) + bytes(10))
    with pytest.raises(DataError, match=r"truncated: dimensions \(1000, 28, 28\) need 784,000 bytes of data, "
                                        r"found 10$"):
        data.read_idx(path)


def test_a_bad_label_is_named_by_its_index_and_value(tmp_path, dataset):
    d = write_mnist_dir(tmp_path / "mnist", dataset, n_train=64)
    labels = dataset.train_y[:64].copy()
    labels[5] = 200
    data.write_idx(d / "train-labels-idx1-ubyte.gz", labels)
    with pytest.raises(DataError, match=r"train-labels-idx1-ubyte.gz: labels must lie in 0..9, "
                                        r"label 5 is 200 \(1 such labels\)$"):
        data.load(data_dir=d)


def test_a_split_with_no_images_is_refused(tmp_path, dataset):
    d = write_mnist_dir(tmp_path / "mnist", dataset, n_train=0)
    with pytest.raises(DataError, match="train-images-idx3-ubyte.gz: holds no images$"):
        data.load(data_dir=d)


def write_mnist_dir(directory, ds, n_train=96, n_test=32, gz=True):
    directory.mkdir(exist_ok=True)
    suffix = ".gz" if gz else ""
    to_u8 = lambda x: np.rint(x[:, 0] * 255).astype(np.uint8)
    data.write_idx(directory / f"train-images-idx3-ubyte{suffix}", to_u8(ds.train_x[:n_train]))
    data.write_idx(directory / f"train-labels-idx1-ubyte{suffix}", ds.train_y[:n_train])
    data.write_idx(directory / f"t10k-images-idx3-ubyte{suffix}", to_u8(ds.test_x[:n_test]))
    data.write_idx(directory / f"t10k-labels-idx1-ubyte{suffix}", ds.test_y[:n_test])
    return directory


@pytest.mark.parametrize("gz", [True, False])
def test_data_dir_and_environment_variable(tmp_path, monkeypatch, dataset, gz):
    d = write_mnist_dir(tmp_path / "mnist", dataset, gz=gz)
    ds = data.load(data_dir=d)
    assert ds.train_x.shape == (96, 1, 28, 28) and np.array_equal(ds.test_y, dataset.test_y[:32])
    assert np.abs(ds.train_x - dataset.train_x[:96]).max() < 1e-6
    monkeypatch.setenv("LENET_DATA", str(d))
    assert len(data.load().train_x) == 96
    assert len(data.load("embedded").train_x) == 4000     # asking for the embedded set wins


def test_missing_dataset_pieces_are_named(tmp_path, dataset):
    with pytest.raises(DataError, match="no such data directory"):
        data.load(data_dir=tmp_path / "nowhere")
    d = write_mnist_dir(tmp_path / "mnist", dataset)
    (d / "t10k-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(DataError, match="t10k-labels-idx1-ubyte"):
        data.load(data_dir=d)
    with pytest.raises(DataError, match="unknown dataset"):
        data.load("cifar")
