"""Export the shared weights as an ONNX model of LeNet (lenet.onnx_graph builds it).

    python -m lenet.export --onnx lenet.onnx [--weights FILE]
"""
from __future__ import annotations

import sys
from pathlib import Path

from . import __version__, weights
from ._cli import Parser, guarded
from .onnx_graph import OPSET, save


def main(argv=None) -> int:
    p = Parser(prog="python -m lenet.export", description=__doc__.splitlines()[0])
    p.add_argument("--onnx", metavar="PATH", required=True, help="where to write the ONNX model")
    p.add_argument("--weights", metavar="FILE", default=None, help="weights file (default: the shipped weights)")
    args = p.parse_args(argv)
    source = Path(args.weights) if args.weights is not None else weights.default_path()
    params, meta = weights.read(source)
    path = save(args.onnx, params, {**meta, "file": source.name}, __version__)
    print(f"wrote {path} (opset {OPSET}, weights {source.name}, sha256 {meta.get('sha256', '?')[:12]})")
    return 0


run = guarded(main)

if __name__ == "__main__":
    sys.exit(run())
