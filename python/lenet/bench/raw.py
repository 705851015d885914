"""The benchmark's raw results, written as the run goes, so an interrupted or crashed run keeps
what it measured; and the one document (DESIGN.md §7) assembled from them.

    <out>/raw/plan.json            meta, floors, the rows that cannot run here, each run's config
    <out>/raw/run-<i>-<r>.json     the worker result of config i, repeat r (each an atomic write)
"""
from __future__ import annotations

import json
from pathlib import Path

from .. import backends
from .._files import atomic_write
from ..errors import InputError
from . import loc, stats


def _write(path: Path, value) -> None:
    atomic_write(path, json.dumps(value, separators=(",", ":")).encode())


def save_plan(out, meta: dict, floors: dict, skipped: list[dict], configs: list[str]) -> None:
    raw = Path(out) / "raw"
    for old in raw.glob("run-*.json"):          # a new run in the same directory starts afresh
        old.unlink()
    _write(raw / "plan.json", {"meta": meta, "floors": floors, "skipped": skipped, "configs": configs})


def save_result(out, config: int, repeat: int, result: dict) -> None:
    _write(Path(out) / "raw" / f"run-{config}-{repeat}.json", result)


def merge(results: list[dict]) -> dict:
    """One row from the repeats of one configuration: latency samples pooled (per-run
    summaries kept), throughput the median over runs, training from the run that trained."""
    first = results[0]
    failed = [r for r in results if r["status"] != "ok"]
    if failed:
        row = {**failed[0]}
        if len(results) > 1:
            row["reason"] = f"run {results.index(failed[0]) + 1} of {len(results)}: {row['reason']}"
        return {k: v for k, v in row.items() if k not in ("latency_us", "throughput_ips", "train", "device_us")}
    row = {**first, "runs": len(results), "seconds": sum(r.get("seconds", 0) for r in results)}
    lat = [r["latency_us"] for r in results if r.get("latency_us")]
    if lat:
        row["latency_us"] = stats.summary([s for one in lat for s in one["samples"]], keep_samples=True)
        row["latency_us"]["runs"] = [{k: one[k] for k in ("n", "p50", "p90", "p99", "mean")} for one in lat]
    tput = [r["throughput_ips"] for r in results if r.get("throughput_ips")]
    if tput:
        row["throughput_ips"] = {b: stats.median(t[b] for t in tput) for b in tput[0]}
        row["throughput_runs"] = {b: [t[b] for t in tput] for b in tput[0]}
    row["train"] = next((r["train"] for r in results if r.get("train")), None)
    row["train_reason"] = next((r["train_reason"] for r in results if r.get("train_reason")), None)
    for key in ("device_us", "host_enqueue_us"):
        row[key] = next((r[key] for r in results if r.get(key)), None)
    return row


def assemble(out) -> dict:
    """{"meta", "floors", "results"} from <out>/raw/: every configuration that has at least one
    finished run, plus the rows that could not run; lines of code counted now."""
    raw = Path(out) / "raw"
    try:
        plan = json.loads((raw / "plan.json").read_text())
    except (OSError, ValueError) as exc:
        raise InputError(f"{raw / 'plan.json'}: no benchmark raw results ({getattr(exc, 'strerror', None) or exc})") from None
    runs: dict[int, list[tuple[int, dict]]] = {}
    for path in raw.glob("run-*-*.json"):
        config, repeat = map(int, path.stem.split("-")[1:])
        runs.setdefault(config, []).append((repeat, json.loads(path.read_text())))
    rows = [merge([r for _, r in sorted(runs[i], key=lambda t: t[0])]) for i in sorted(runs)] + plan["skipped"]
    meta = plan["meta"]
    meta["runs_finished"] = sum(len(v) for v in runs.values())
    meta["runs_planned"] = len(plan["configs"]) * meta.get("repeats", 1)
    names = backends.names()
    for row in rows:
        row.setdefault("variant", row.get("kernel"))     # raw results from before the rename: "kernel" only
        row["kernel"] = row["variant"]                   # its deprecated name, kept for readers of the first schema
        row.setdefault("layer", backends.module(row["backend"]).LAYER)
        row["loc"], row["loc_reason"] = (loc.backend_loc(row["backend"]) if "loc" in meta.get("modes", ())
                                         else (None, "not asked (--mode)"))
    rows.sort(key=lambda r: (names.index(r["backend"]) if r["backend"] in names else len(names),
                             r["device"], str(r["variant"])))
    return {"meta": meta, "floors": plan["floors"], "results": rows}
