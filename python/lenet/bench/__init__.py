"""The benchmark: `python -m lenet.bench` (docs/measuring.md).

cli       arguments, the plan of runs, the order of the steps
runner    one fresh worker process per backend x device x variant, interleaved; the floors' process
worker    one run: correctness check against the reference, then latency, throughput, training
results   the typed files (rows, floors, meta, plan) from which schema.json is generated
typed     dataclasses to and from JSON, and their JSON schema
floors/   what the machine cannot beat: cpu.py (SGEMM roofline), gpu.py (launch, copies, FMA, bandwidth)
loc       lines of code per backend (pygount over each backend's SOURCES), counted when a run starts
stats     percentiles and summaries
meta      versions, machine, clocks, git commit
raw       each run's result kept in <out>/raw/ as it finishes; the document assembled from them
rundir    one run at a time per --out directory; an earlier run's results moved aside
child     worker processes that die with the benchmark
progress  what runs, what is left, the time left
report    results.json, results.md, PNG plots from <out>/raw/ (python -m lenet.bench.report <out>)
markdown  results.md and the README's results table
readings  what markdown and plots both read off the results: row names, floors, numbers as text
plots     the PNG plots, one helper for all
versus    the CPU-versus-GPU figure from several runs' results (python -m lenet.bench.versus)
"""
from __future__ import annotations

import importlib.util

from ..errors import UnavailableError

TOOLS = ("matplotlib", "pygount", "threadpoolctl")       # pyproject.toml's `bench` extra; `cpu` includes it


def require_tools(tools=TOOLS) -> None:
    """One line naming the extra to install when one of the benchmark's `tools` is missing."""
    missing = [t for t in tools if importlib.util.find_spec(t) is None]
    if missing:
        raise UnavailableError(f"the benchmark needs {', '.join(missing)} (pip install '.[bench]')")
