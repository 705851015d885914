"""`python -m lenet.bench.floors [--quick] [--no-gpu]`: the floors as JSON on stdout."""
import json
import sys

from ..typed import to_json
from . import measure

print(json.dumps(to_json(measure(quick="--quick" in sys.argv, gpu="--no-gpu" not in sys.argv))))
