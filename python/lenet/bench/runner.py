"""Running the benchmark's child processes: one fresh worker per run, interleaved over the
repeats, with progress on stderr; the floors in their own process. Every child dies with the
benchmark (child.py), and the worker's result comes back through a pipe (no temporary files)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

from tqdm import tqdm

from . import raw
from .child import die_with_parent
from .progress import Progress, duration
from .results import Floors, Row
from .typed import from_json
from .worker import Config, config_to_json


_signals: list[int] = []


class Signalled(KeyboardInterrupt):
    """The run was stopped by signal `signum`: the CLI exits 128 + signum, as shells do."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def on_signal(signum, frame) -> None:
    """Ctrl-C and SIGTERM end the run as a KeyboardInterrupt: worker killed, results kept. Python
    drops an exception raised where it cannot be delivered (in the after-fork callbacks that
    Popen runs, for one), so the signal is also remembered and `stop_if_signalled` raises again."""
    _signals.append(signum)
    raise Signalled(signum)


def stop_if_signalled() -> None:
    if _signals:
        raise Signalled(_signals[0])


def kill(proc) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def spawn(cfg: Config, timeout: float, on_phase) -> Row:
    """Run one worker process; its result, or a row saying what happened. The worker prints its
    row so far on stdout after each phase (the last line its result) and its phases on stderr; it
    dies with this process. A worker that dies after its check passed leaves its row so far, with
    `cut` saying how it ended; one that dies before is a "failed" row."""
    head = {"backend": cfg.backend, "device": cfg.device, "variant": cfg.variant}
    cmd = [sys.executable, "-m", "lenet.bench.worker", config_to_json(cfg)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, encoding="utf-8",
                            errors="replace", start_new_session=True, preexec_fn=die_with_parent())
    stdout: list[str] = []
    reader = threading.Thread(target=lambda: stdout.append(proc.stdout.read()), daemon=True)
    reader.start()
    timer = threading.Timer(timeout, kill, (proc,))
    timer.daemon = True                       # never what keeps a stopped benchmark from exiting
    last, current = "", "starting"
    try:
        timer.start()                         # inside: a signal during its start kills the worker too
        stop_if_signalled()
        for line in proc.stderr:
            line = line.strip()
            if line.startswith("@phase "):
                current = line[7:]
                on_phase(current)
            elif line:
                last = line
        code = proc.wait()
        reader.join()
    except BaseException:                     # interrupted: the worker must not run on alone
        kill(proc)
        raise
    finally:
        timed_out = not timer.is_alive() and proc.returncode != 0
        timer.cancel()
    rows = (stdout or [""])[0].splitlines()
    if code == 0 and not timed_out:                         # its last line is its result
        try:
            return from_json(Row, json.loads(rows[-1]))
        except (ValueError, IndexError) as exc:
            return Row(**head, status="failed", reason=f"worker result unreadable: {' '.join(str(exc).split())}")
    kept = None
    for line in reversed(rows):                             # the last whole row: it may have died mid-line
        try:
            kept = from_json(Row, json.loads(line))
            break
        except ValueError:
            continue
    if timed_out:
        why = f"timed out after {timeout:g} s (while {current})"
    else:
        how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exited with status {code}"
        why = f"worker {how} while {current}" + (f": {last}" if last else "")
    if kept and kept.ok:
        return replace(kept, cut=why)
    return Row(**head, status="failed", reason=why)


def measure_all(out: Path, runs: list[Config], repeats: int, timeout: float) -> None:
    """Every run, interleaved over the repeats (each repeat rotated by one), each result kept in
    <out>/raw/ as it finishes; progress on stderr: what runs, what is left, the time left."""
    order = [(r, (i + r) % len(runs)) for r in range(repeats) for i in range(len(runs))]
    progress = Progress(order)
    with tqdm(total=len(order), unit="run", file=sys.stderr, disable=None,
              bar_format="{desc} {n_fmt}/{total_fmt} done [{elapsed}{postfix}]") as bar:
        for repeat, i in order:
            cfg = runs[i]
            label = f"{cfg.backend}/{cfg.device}/{cfg.variant or '-'} #{repeat + 1}"
            bar.set_description(label)
            bar.set_postfix_str(f"~{duration(progress.left_s())} left")
            start = time.monotonic()
            result = spawn(cfg, timeout, lambda text: bar.set_postfix_str(f"{text[:40]}; ~{duration(progress.left_s())} left"))
            raw.save_result(out, i, repeat, result)
            stop_if_signalled()
            progress.finished(repeat, i, time.monotonic() - start)
            lat = result.latency and result.latency.host_us
            bar.write(f"{label}: {result.status}" + (f" ({result.reason})" if result.reason else
                      f", p90 {lat.p90:.0f} us" if lat else "") + f"  [{progress.status()}]", file=sys.stderr)
            bar.update()


def measure_floors(quick: bool, gpu: bool) -> Floors:
    """The floors, in their own process (a GPU context must not linger in this one)."""
    cmd = [sys.executable, "-m", "lenet.bench.floors"] + (["--quick"] if quick else []) + ([] if gpu else ["--no-gpu"])
    done = subprocess.run(cmd, capture_output=True, text=True, encoding="utf-8", errors="replace",
                          preexec_fn=die_with_parent())
    stop_if_signalled()
    try:
        if done.returncode == 0:
            return from_json(Floors, json.loads(done.stdout))
        reason = (done.stderr.strip().splitlines() or ["no output"])[-1]
    except ValueError as exc:
        reason = f"unreadable output: {' '.join(str(exc).split())}"
    return Floors(cpu_reason=f"floors failed: {reason}", gpu_reason=f"floors failed: {reason}")
