"""Train LeNet with any backend that trains, and export the shared weights.

    python -m lenet.train --backend numpy --epochs 30 --export weights/lenet-mnist.safetensors
"""
from __future__ import annotations

import datetime
import shlex
import sys
import time

import numpy as np
from tqdm import tqdm

from . import backends, data, load, model, weights
from ._files import check_writable
from .errors import UnavailableError
from .training import evaluate, run_epoch
from ._cli import Parser, add_data_options, guarded, number

MAX_EPOCHS = 1000
MAX_LR = 1e6              # far past divergence, which stops training with its own error
MAX_BATCH = 4096          # images per step; activations alone are ~50 KB an image
MAX_SEED = 2**32 - 1
MAX_AUGMENT = 8           # pixels: more would shift a 20-pixel digit out of the 28x28 frame


def shifted(x: np.ndarray, max_shift: int, rng: np.random.Generator) -> np.ndarray:
    """Augmentation: each image moved by a random whole-pixel offset in [-max_shift, max_shift]^2,
    zero-filled (MNIST digits sit on a black background)."""
    n, _, h, w = x.shape
    padded = np.pad(x, ((0, 0), (0, 0), (max_shift, max_shift), (max_shift, max_shift)))
    dy, dx = rng.integers(0, 2 * max_shift + 1, (2, n))
    rows = dy[:, None] + np.arange(h)                                    # N,28
    cols = dx[:, None] + np.arange(w)
    return np.ascontiguousarray(padded[np.arange(n)[:, None, None], 0, rows[:, :, None], cols[:, None, :]][:, None])


def main(argv=None) -> int:
    p = Parser(prog="python -m lenet.train", description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="numpy", help="backend that trains (default: numpy)")
    p.add_argument("--device", default="cpu", choices=("cpu", "gpu"))
    p.add_argument("--variant", default=None, help="backend variant (see python -m lenet.bench --list)")
    p.add_argument("--epochs", type=number(int, 1, MAX_EPOCHS), default=10, help=f"1..{MAX_EPOCHS} (default: 10)")
    p.add_argument("--lr", type=number(float, 0, MAX_LR, above=True), default=model.LEARNING_RATE,
                   help=f"learning rate, in (0, {MAX_LR:g}] (default: {model.LEARNING_RATE})")
    p.add_argument("--batch-size", type=number(int, 1, MAX_BATCH), default=model.BATCH_SIZE,
                   help=f"1..{MAX_BATCH} (default: {model.BATCH_SIZE})")
    p.add_argument("--seed", type=number(int, 0, MAX_SEED), default=model.SEED,
                   help=f"initialisation and shuffling seed, 0..{MAX_SEED} (default: {model.SEED})")
    p.add_argument("--augment", type=number(int, 0, MAX_AUGMENT), default=0, metavar="PIXELS",
                   help=f"shift each training image by up to this many pixels (0..{MAX_AUGMENT}), anew each epoch (default: 0)")
    p.add_argument("--init", metavar="WEIGHTS", default=None, help="start from these weights (default: seeded init)")
    p.add_argument("--export", metavar="PATH", default=None, help="write the trained weights here (atomic)")
    add_data_options(p)
    args = p.parse_args(argv)

    if reason := backends.training_unavailable(args.backend):     # before the data is read
        raise UnavailableError(reason)
    ds = data.load(args.dataset, args.data)
    params = weights.load(args.init) if args.init is not None else model.init_params(args.seed)
    net = load(args.backend, args.device, params, args.variant)
    if args.export is not None:   # before training, not after; once the inputs are good, so a refusal makes no directory
        check_writable(args.export, weights.file_size())
    print(f"training {net!r} on {ds.name} ({len(ds.train_x)} train, {len(ds.test_x)} test), "
          f"lr {args.lr}, batch {args.batch_size}, seed {args.seed}", file=sys.stderr)
    accuracy = 0.0
    for epoch in range(args.epochs):
        start = time.perf_counter()
        with tqdm(total=len(ds.train_x), desc=f"epoch {epoch + 1}/{args.epochs}", unit="img",
                  leave=False, file=sys.stderr, disable=None) as bar:
            x = shifted(ds.train_x, args.augment, np.random.default_rng([args.seed, epoch, 1])) if args.augment else ds.train_x
            loss = run_epoch(net, x, ds.train_y, args.lr, args.batch_size, args.seed, epoch, bar)
        seconds = time.perf_counter() - start
        accuracy = evaluate(net, ds.test_x, ds.test_y)
        print(f"epoch {epoch + 1:3d}  loss {loss:.4f}  test accuracy {accuracy:.2%}  ({seconds:.1f} s)")
    if args.export is not None:
        path = weights.save(args.export, net.parameters(), {
            "dataset": ds.name, "epochs": args.epochs, "test_accuracy": f"{accuracy:.4f}",
            "trainer": f"{args.backend}/{args.device}", "learning_rate": args.lr, "batch_size": args.batch_size, "augment": args.augment,
            "seed": args.seed, "date": datetime.date.today().isoformat(),
            "command": "python -m lenet.train " + shlex.join(sys.argv[1:] if argv is None else argv)})
        print(f"exported {path}")
    return 0


run = guarded(main)

if __name__ == "__main__":
    sys.exit(run())
