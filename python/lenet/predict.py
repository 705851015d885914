"""Classify digit images (PNG, PGM, or anything Pillow reads) or dataset images.

    python -m lenet.predict --backend numpy digit.png
    python -m lenet.predict --index 0 --index 1

Images are converted to 28x28 grey levels with the digit light on dark, as in MNIST (how each
kind of image is converted: lenet.images, docs/using.md).
"""
from __future__ import annotations

import sys

import numpy as np

from . import data, load, weights
from .images import read_image
from ._cli import Parser, add_data_options, guarded
from .errors import DataError


def softmax(logits: np.ndarray) -> np.ndarray:
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def main(argv=None) -> int:
    p = Parser(prog="python -m lenet.predict", description=__doc__.splitlines()[0])
    p.add_argument("images", nargs="*", metavar="IMAGE", help="image files")
    p.add_argument("--index", type=int, action="append", default=[], metavar="N",
                   help="test-set image N of the dataset, -1 the last (repeatable)")
    p.add_argument("--backend", default="numpy")
    p.add_argument("--device", default="cpu", choices=("cpu", "gpu"))
    p.add_argument("--variant", default=None, help="backend variant (see python -m lenet.bench --list)")
    p.add_argument("--weights", metavar="PATH", default=None, help="weights file (default: the shipped weights)")
    add_data_options(p)
    args = p.parse_args(argv)
    if not args.images and not args.index:
        p.error("give at least one IMAGE or --index N")

    names, xs, truth = [], [], []
    for path in args.images:
        names.append(path)
        xs.append(read_image(path))
        truth.append(None)
    if args.index:
        ds = data.load(args.dataset, args.data)
        for i in args.index:
            if not -len(ds.test_x) <= i < len(ds.test_x):
                raise DataError(f"--index {i} out of range: {ds.name} has {len(ds.test_x)} test images")
            i %= len(ds.test_x)
            names.append(f"{ds.name} test #{i}")
            xs.append(ds.test_x[i])
            truth.append(int(ds.test_y[i]))
    net = load(args.backend, args.device, weights.load(args.weights), args.variant)
    probs = softmax(net.predict(np.ascontiguousarray(np.stack(xs))))
    print("image".ljust(24), "class  p      " + " ".join(f"  p{d}" for d in range(10)))
    for name, row, label in zip(names, probs, truth):
        note = "" if label is None else f"  (label {label})"
        print(f"{name[-24:]:24} {row.argmax():>5}  {row.max():.3f}  "
              + " ".join(f"{v:.2f}" for v in row) + note)
    return 0


run = guarded(main)

if __name__ == "__main__":
    sys.exit(run())
