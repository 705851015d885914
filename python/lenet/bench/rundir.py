"""A run's output directory and its identity: one run at a time per directory, and the previous
run's results moved aside (never deleted) when a new run starts there.

    <out>/.lock                   held (flock) by the run writing <out>; released when it ends or dies
    <out>/previous/<run id>/      an earlier run's raw/, results.json, results.md and plots
"""
from __future__ import annotations

import datetime
import fcntl
import os
from pathlib import Path

from .._files import read_json
from ..errors import InputError

REPORT_FILES = ("results.json", "results.md", "*.png")


def new_run_id() -> str:
    """UTC start time and process id: unique on one machine, sortable by time."""
    return f"{datetime.datetime.now(datetime.timezone.utc):%Y%m%dT%H%M%SZ}-{os.getpid()}"


def lock(out: Path):
    """Hold <out>/.lock for this process's lifetime (the kernel releases it however the process
    ends); an InputError naming the run that holds it."""
    fd = os.open(out / ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        holder = _describe(out / "raw" / "plan.json")
        raise InputError(f"{out} is in use by another benchmark run{holder}: wait for it to end "
                         "or pass another --out") from None
    return fd


def _describe(plan: Path) -> str:
    """" (run <id>, `<command>`)" from a plan.json, or "" if it cannot be read."""
    try:
        meta = read_json(plan, InputError)["meta"]
        return f" (run {meta.get('run_id') or '?'}: `{meta.get('command')}`)"
    except (InputError, KeyError, TypeError, AttributeError):
        return ""


def _previous_id(out: Path) -> str:
    """The run id of the results in <out>, or one made from their time."""
    try:
        run_id = read_json(out / "raw" / "plan.json", InputError)["meta"]["run_id"]
        if isinstance(run_id, str) and run_id and "/" not in run_id and not run_id.startswith("."):
            return run_id
    except (InputError, KeyError, TypeError):
        pass
    newest = max((p.stat().st_mtime for p in _earlier_files(out)), default=0)
    return f"{datetime.datetime.fromtimestamp(newest, datetime.timezone.utc):%Y%m%dT%H%M%SZ}-earlier"


def _earlier_files(out: Path) -> list[Path]:
    found = [out / "raw"] if (out / "raw").exists() else []
    for pattern in REPORT_FILES:
        found += sorted(out.glob(pattern))
    return found


def move_previous(out: Path) -> Path | None:
    """Move an earlier run's files in <out> (raw/, the report) to <out>/previous/<its run id>/;
    where they went, or None if there were none. Call with the lock held."""
    files = _earlier_files(out)
    if not files:
        return None
    base = out / "previous" / _previous_id(out)
    dest, n = base, 1
    while dest.exists():
        n += 1
        dest = base.with_name(f"{base.name}.{n}")
    dest.mkdir(parents=True)
    for path in files:
        os.replace(path, dest / path.name)
    return dest
