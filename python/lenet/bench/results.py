"""The benchmark's files, typed: one definition for the worker, the raw results, the report,
bench/gpu_summary.py and schema.json (generated from these classes:
`python -m lenet.bench.results > python/lenet/bench/schema.json`; a test checks it is current).

A field renamed here is renamed everywhere, and a file that does not fit is refused naming the
place (`load`, `from_json`). New measurements add a field with a default of None, so that the
files of earlier runs still load.
"""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from .._files import read_json
from ..errors import InputError
from .typed import from_json, schema, to_json

Device = Literal["cpu", "gpu"]
Status = Literal["ok", "failed", "unavailable"]
Tier = Literal["reference", "native", "raw kernels", "framework", "peer"]
Mode = Literal["latency", "throughput", "train", "loc", "layers"]
NON_NEGATIVE = {"minimum": 0}
POSITIVE = {"exclusiveMinimum": 0}


@dataclass
class Summary:
    """Timing samples summarised: nearest-rank percentiles (lenet.bench.stats)."""
    n: int = field(metadata={"minimum": 1})
    p50: float = field(metadata=NON_NEGATIVE)
    p90: float = field(metadata=NON_NEGATIVE)
    p99: float = field(metadata=NON_NEGATIVE)
    mean: float = field(metadata=NON_NEGATIVE)
    min: float | None = None
    max: float | None = None
    samples: list[float] | None = None     # latency rows keep every sample, µs to 10 ns
    runs: list[Summary] | None = None      # a merged row: each run's own summary, without samples


@dataclass
class LogitsCheck:
    """Logits against the float64 reference, as one batch and image by image."""
    ok: bool
    max_rel_err: float
    n: int
    n_single: int
    reason: str | None


@dataclass
class StepCheck:
    """One SGD step against the float64 reference's (lenet.check.step, at the benchmark's limit)."""
    ok: bool
    max_rel_err: float | None              # the worst tensor's; None where the loss or names failed first
    reason: str | None


@dataclass
class Train:
    """Plain SGD from the seeded init with the shared hyper-parameters."""
    images_per_s: float = field(metadata=POSITIVE)
    epoch_s: float | None = field(metadata=POSITIVE)       # mean of the epochs after the first
    first_epoch_s: float = field(metadata=POSITIVE)
    accuracy: float = field(metadata={"minimum": 0, "maximum": 1})
    epoch_times_s: list[float] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    epochs: int = 0
    images: int = 0
    dataset: str = ""
    learning_rate: float = 0.0
    batch_size: int = 0
    runs: list[float] | None = None        # a merged row: each run's images/s, in run order; the fields above are the median run's


@dataclass
class LocFile:
    path: str
    language: str
    code: int
    comment: int
    blank: int


@dataclass
class Loc:
    """Lines of a backend's SOURCES (lenet.bench.loc), counted when the run started."""
    code: int = field(metadata=NON_NEGATIVE)
    comment: int = field(metadata=NON_NEGATIVE)
    blank: int = field(metadata=NON_NEGATIVE)
    files: list[LocFile] = field(default_factory=list)


@dataclass
class Latency:
    """--mode latency: one image at a time through predict, µs (a merged row: every run's samples
    pooled, each run's summary in host_us.runs and its contention readings in contention; the GPU
    times are the first run's that has them)."""
    host_us: Summary                       # host to host: upload, forward, download, synchronised
    device_us: dict[str, Summary] | None = field(   # GPU rows: CUDA-event times without the copies
        default=None, metadata={"propertyNames": {"enum": ["forward", "kernels"]}})
    host_enqueue_us: dict[str, Summary] | None = None   # GPU rows: host time to enqueue vs whole predict
    contention: list[dict] | None = None   # CPU rows: the host's contention (floors.cpu.contention) just before
                                           # the warm-up and after the timed calls ("when"; merged: each "run")


@dataclass
class Throughput:
    """Batch throughput: images/s per batch size, the median over timed calls (a merged row: the
    median over runs, and each run's in `runs`)."""
    images_per_s: dict[str, float] = field(metadata={"propertyNames": {"pattern": "^[1-9][0-9]*$"}})
    runs: dict[str, list[float]] | None = None


@dataclass
class Layers:
    """--mode layers (lenet.bench.breakdown): one run's profiled samples, then the merged row's p50
    per layer and the dispatch overhead; or why there are none."""
    method: str | None = None              # how the backend measured its layers
    reason: str | None = None              # why there are no layer times
    seconds: float | None = field(default=None, metadata=NON_NEGATIVE)   # the profiled runs, summed
    samples_us: dict[str, list[float]] | None = None    # one run: µs per profiled forward
    handoff_samples_us: list[float] | None = None       # one run: Net.handoffs_us, where recorded
    row_splits: int | None = None                       # one run: Net.row_splits, where recorded
    host_us: Summary | None = None         # one run without the latency mode: host→host for the overhead
    us: dict[str, float] | None = field(default=None, metadata={
        "description": "p50 µs of each layer (lenet.model.LAYERS) or fused group ('conv1+pool1') of one "
                       "single-image forward, in forward order",
        "propertyNames": {"pattern": "^(conv1|pool1|conv2|pool2|fc1|fc2)(\\+(conv1|pool1|conv2|pool2|fc1|fc2))*$"}})
    detail_us: dict[str, Summary] | None = None     # each layer's summary over all runs
    overhead_us: float | None = field(default=None, metadata={
        "description": "host→host p50 minus the sum of us (negative: see overhead_warning)"})
    overhead_host_us: float | None = None  # the host→host p50 it used ...
    overhead_from: Literal["latency", "layers"] | None = None   # ... from the latency mode, or the layers mode's own
    overhead_warning: str | None = None
    handoff_us: Summary | None = field(default=None, metadata={
        "description": "how long after a fused group began a helper thread started on its half (cblas "
                       "threads), over every run's profiled forwards; runs: each run's"})
    row_split_share: float | None = field(default=None, metadata={
        "minimum": 0, "maximum": 1,
        "description": "the share of the profiled forwards that split one image over two threads by output "
                       "rows instead of channels (cblas: where its recent images took less time that way)"})
    cuts: list[list[int]] | None = field(default=None, metadata={
        "description": "cblas threads, per run: where one image's work was cut between its two threads as "
                       "the latency phase left it, the calling thread's conv1 and conv2 output channels and "
                       "fc1 rows (of 20, 50 and 500); the cuts move to the thread that runs faster"})


# the flat fields of rows before Layers, and their names in it
FLAT_LAYER_FIELDS = {"layers_method": "method", "layers_reason": "reason", "layers_s": "seconds",
                     "layer_samples_us": "samples_us", "layers_host_us": "host_us", "layers_us": "us",
                     "layers_detail_us": "detail_us", "overhead_us": "overhead_us",
                     "overhead_host_us": "overhead_host_us", "overhead_from": "overhead_from",
                     "overhead_warning": "overhead_warning"}
# the flat fields of rows before Latency, and their names in it
FLAT_LATENCY_FIELDS = {"latency_us": "host_us", "device_us": "device_us", "host_enqueue_us": "host_enqueue_us"}


@dataclass
class Row:
    """One backend x device x variant: a worker's result, or the merge of its repeats."""
    backend: str
    device: Device
    variant: str | None = field(metadata={"description": "the backend's variant (--variant); null where it has none"})
    status: Status
    reason: str | None = None
    runtime: str | None = None             # what a loaded net runs on, as it says (lenet.net.Net.runtime)
    tier: Tier | None = None               # the rung of the stack (lenet.backends.TIERS)
    pid: int | None = None                 # the worker process (of the first run)
    seconds: float | None = None           # worker wall time, summed over runs
    runs: int | None = None                # finished runs merged into this row
    accuracy: float | None = field(default=None, metadata={"minimum": 0, "maximum": 1})
    check: LogitsCheck | None = None
    step_check: StepCheck | None = None
    latency: Latency | None = None         # --mode latency
    throughput: Throughput | None = None
    train: Train | None = None
    train_reason: str | None = None
    loc: Loc | None = None
    loc_reason: str | None = None
    layers: Layers | None = None           # --mode layers
    cut: str | None = field(default=None, metadata={
        "description": "how the worker ended before its last phase (killed, timed out): the phases it "
                       "finished are kept, the others are missing"})

    __schema_extra__ = {"allOf": [
        {"if": {"properties": {"status": {"const": "ok"}}},
         "then": {"properties": {"reason": {"type": "null"}, "accuracy": {"type": "number"},
                                 "check": {"type": "object"}}},
         "else": {"properties": {"reason": {"type": "string"}, "latency": {"type": "null"},
                                 "throughput": {"type": "null"}, "train": {"type": "null"}}}}]}

    @staticmethod
    def upgrade(data: dict) -> dict:
        """Rows of earlier versions: "kernel" was renamed "variant", "layer" (the stack's rung) "tier",
        a keras row's "keras_backend" became its runtime, the flat layers_*/overhead_* fields one
        Layers record, throughput_ips/throughput_runs one Throughput and latency_us (as host_us),
        device_us and host_enqueue_us one Latency."""
        for name, fields in (("layers", FLAT_LAYER_FIELDS), ("latency", FLAT_LATENCY_FIELDS)):
            flat = {new: data.pop(old) for old, new in fields.items() if old in data}
            if any(v is not None for v in flat.values()):
                data.setdefault(name, flat)
        ips, runs = data.pop("throughput_ips", None), data.pop("throughput_runs", None)
        if ips:
            data.setdefault("throughput", {"images_per_s": ips, "runs": runs})
        data.setdefault("variant", data.pop("kernel", None))
        data.setdefault("tier", data.pop("layer", None))
        keras = data.pop("keras_backend", None)
        data.setdefault("runtime", keras and f"Keras on {keras}")
        return data

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def without_measurements(self) -> Row:
        """This row as a failure: nothing measured is kept."""
        reason = self.layers and self.layers.reason
        return Row(**{**self.__dict__, "latency": None, "throughput": None, "train": None,
                      "layers": Layers(reason=reason) if reason else None})


@dataclass
class PerCores:
    one_core: float = field(metadata=POSITIVE)
    all_cores: float = field(metadata=POSITIVE)


@dataclass
class CpuFloor:
    """The CPU roofline per image: the larger of the arithmetic at the measured SGEMM rate and
    the weights read once at the measured read rate; and the chained floor of one image, its layers
    in sequence (lenet.bench.floors.cpu)."""
    multiply_adds_per_image: int = field(metadata={"minimum": 1})
    weight_bytes: int = field(metadata={"minimum": 1})
    sgemm_gmacs_per_s: PerCores
    arithmetic_us: PerCores
    weights_read_us: PerCores | None
    read_reason: str | None
    floor_us: PerCores
    images_per_s_ceiling: float = field(metadata=POSITIVE)
    chained_us: PerCores | None = None     # one image, the layers in sequence (None: a run before it existed)
    layer_bounds_us: dict[str, float] | None = None   # each layer's term of chained_us, all cores
    cores: int | None = None               # usable cores (the process's CPU affinity)
    sgemm_n: int | None = None
    sgemm_runs: int | None = None
    sgemm_threads_gmacs_per_s: float | None = None
    blas: dict | None = None               # threadpoolctl's view of the SGEMM's BLAS: kernel, threads
    blas_env_cleared: list[str] | None = None   # variables cleared in the SGEMM's process
    read: dict | None = None               # the read-bandwidth measurement
    measured: list[dict] | None = None     # a run's floor: the rates measured before and after its workers
    contention: list[dict] | None = None   # the host's contention (floors.cpu.contention), before and after
    how: str = ""


@dataclass
class GpuFloor:
    """The GPU floors: host->host (two tiny copies and an empty launch, one wait: chain_us; files
    before it summed the three, each with its own wait) and kernel-only (lenet.bench.floors.gpu)."""
    device_name: str
    launch_sync_us: Summary
    h2d_3kb_us: Summary
    d2h_40b_us: Summary
    host_to_host_floor_us: float = field(metadata=POSITIVE)
    dtod_bytes_per_s: float = field(metadata=POSITIVE)
    fp32_fma_per_s_measured: float = field(metadata=POSITIVE)
    fp32_fma_per_s_peak: float | None = field(metadata=POSITIVE)
    kernel_arithmetic_us: float = field(metadata=POSITIVE)
    kernel_weights_read_us: float = field(metadata=POSITIVE)
    kernel_floor_us: float = field(metadata=POSITIVE)
    compute_capability: str | None = None
    sm_count: int | None = None
    clock_mhz: float | None = None
    dtod_copy_bytes: int | None = None
    fp32_fma_per_clk_per_sm: int | None = None
    chain_us: Summary | None = None
    how: str = ""


@dataclass
class Floors:
    """What no backend can beat on this machine, measured in the same run; why a floor is missing."""
    cpu: CpuFloor | None = None
    gpu: GpuFloor | None = None
    cpu_reason: str | None = None
    gpu_reason: str | None = None


@dataclass
class Meta:
    """The run: when, what command, which machine and packages, which protocol."""
    date: str = ""
    command: str = ""
    run_id: str | None = None              # this run's identity: every raw file of the run carries it
    python: str = ""
    platform: str = ""
    cpu: str = ""
    cpu_count: int | None = None
    cpu_affinity: int | None = None
    load_average: list[float] | None = None
    gpus: list[dict] | None = None
    cuda: dict | None = None
    versions: dict[str, str] = field(default_factory=dict)
    git: dict = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    repeats: int = field(default=1, metadata={"minimum": 1})
    modes: list[Mode] = field(default_factory=list)
    batch_sizes: list[int] = field(default_factory=list)
    epochs: int | None = None
    quick: bool = False
    budget: dict = field(default_factory=dict)
    percentiles: str = ""
    throughput: str = ""
    runs_finished: int | None = None
    runs_planned: int | None = None


@dataclass
class Split:
    """A comparison the report draws (a backend's SPLITS, kept in the run's plan): the p50 of `row`
    (backend, device, variant) split into its arithmetic (Σ its layers), the dispatch of `base` (the
    same ops without the top layer: its p50 less Σ its layers) and the rest, the top layer's own."""
    title: str
    row: list[str] = field(metadata={"minItems": 3, "maxItems": 3})
    base: list[str] = field(metadata={"minItems": 3, "maxItems": 3})
    text: str                              # str.format fields: total, top, dispatch, arithmetic, base (µs; *_share: %)


@dataclass
class Results:
    """results.json: the run, its floors, one row per backend x device x variant, its comparisons."""
    meta: Meta
    floors: Floors
    results: list[Row]
    splits: list[Split] = field(default_factory=list)

    def dumps(self) -> str:
        """Compact JSON: the raw samples make up most of it (results.md is the readable form)."""
        return json.dumps(to_json(self), separators=(",", ":")) + "\n"


@dataclass
class Plan:
    """raw/plan.json, written before the first worker starts: the run, its floors, what it will run
    (configs, "backend/device/variant"), the rows that cannot run here, every backend's tier in
    the report's order and comparisons, and each backend's lines of code counted from the tree that ran."""
    meta: Meta
    floors: Floors
    skipped: list[Row]
    configs: list[str]
    tiers: dict[str, Tier] = field(default_factory=dict)
    splits: list[Split] = field(default_factory=list)
    loc: dict[str, Loc] = field(default_factory=dict)
    loc_reasons: dict[str, str] = field(default_factory=dict)


def load(path, tp=Results):
    """File `path` as type `tp` (results.json as Results, a raw file as its type); InputError naming
    the file and the place that does not fit, in one line."""
    path = Path(path)
    data = read_json(path, InputError)
    try:
        return from_json(tp, data)
    except ValueError as exc:
        raise InputError(f"{path}: {' '.join(str(exc).split())}") from None


def json_schema() -> dict:
    return {**schema(Results), "title": "lenet benchmark results (python -m lenet.bench)"}


if __name__ == "__main__":
    sys.stdout.write(json.dumps(json_schema(), indent=1, ensure_ascii=False) + "\n")
