"""`python -m lenet.bench`: see cli.py."""
import sys

from .cli import run

sys.exit(run())
