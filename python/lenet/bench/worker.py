"""One benchmark run of one backend x device x variant, in its own fresh process.

    python -m lenet.bench.worker '{"backend": "numpy", "device": "cpu", ...}'

Correctness comes first: logits on real digits against the float64 reference (and, when
training is asked for, one SGD step against the reference's step). A backend that disagrees is
reported as "failed" with the reason and is never timed. Then, per mode: single-image latency
(MLPerf SingleStream: one image at a time through `predict`, host to host, synchronized,
warm-up excluded; on a CPU row the host's contention is read just before and after it), the
profiled per-layer run (lenet.bench.breakdown), batch throughput, training. Phases go to stderr as `@phase <text>` lines for the parent's progress display. On
stdout, one JSON line (a results.Row) each time a phase has ended, the last one the result: a
worker that dies in a phase (a crash in a backend's library, a timeout) leaves the phases before
it, which the parent keeps (runner.spawn).
"""
from __future__ import annotations

import gc
import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field, replace

import numpy as np

from .. import backends, check, data, load, model, weights
from ..errors import LenetError, UnavailableError
from . import breakdown
from .floors.cpu import contention
from .results import Latency, LogitsCheck, Row, StepCheck, Summary, Throughput, Train
from .stats import median, summary
from .typed import to_json

CHECK_IMAGES = 256         # real test digits checked as one batch ...
CHECK_SINGLE = 16          # ... and this many of them one at a time (the latency path)
CONTENTION_PAUSE_S = 0.2   # before a contention reading: this process's own thread pools stop spinning


@dataclass
class Budget:
    """How long each measurement runs; a loop stops once it has both enough samples and
    enough time, or at max_s."""
    warmup_calls: int = 20
    warmup_s: float = 1.0
    latency_samples: int = 1000
    latency_s: float = 2.0
    max_s: float = 30.0
    throughput_calls: int = 5
    throughput_s: float = 1.0
    train_images: int | None = None      # None: the whole training set
    layer_forwards: int = 200            # profiled single-image forwards (--mode layers)

    @classmethod
    def quick(cls) -> "Budget":
        return cls(warmup_calls=3, warmup_s=0.05, latency_samples=30, latency_s=0.2, max_s=1.5,
                   throughput_calls=2, throughput_s=0.1, train_images=256, layer_forwards=10)


@dataclass
class Config:
    backend: str
    device: str = "cpu"
    variant: str | None = None
    modes: tuple = ("latency", "throughput", "train")
    batch_sizes: tuple = (1, 8, 64, 256)
    epochs: int = 2
    dataset: str | None = None
    data: str | None = None
    weights: str | None = None
    quick: bool = False
    budget: Budget = field(default_factory=Budget)


_phase = ["starting"]      # the phase this worker is in


def phase(text: str) -> None:
    _phase[0] = text
    print(f"@phase {text}", file=sys.stderr, flush=True)


def one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text if isinstance(exc, LenetError) else f"{type(exc).__name__}: {text}".rstrip(": ")


# --- correctness ----------------------------------------------------------------------

def check_logits(net, params, x) -> LogitsCheck:
    """Logits of `net` on `x` (as one batch and image by image) against the float64 reference."""
    ref = check.reference_logits(params, x)
    worst, reason = 0.0, None
    for what, got, want in (("batch", net.predict(x), ref),
                            ("single", np.concatenate([net.predict(x[i:i + 1]) for i in range(CHECK_SINGLE)]),
                             ref[:CHECK_SINGLE])):
        reason = check.logits_reason(got, want)
        if reason:
            reason = f"{what} logits: {reason}"
            break
        worst = max(worst, check.relative_error(got, want))
    return LogitsCheck(ok=reason is None, max_rel_err=worst, n=len(x), n_single=CHECK_SINGLE, reason=reason)


# --- timing ---------------------------------------------------------------------------

def _until(budget_calls: int, budget_s: float, max_s: float, fn) -> list[float]:
    """Call fn() -> seconds until there are budget_calls samples and budget_s seconds, or max_s."""
    samples, total = [], 0.0
    while (len(samples) < budget_calls or total < budget_s) and (total < max_s or len(samples) < 3):
        samples.append(fn())
        total += samples[-1]
    return samples


def latency(net, images, budget: Budget) -> Summary:
    """Single-image latency in µs through net.predict, cycling over real digits; the garbage
    collector is paused while timing."""
    xs = [np.ascontiguousarray(images[i:i + 1]) for i in np.random.default_rng(0).permutation(len(images))]
    i = 0

    def one():
        nonlocal i
        x = xs[i % len(xs)]
        i += 1
        start = time.perf_counter()
        net.predict(x)
        return time.perf_counter() - start

    _until(budget.warmup_calls, budget.warmup_s, budget.max_s, one)
    gc.collect()
    gc.disable()
    try:
        samples = _until(budget.latency_samples, budget.latency_s, budget.max_s, one)
    finally:
        gc.enable()
    return summary([s * 1e6 for s in samples], keep_samples=True)


def host_contention(cfg: Config) -> dict | None:
    """For a CPU row, how contended the host is now (floors.cpu.contention), after CONTENTION_PAUSE_S;
    None for a GPU row or without numba."""
    if cfg.device != "cpu":
        return None
    time.sleep(CONTENTION_PAUSE_S)
    try:
        return contention(cfg.quick)
    except ImportError:
        return None


def enqueue_split(net, images, n: int) -> dict[str, Summary]:
    """Host time to enqueue upload + forward (no wait) against the whole predict, µs."""
    enqueue, total = [], []
    for k in range(n):
        x = np.ascontiguousarray(images[k * 7 % len(images)][None])
        start = time.perf_counter()
        out = net.forward(net.upload(x))
        queued = time.perf_counter()
        net.download(out)
        enqueue.append((queued - start) * 1e6)
        total.append((time.perf_counter() - start) * 1e6)
    return {"enqueue": summary(enqueue), "total": summary(total)}


def throughput(net, images, batch_sizes, budget: Budget) -> dict:
    """{batch: median images/s over calls} after two warm-up calls per batch size."""
    out = {}
    for b in batch_sizes:
        x = np.ascontiguousarray(images[np.resize(check.spread(b, len(images)), b)])   # real digits

        def one(x=x):                       # this batch size's images
            start = time.perf_counter()
            net.predict(x)
            return time.perf_counter() - start

        for _ in range(2):                  # warm-up
            one()
        out[str(b)] = median(b / s for s in _until(budget.throughput_calls, budget.throughput_s, budget.max_s, one))
    return out


def train(net, ds, epochs: int, n_images: int | None) -> Train:
    """Plain SGD from the seeded init with the shared hyper-parameters; per-epoch times."""
    from ..training import evaluate, run_epoch

    pick = check.spread(n_images or len(ds.train_x), len(ds.train_x))
    x, y = ds.train_x[pick], ds.train_y[pick]
    times, losses = [], []
    for epoch in range(epochs):
        start = time.perf_counter()
        losses.append(run_epoch(net, x, y, model.LEARNING_RATE, model.BATCH_SIZE, model.SEED, epoch))
        net.synchronize()
        times.append(time.perf_counter() - start)
    steady = times[1:] or times
    epoch_s = sum(steady) / len(steady)
    return Train(images_per_s=len(x) / epoch_s, epoch_s=epoch_s if len(times) > 1 else None,
                 first_epoch_s=times[0], epoch_times_s=times, losses=[float(v) for v in losses], epochs=epochs,
                 images=len(x), dataset=ds.name, accuracy=float(evaluate(net, ds.test_x, ds.test_y)),
                 learning_rate=model.LEARNING_RATE, batch_size=model.BATCH_SIZE)


# --- one run --------------------------------------------------------------------------

def measure(net, cfg: Config, digits, params, train_net=None, train_ds=None, keep=lambda row: None) -> Row:
    """Check `net` against the reference, then time it. `digits` is the embedded dataset
    (correctness, accuracy, latency inputs); `train_net` a fresh net from the seeded init;
    `keep(row)` gets the row so far after each timed phase."""
    from ..training import evaluate

    result = Row(backend=cfg.backend, device=cfg.device, variant=cfg.variant, status="ok")
    phase("checking logits against the reference")
    result.check = logits = check_logits(net, params, digits.test_x[check.spread(CHECK_IMAGES, len(digits.test_x))])
    if not logits.ok:
        return replace(result, status="failed", reason=logits.reason)
    if "train" in cfg.modes and train_net is not None:
        phase("checking one SGD step against the reference")
        try:
            x, y = check.step_batch(params, digits.test_x, digits.test_y, model.BATCH_SIZE)   # held out
            result.step_check = step = StepCheck(**check.step(load(cfg.backend, cfg.device, params, cfg.variant),
                                                              params, x, y, rtol=check.GATE_STEP_RTOL))
            if not step.ok:
                return replace(result, status="failed", reason=step.reason)
        except UnavailableError as exc:
            train_net = None
            result.train_reason = one_line(exc)
    elif "train" in cfg.modes:
        result.train_reason = backends.training_unavailable(cfg.backend)   # run() loaded nothing to train
    phase("accuracy of the weights on the test digits")
    result.accuracy = float(evaluate(net, digits.test_x, digits.test_y))
    keep(result)
    b = cfg.budget
    if "latency" in cfg.modes:
        phase("single-image latency")
        before = host_contention(cfg)
        result.latency = lat = Latency(latency(net, digits.test_x, b))
        readings = [{**m, "when": when} for when, m in (("before", before), ("after", host_contention(cfg))) if m]
        lat.contention = readings or None
        if cfg.device == "gpu":
            times = net.device_times_us(digits.test_x[:1].copy(), lat.host_us.n)
            lat.device_us = {what: summary(t) for what, t in times.items()} if times else None
            lat.host_enqueue_us = enqueue_split(net, digits.test_x, min(lat.host_us.n, 500))
        keep(result)
    if "layers" in cfg.modes:
        phase("per-layer times (profiled)")
        start = time.perf_counter()
        result.layers = breakdown.layer_times(net, digits.test_x, b.layer_forwards,
                                              lambda one: _until(b.warmup_calls, b.warmup_s, b.max_s, one))
        result.layers.seconds = time.perf_counter() - start
        if "latency" not in cfg.modes and result.layers.samples_us:
            phase("single-image latency, for the dispatch overhead")
            result.layers.host_us = latency(net, digits.test_x, b)
        keep(result)
    if "throughput" in cfg.modes:
        phase("batch throughput")
        result.throughput = Throughput(throughput(net, digits.test_x, cfg.batch_sizes, b))
        keep(result)
    if "train" in cfg.modes and train_net is not None:
        phase(f"training {cfg.epochs} epoch(s)")
        result.train = train(train_net, train_ds, cfg.epochs, b.train_images)
    return result


def run(cfg: Config, keep=lambda row: None) -> Row:
    """Load everything for `cfg` and measure; every failure becomes a status and a reason.
    `keep(row)` gets the row so far after each timed phase, in the result's form."""
    head = {"backend": cfg.backend, "device": cfg.device, "variant": cfg.variant}
    start = time.perf_counter()

    def finished(row: Row) -> Row:
        return replace(row, **head, pid=os.getpid(), seconds=time.perf_counter() - start)
    kept: list[Row] = []

    def keep_row(row: Row) -> None:
        kept[:] = [finished(row)]
        keep(kept[0])
    try:
        phase("loading")
        digits = data.embedded()
        params = weights.load(cfg.weights)
        net = load(cfg.backend, cfg.device, params, cfg.variant)
        variant = net.variant if net.variant is not None else cfg.variant
        head.update(variant=variant, runtime=net.runtime)                     # as loaded
        train_net = train_ds = None
        if "train" in cfg.modes and not backends.training_unavailable(cfg.backend):   # not for an inference engine
            train_ds = digits if cfg.dataset in (None, "embedded") and cfg.data is None else data.load(cfg.dataset, cfg.data)
            train_net = load(cfg.backend, cfg.device, model.init_params(), cfg.variant)
        result = measure(net, cfg, digits, params, train_net, train_ds, keep_row)
    except UnavailableError as exc:
        result = Row(**head, status="unavailable", reason=one_line(exc))
    except Exception as exc:  # a broken backend is a result, not a crash of the benchmark
        if os.environ.get("LENET_DEBUG"):
            raise
        result = (replace(kept[0], cut=f"{one_line(exc)} (while {_phase[0]})") if kept       # checked: keep the rest
                  else Row(**head, status="failed", reason=one_line(exc)))
    return finished(result)


def config_from_json(text: str) -> Config:
    raw = json.loads(text)
    budget = Budget(**raw.pop("budget", {}))
    for key in ("modes", "batch_sizes"):
        if key in raw:
            raw[key] = tuple(raw[key])
    return Config(**raw, budget=budget)


def config_to_json(cfg: Config) -> str:
    return json.dumps(asdict(cfg))


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    cfg = config_from_json(argv[0])
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)                  # whatever a backend prints goes to stderr, not into the result

    def write(row: Row) -> None:
        out.write(json.dumps(to_json(row)) + "\n")
        out.flush()
    write(run(cfg, write))
    return 0


if __name__ == "__main__":
    sys.exit(main())
