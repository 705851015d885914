"""What every command-line tool shares: one-line errors, number ranges, the data options."""
from __future__ import annotations

import argparse
import os
import signal
import sys

from ._files import cwd_exists
from .data import DATASETS
from .errors import LenetError

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")      # TensorFlow's start-up INFO lines, in CLIs only

# What users can cause (bad arguments, files, devices); anything else is a bug and keeps its traceback.
EXPECTED = (LenetError, OSError)


def guarded(main):
    """Run main(argv); an expected failure prints `error: <one line>` and exits 2, an interrupt
    128 + its signal's number (Ctrl-C 130, SIGTERM 143), a closed output pipe nothing (141).
    LENET_DEBUG=1 shows the traceback instead."""
    def run(argv=None) -> int:
        try:
            return main(argv) or 0
        except KeyboardInterrupt as exc:
            signum = getattr(exc, "signum", signal.SIGINT)          # set by the benchmark's handler
            print("error: interrupted" + ("" if signum == signal.SIGINT else f" ({signal.Signals(signum).name})"),
                  file=sys.stderr)
            return 128 + signum
        except BrokenPipeError:                 # `... | head`: stop quietly, as a SIGPIPE would
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 128 + signal.SIGPIPE
        except EXPECTED as exc:
            if os.environ.get("LENET_DEBUG"):
                raise
            text = " ".join(str(exc).split()) or type(exc).__name__
            if isinstance(exc, FileNotFoundError) and not exc.filename and not cwd_exists():
                text = "the working directory no longer exists"
            print(f"error: {text}", file=sys.stderr)
            return 2
    return run


def number(kind: type, low, high, above: bool = False):
    """An argparse `type`: a `kind` (int or float) in low..high (`above`: strictly above low), else
    a one-line usage error naming the range. NaN, infinities, 1e9 for an integer and integers past
    any machine word are refused before any work. Every range is listed in docs/using.md."""
    span = f"{low}..{high}" if kind is int else f"{'(' if above else '['}{low:g}, {high:g}]"
    noun = "an integer" if kind is int else "a number"

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or not (low < value <= high if above else low <= value <= high):
            raise argparse.ArgumentTypeError(f"expected {noun} in {span}, got {text!r}")
        return value
    parse.__name__ = f"{noun} in {span}"
    return parse


class Parser(argparse.ArgumentParser):
    """argparse whose usage errors are one line too."""

    def error(self, message):
        self.exit(2, f"error: {message} (see --help)\n")


def add_data_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dataset", choices=DATASETS, default=None,
                        help="dataset (default: --data/LENET_DATA if given, else the embedded 5 000 MNIST digits)")
    parser.add_argument("--data", metavar="DIR", default=None,
                        help="directory with the four MNIST-format IDX files (default: $LENET_DATA)")

