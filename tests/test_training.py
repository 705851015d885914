"""The training loop shared by `python -m lenet.train` and the benchmark: no images and divergence
stop it with one clear error naming where."""
import numpy as np
import pytest

import lenet
from agree import require
from lenet.errors import InputError, TrainingError
from lenet.training import evaluate, run_epoch
from test_cli import assert_one_line_error, cli
from test_data import write_mnist_dir


def test_no_images_to_train_or_evaluate_on(dataset):
    net = lenet.load("numpy")
    with pytest.raises(InputError, match=r"^no training images \(N = 0\)$"):
        run_epoch(net, dataset.train_x[:0], dataset.train_y[:0])
    with pytest.raises(InputError, match=r"^no test images to evaluate on \(N = 0\)$"):
        evaluate(net, dataset.test_x[:0], dataset.test_y[:0])


@pytest.mark.parametrize("backend", ["numpy", "cblas"])
def test_divergence_is_caught_at_its_batch(backend, dataset):
    require(backend)
    net = lenet.load(backend, params=lenet.model.init_params())
    with pytest.raises(TrainingError, match=r"^training diverged in epoch 2: the loss is (nan|inf) at batch \d of 8 "
                                            r"\(lower the learning rate\)$"):
        run_epoch(net, np.ascontiguousarray(dataset.train_x[::8]), dataset.train_y[::8], lr=1e3, epoch=1)


def test_the_train_tool_refuses_no_images_and_divergence_and_exports_nothing(tmp_path, dataset):
    empty = write_mnist_dir(tmp_path / "empty", dataset, n_train=0)
    out = tmp_path / "w.safetensors"
    assert_one_line_error(*cli("lenet.train", "--data", str(empty), "--export", str(out))[::2],
                          "train-images-idx3-ubyte.gz: holds no images")
    rc, stdout, stderr = cli("lenet.train", "--lr", "1e6", "--epochs", "3", "--export", str(out))
    after_start_line = stderr.split("\n", 1)[1]                      # "training <lenet numpy ...> on ..."
    assert_one_line_error(rc, after_start_line, "training diverged in epoch 1: the loss is")
    assert not out.exists() and "epoch" not in stdout
