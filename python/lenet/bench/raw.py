"""The benchmark's raw results, written as the run goes, so an interrupted or crashed run keeps
what it measured; and the one results document assembled from them.

    <out>/raw/plan.json            results.Plan: meta, floors, skipped rows, configs, tiers, splits, lines of code
    <out>/raw/run-<i>-<r>.json     results.Row: the worker result of config i, repeat r (atomic writes)
    <out>/raw/floors-after.json    results.Floors: the CPU floor measured again after the last worker

A damaged or stray file in raw/ is named in a warning and left out; the rest is reported.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import replace
from pathlib import Path

from .._files import atomic_write, read_json
from ..errors import InputError
from . import breakdown, stats
from .floors.cpu import best_of
from .results import Floors, Latency, Plan, Results, Row, Throughput, Train, load
from .typed import from_json, to_json

RUN_FILE = re.compile(r"run-(\d+)-(\d+)\.json")
AFTER = "floors-after.json"


def _write(path: Path, value) -> None:
    atomic_write(path, json.dumps(to_json(value), separators=(",", ":")).encode())


def save_plan(out, plan: Plan) -> None:
    _write(Path(out) / "raw" / "plan.json", plan)


def save_floors_after(out, floors: Floors) -> None:
    _write(Path(out) / "raw" / AFTER, floors)


def save_result(out, config: int, repeat: int, result: Row) -> None:
    _write(Path(out) / "raw" / f"run-{config}-{repeat}.json", result)


def merge(results: list[Row]) -> Row:
    """One row from the repeats of one configuration: latency samples pooled (per-run
    summaries and contention readings kept), throughput the median over runs, training the median run's (each run's
    images/s kept)."""
    failed = [r for r in results if not r.ok]
    if failed:
        row = failed[0]
        if len(results) > 1:
            row = replace(row, reason=f"run {results.index(row) + 1} of {len(results)}: {row.reason}")
        return row.without_measurements()
    row = replace(results[0], runs=len(results), seconds=sum(r.seconds or 0 for r in results))
    lat = [r.latency for r in results if r.latency]
    if lat:
        host = stats.summary([s for one in lat for s in one.host_us.samples or ()], keep_samples=True)
        host.runs = [replace(one.host_us, samples=None, runs=None) for one in lat]
        row.latency = Latency(host, next((one.device_us for one in lat if one.device_us), None),
                              next((one.host_enqueue_us for one in lat if one.host_enqueue_us), None),
                              [{**m, "run": n} for n, one in enumerate(lat, 1) for m in one.contention or ()] or None)
    tput = [r.throughput.images_per_s for r in results if r.throughput]
    if tput:
        row.throughput = Throughput({b: stats.median(t[b] for t in tput) for b in tput[0]},
                                    runs={b: [t[b] for t in tput] for b in tput[0]})
    row.train = median_train([r.train for r in results if r.train])
    row.train_reason = next((r.train_reason for r in results if r.train_reason), None)
    row.cut = next((f"run {i + 1} of {len(results)}: {r.cut}" if len(results) > 1 else r.cut
                    for i, r in enumerate(results) if r.cut), None)
    return breakdown.merge(row, results)


def median_train(trained: list[Train]) -> Train | None:
    """The run with the median images/s (of an even count, the slower of the middle two), with
    every run's images/s in `runs`: one real run's epochs, losses and accuracy, never a blend."""
    if not trained:
        return None
    middle = sorted(trained, key=lambda t: t.images_per_s)[(len(trained) - 1) // 2]
    return replace(middle, runs=[t.images_per_s for t in trained])


def load_plan(raw: Path) -> tuple[Plan, list[str]]:
    """raw/plan.json, and a warning for each list it lacks (taken as empty; no tiers: rows in name order)."""
    path = raw / "plan.json"
    if not os.path.lexists(path):
        raise InputError(f"{path}: no benchmark raw results (no such file)")
    try:
        data = read_json(path, InputError)
        if not isinstance(data, dict):
            raise InputError(f"{path}: {type(data).__name__} where an object (Plan) is expected")
    except InputError as exc:
        raise InputError(f"{path}: not a benchmark plan ({str(exc).removeprefix(f'{path}: ')})") from None
    warnings = [f"warning: {path}: no {key!r} (taken as empty)" for key in ("skipped", "configs", "tiers", "splits")
                if key not in data]
    data = {"skipped": [], "configs": [], **data}
    try:
        return from_json(Plan, data), warnings
    except ValueError as exc:
        raise InputError(f"{path}: not a benchmark plan ({exc})") from None


def assemble(out) -> tuple[Results, list[str]]:
    """(Results from <out>/raw/: every configuration with at least one finished run, plus the rows
    that could not run, and the CPU floor at the better of its two measurements where the run
    finished; one `warning:` line per file left out)."""
    raw = Path(out) / "raw"
    plan, warnings = load_plan(raw)
    runs: dict[int, list[tuple[int, Row]]] = {}
    for path in sorted(raw.glob("*.json")):
        match = RUN_FILE.fullmatch(path.name)
        if path.name in ("plan.json", AFTER):
            continue
        if not match:
            warnings.append(f"warning: {path}: not a run file (run-<config>-<repeat>.json), left out")
            continue
        try:
            row = load(path, Row)
        except ValueError as exc:
            warnings.append(f"warning: {exc}; left out")
            continue
        runs.setdefault(int(match[1]), []).append((int(match[2]), row))
    rows = [merge([r for _, r in sorted(runs[i], key=lambda t: t[0])]) for i in sorted(runs)] + plan.skipped
    floors = plan.floors
    if os.path.lexists(raw / AFTER):
        try:
            after = load(raw / AFTER, Floors)
            if floors.cpu and after.cpu:
                floors = replace(floors, cpu=best_of(floors.cpu, after.cpu))
        except ValueError as exc:
            warnings.append(f"warning: {exc}; the floor measured before the workers is used")
    meta = plan.meta
    meta.runs_finished = sum(len(v) for v in runs.values())
    meta.runs_planned = len(plan.configs) * meta.repeats
    order = list(plan.tiers)
    for row in rows:
        row.tier = plan.tiers.get(row.backend, row.tier)
        row.loc, row.loc_reason = _loc(plan, row.backend)
    rows.sort(key=lambda r: (order.index(r.backend) if r.backend in order else len(order), r.backend, r.device,
                             str(r.variant)))
    return Results(meta=meta, floors=floors, results=rows, splits=plan.splits), warnings


def _loc(plan: Plan, backend: str):
    """A backend's lines of code as counted when the run started, or why there are none."""
    if "loc" not in plan.meta.modes:
        return None, "not asked (--mode)"
    if backend in plan.loc:
        return plan.loc[backend], None
    return None, plan.loc_reasons.get(backend, "not counted with this run (raw results of an earlier version)")
