"""Floors (lenet.bench.floors) on known cases, and how the report shows them and the GPU device times."""
import os
import platform
import re
import shutil
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest
from lenet.bench import markdown, report
from lenet.bench.floors import cpu, gpu, ptx
from lenet.bench.results import PerCores, Results
from lenet.bench.stats import summary
from lenet.bench.typed import from_json, to_json
from lenet.model import MULTIPLY_ADDS, NUM_PARAMS

from test_bench import validate


def _lat(p50):
    return to_json(summary([p50 * 0.9, p50, p50, p50 * 1.25, p50 * 2], keep_samples=True))


def _row(backend, device, variant, p50, device_us=None, tier="raw kernels"):
    return {"backend": backend, "device": device, "variant": variant, "tier": tier,
            "status": "ok", "reason": None,
            "accuracy": 0.99, "check": {"ok": True, "max_rel_err": 0.0, "n": 256, "n_single": 16, "reason": None},
            "latency": {"host_us": _lat(p50), "device_us": device_us},
            "throughput_ips": {"1": 1e6 / p50, "64": 64e6 / (4 * p50)}, "train": None,
            "loc": {"code": 100, "comment": 10, "blank": 5}}


def gpu_doc() -> dict:
    """A hand-made results.json with CPU and GPU rows and both floors (made-up numbers, so that
    every derived cell is known: floors 10 µs CPU on all cores, 8 µs GPU host to host; each
    latency's p90 and p99 are twice its p50)."""
    cpu_floor = {"multiply_adds_per_image": MULTIPLY_ADDS, "weight_bytes": NUM_PARAMS * 4, "cores": 2,
                 "sgemm_gmacs_per_s": {"one_core": 50.0, "all_cores": 229.3},
                 "read": {"cores": 2, "one_core_bytes_per_s": 100e9, "all_cores_bytes_per_s": 200e9},
                 "read_reason": None,
                 "arithmetic_us": {"one_core": 45.86, "all_cores": 10.0},
                 "weights_read_us": {"one_core": 17.24, "all_cores": 8.62},
                 "floor_us": {"one_core": 45.86, "all_cores": 10.0}, "images_per_s_ceiling": 43610.0}
    gpu_floor = {"device_name": "NVIDIA H100 80GB HBM3", "sm_count": 132, "launch_sync_us": _lat(4.0),
                 "h2d_3kb_us": _lat(2.5), "d2h_40b_us": _lat(1.5), "chain_us": _lat(8.0), "host_to_host_floor_us": 8.0,
                 "dtod_bytes_per_s": 3.0e12, "fp32_fma_per_s_measured": 32e12, "fp32_fma_per_s_peak": 33.45e12,
                 "kernel_arithmetic_us": 0.0717, "kernel_weights_read_us": 0.575, "kernel_floor_us": 0.575}
    return {
        "meta": {"date": "2026-11-23", "command": "python -m lenet.bench --device gpu", "python": "3.12",
                 "cpu": "test CPU", "cpu_affinity": 2, "versions": {"lenet": "0.1.0", "numpy": "2"},
                 "git": {"commit": "abc"}, "repeats": 1, "modes": ["latency", "throughput"], "batch_sizes": [1, 64],
                 "gpus": [{"name": "NVIDIA H100 80GB HBM3"}]},
        "floors": {"cpu": cpu_floor, "gpu": gpu_floor, "gpu_reason": None},
        "results": [_row("numpy", "cpu", "float32", 300.0, tier="reference"),
                    _row("cupy", "gpu", "3", 20.0, {"forward": _lat(9.0), "kernels": _lat(4.0)}),
                    _row("cudnn", "gpu", "graph", 40.0, {"forward": _lat(30.0), "kernels": _lat(12.0)}, "native"),
                    {"backend": "tensorflow", "device": "gpu", "variant": None, "tier": "framework",
                     "status": "unavailable", "reason": "TensorFlow has no CUDA build here", "loc": None}],
    }


def typed(doc: dict) -> Results:
    out = from_json(Results, doc)
    validate(to_json(out))
    return out


def test_a_cut_run_merges_into_a_row_that_says_so_in_the_report():
    from lenet.bench import raw
    doc = typed(gpu_doc())
    whole = doc.results[1]
    cut = replace(whole, throughput=None, cut="worker killed by SIGABRT while batch throughput")
    row = raw.merge([replace(whole, latency=replace(whole.latency, host_us=summary([20.0] * 3, keep_samples=True))),
                     replace(cut, latency=replace(cut.latency, host_us=summary([22.0] * 3, keep_samples=True)))])
    assert row.ok and row.runs == 2 and row.cut == "run 2 of 2: worker killed by SIGABRT while batch throughput"
    table = report.markdown(replace(doc, results=[row]))
    assert ("Cut short (what the worker measured before it is kept, the rest is missing):\n\n"
            "- cupy/gpu [3]: run 2 of 2: worker killed by SIGABRT while batch throughput") in table


def test_gpu_rows_show_host_device_and_kernel_times_and_multiples_of_the_floor(tmp_path):
    doc = typed(gpu_doc())
    table = report.markdown(doc)
    assert "| backend | device | variant | p50 µs | **p90 µs** | p99 µs | p50 × floor | device µs (forward) | kernels µs |" in table
    # p50 20 over the 8 µs host->host floor; forward 9, kernels 4
    assert "| cupy | gpu | 3 | 20 | **40** | 40 | 2.5× | 9 | 4 | 50,000 | 800,000 |" in table
    assert "| cudnn | gpu | graph | 40 | **80** | 80 | 5.0× | 30 | 12 |" in table
    # CPU rows: p50 300 over the 10 µs all-cores roofline; no device times
    assert "| numpy | cpu | float32 | 300 | **600** | 600 | 30.0× | – | – |" in table
    assert ("host→host **8 µs** = a 3 KB host→device copy, an empty kernel launch and a 40 B device→host copy queued "
            "in order, one wait (p50); each alone with its own wait: launch + synchronize 4, 3 KB host→device 2.5, "
            "40 B device→host 1.5 µs (p50s)") in table
    assert "kernel-only **0.575 µs**" in table and "32.0 T/s" in table and "3,000 GB/s" in table
    assert "one core **45.9 µs**" in table and "all 2 cores **10 µs**" in table
    assert "(10 µs of arithmetic at 229.3 GMAC/s, 8.62 µs to read the weights at 200 GB/s)" in table
    assert "- tensorflow/gpu: **unavailable**: TensorFlow has no CUDA build here" in table
    assert "Warning" not in table
    report.write(doc, tmp_path)
    assert all((tmp_path / plot.file).stat().st_size > 1000 for plot in report.PLOTS)


def test_cpu_only_table_has_no_gpu_columns_and_says_why_a_term_is_missing():
    raw = gpu_doc()
    raw["results"] = raw["results"][:1]
    raw["floors"].update(gpu=None, gpu_reason="no CUDA driver (libcuda.so.1 not found)")
    raw["floors"]["cpu"].update(read=None, weights_read_us=None, read_reason="numba not installed",
                                floor_us={"one_core": 45.86, "all_cores": 22.93})
    table = report.markdown(typed(raw))
    assert "kernels µs" not in table
    assert "| numpy | cpu | float32 | 300 | **600** | 600 | 13.1× | 3,333 |" in table
    assert "**GPU floors**: none (no CUDA driver (libcuda.so.1 not found))." in table
    assert "Without the weights-read term: numba not installed." in table


def test_a_row_below_its_floor_is_a_loud_warning_not_a_ratio():
    raw = gpu_doc()
    raw["floors"]["cpu"]["floor_us"]["all_cores"] = 400.0          # above numpy's p50 of 300
    doc = typed(raw)
    assert [r.backend for r in markdown.below_floor(doc)] == ["numpy"]
    table = report.markdown(doc)
    assert "**⚠ Warning: 1 row(s) beat the floor" in table and "numpy/cpu [float32] (p50 300 µs)" in table
    assert "| numpy | cpu | float32 | 300 | **600** | 600 | **⚠ below the floor** |" in table
    assert "0.8×" not in table


def test_cpu_roofline_of_known_rates():
    # 2 293 000 multiply-adds at 50 GMAC/s: 45.86 µs; at 229.3: 10 µs. 1 724 320 B at 100 GB/s: 17.2432 µs
    out = cpu.roofline(PerCores(50.0, 229.3), PerCores(100e9, 200e9))
    assert (out["arithmetic_us"].one_core, out["arithmetic_us"].all_cores) == pytest.approx((45.86, 10.0))
    assert (out["weights_read_us"].one_core, out["weights_read_us"].all_cores) == pytest.approx((17.2432, 8.6216))
    assert (out["floor_us"].one_core, out["floor_us"].all_cores) == pytest.approx((45.86, 10.0))
    assert out["images_per_s_ceiling"] == pytest.approx(100_000)
    # all threads slower than one: all cores may use one core's rate; reads dominate at 10 GB/s
    out = cpu.roofline(PerCores(1000.0, 400.0), PerCores(10e9, 5e9))
    assert out["sgemm_gmacs_per_s"].all_cores == 1000.0
    assert (out["floor_us"].one_core, out["floor_us"].all_cores) == pytest.approx((172.432, 172.432))
    # no read term: the arithmetic alone
    out = cpu.roofline(PerCores(50.0, 100.0), None)
    assert out["weights_read_us"] is None and out["floor_us"].all_cores == pytest.approx(22.93)


def test_chained_floor_of_known_rates():
    # the Intel Xeon of the issue: 151 GMAC/s and 98 GB/s on both cores, 75.5 and 49 on one.
    # conv1 288 k, conv2 1.6 M, fc2 5 k multiply-adds at 151: 1.907 + 10.596 + 0.033 µs; fc1 the slower of
    # 400 k multiply-adds (2.649 µs) and 1 602 000 B of weights at 98 GB/s (16.347 µs)
    out = cpu.roofline(PerCores(75.5, 151.0), PerCores(49e9, 98e9))
    bounds = out["layer_bounds_us"]
    assert list(bounds) == ["conv1", "pool1", "conv2", "pool2", "fc1", "fc2"]
    assert [bounds[k] for k in bounds] == pytest.approx([1.9073, 0.0, 10.5960, 0.0, 16.3469, 0.0331], abs=1e-4)
    assert out["chained_us"].all_cores == pytest.approx(28.8834, abs=1e-4)
    assert out["chained_us"].one_core == pytest.approx(2 * 1.9073 + 2 * 10.5960 + 2 * 0.0331 + 32.6939, abs=1e-3)
    assert out["floor_us"].all_cores == pytest.approx(17.5951, abs=1e-4)        # the overlapped floor stays
    # fc1 bound by its multiply-adds where reads are fast; without a read rate, multiply-adds only
    assert cpu.roofline(PerCores(10.0, 20.0), PerCores(1e12, 2e12))["layer_bounds_us"]["fc1"] == pytest.approx(20.0)
    no_reads = cpu.roofline(PerCores(50.0, 100.0), None)
    assert no_reads["chained_us"].all_cores == pytest.approx(no_reads["arithmetic_us"].all_cores)


def test_tables_show_the_chained_floor_and_each_layers_bound():
    raw = gpu_doc()
    raw["floors"]["cpu"].update(chained_us={"one_core": 100.0, "all_cores": 50.0},
                                layer_bounds_us={"conv1": 2.0, "pool1": 0.0, "conv2": 12.0, "pool2": 0.0,
                                                 "fc1": 35.0, "fc2": 1.0})
    raw["meta"]["modes"].append("layers")
    raw["results"][0].update(layers_us={"conv1+pool1": 20.0, "conv2+pool2": 100.0, "fc1": 150.0, "fc2": 5.0},
                             layers_method="a clock", overhead_us=25.0, overhead_host_us=300.0)
    doc = typed(raw)
    table = report.markdown(doc)
    # numpy's p50 300 over the 10 µs floor and the 50 µs chained floor; GPU rows have no chained floor
    assert "| numpy | cpu | float32 | 300 | **600** | 600 | 30.0× | 6.00× |" in table
    assert "| cupy | gpu | 3 | 20 | **40** | 40 | 2.5× | – |" in table
    assert "**Chained floor**" in table and "all 2 cores **50 µs** (conv1 2, conv2 12, fc1 35, fc2 1 µs)" in table
    assert "| CPU bound, all cores: 50 µs chained | – | 2 | 0 | 12 | 0 | 35 | 1 | 50 |" in table
    readme = markdown.readme_table(doc)
    assert "| × floor | × chained |" in readme and "| numpy (float32) | 300 | 600 | 30× | 6.00× |" in readme
    # a run from before the chained floor: the column says so, nothing is made up
    del raw["floors"]["cpu"]["chained_us"], raw["floors"]["cpu"]["layer_bounds_us"]
    old = typed(raw)
    assert "p50 × chained" not in report.markdown(old) and "CPU bound" not in report.markdown(old)
    assert "| numpy (float32) | 300 | 600 | 30× | – |" in markdown.readme_table(old)


def test_the_read_floor_reads_a_buffer_on_a_huge_page_boundary():
    rows = cpu.huge_page_array((3, 1000))
    assert rows.shape == (3, 1000) and rows.dtype == np.float32 and rows.ctypes.data % (2 << 20) == 0
    rows[:] = 1.5
    assert float(rows.sum()) == 4500.0
    assert cpu.huge_pages(rows) in ((True, False) if sys.platform == "linux" else (None,))


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="the vector form checked is x86-64's")
def test_the_read_loop_keeps_its_sums_in_vector_registers():
    """A loop that reads and adds, storing nothing: a sum row kept in memory (a store per vector
    read) measured half of what this CPU's caches deliver (csrc/NOTES.md v36)."""
    numba = pytest.importorskip("numba")
    read, _ = cpu.read_kernels()
    assert read(np.arange(1000, dtype=np.float32), 2) == 2 * 499500
    options = {k: v for k, v in read.targetoptions.items() if k != "nopython"}   # njit sets it
    fresh = numba.njit(**options)(read.py_func)          # its options, compiled here: a cached one has no IR
    fresh(np.arange(1000, dtype=np.float32), 2)
    ir = "\n".join(fresh.inspect_llvm().values())
    assert re.search(r"fadd fast <\d+ x float>", ir), "the read loop is not vectorised"
    assert not re.search(r"store <\d+ x float>", ir), "the read loop stores vectors"


def test_gpu_floors_of_known_measurements():
    out = gpu.derived(8.0, fma_per_s=32e12, dtod_bytes_per_s=3e12)
    assert out["host_to_host_floor_us"] == pytest.approx(8.0)
    assert out["kernel_arithmetic_us"] == pytest.approx(0.07165625)       # 2 293 000 / 32e12 s
    assert out["kernel_weights_read_us"] == pytest.approx(0.57477333)     # 1 724 320 B / 3e12 B/s
    assert out["kernel_floor_us"] == out["kernel_weights_read_us"]
    assert gpu.derived(8.0, fma_per_s=1e12, dtod_bytes_per_s=3e12)["kernel_floor_us"] == pytest.approx(2.293)


def test_the_blas_forcing_variables_are_cleared_for_the_floor_only_outside_tests_and_ci():
    forced = {"OPENBLAS_CORETYPE": "Haswell", "OPENBLAS_L2_SIZE": "512000", "PATH": "/bin"}
    assert cpu.blas_env_to_clear(forced) == ["OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"]
    assert cpu.blas_env_to_clear({"OPENBLAS_L2_SIZE": "1"}) == ["OPENBLAS_L2_SIZE"]
    assert cpu.blas_env_to_clear({**forced, "CI": "true"}) == []
    assert cpu.blas_env_to_clear({**forced, "LENET_KEEP_BLAS_ENV": "1"}) == []


def test_a_cores_contention_of_known_windows():
    """Window times (ns): the fastest, the share at 1.1× it or more, the median over the fastest."""
    out = cpu.slowed(np.array([10_000, 10_000, 10_500, 11_000, 12_000, 20_000.0]))
    assert out == {"best_us": 10.0, "slowed_share": 0.5, "p50_over_best": pytest.approx(1.075)}
    assert cpu.slowed(np.full(5, 15_000.0))["slowed_share"] == 0.0


def test_the_contention_loop_computes_its_chains():
    pytest.importorskip("numba")
    start = (1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7)
    a, b = list(start), list(start)
    for _ in range(3):
        a, b = [v * 0.999 + 0.001 for v in a], [v * 0.998 + 0.002 for v in b]
    assert cpu.spin_kernel()(3) == pytest.approx(sum(a) + sum(b), rel=1e-15)


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity on this platform")
def test_where_pinning_is_refused_the_contention_is_one_unpinned_reading(monkeypatch):
    pytest.importorskip("numba")
    affinity, pin = os.sched_getaffinity(0), os.sched_setaffinity

    def refuse_one_core(pid, cpus):
        if len(cpus) == 1:
            raise PermissionError("not allowed")
        pin(pid, cpus)

    monkeypatch.setattr(os, "sched_setaffinity", refuse_one_core)
    out = cpu.contention(quick=True)
    assert [c["cpu"] for c in out["cores"]] == [None] and 0 <= out["cores"][0]["slowed_share"] <= 1
    assert os.sched_getaffinity(0) == affinity


def test_the_floor_says_how_contended_the_host_was_before_and_after_the_workers():
    base = from_json(Results, gpu_doc()).floors.cpu
    assert "contention" not in markdown.cpu_floor_text(base)          # a file from before it: nothing said

    def measured(*shares):
        cores = [{"cpu": c, "best_us": 15.0, "slowed_share": s, "p50_over_best": 1.02} for c, s in enumerate(shares)]
        return replace(base, contention=[{"window_us": 16, "slower": 1.1, "windows": 3000, "iterations": 6000,
                                          "cores": cores}])

    both = cpu.best_of(measured(0.30, 0.25), measured(0.02, 0.0))
    assert [m["when"] for m in both.contention] == ["before", "after"]
    text = markdown.cpu_floor_text(both)
    assert "(cpu 0 / 1) ran at 1.1× its fastest or slower: 30% / 25% before the workers; 2% / 0% after" in text
    for m, reads in zip(both.contention, [(0.5, 0.75), (0.0, 0.125)]):     # since v42, its reads' windows too
        m["cores"] = [{**c, "read": {"best_us": 11.0, "slowed_share": r, "p50_over_best": 1.2}}
                      for c, r in zip(m["cores"], reads)]
    text = markdown.cpu_floor_text(both)
    assert "its fastest or slower (in brackets: of as many passes over one core's half of fc1's weights" in text
    assert ": 30% / 25% (50% / 75%) before the workers; 2% / 0% (0% / 12%) after" in text
    doc = gpu_doc()
    doc["floors"]["cpu"]["contention"] = both.contention
    validate(to_json(from_json(Results, doc)))                        # the schema holds it
    assert from_json(Results, doc).floors.cpu.contention == both.contention


def test_measured_cpu_floor_records_cores_and_the_blas_kernel():
    pytest.importorskip("numba")
    affinity = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    floor = cpu.floor(quick=True)
    (contention,) = floor.contention                            # each usable core in turn, then back to all
    assert [c["cpu"] for c in contention["cores"]] == (sorted(affinity) if affinity else [None])
    assert not affinity or os.sched_getaffinity(0) == affinity
    assert all(0 <= c["slowed_share"] <= 1 <= c["p50_over_best"] and c["best_us"] > 0 for c in contention["cores"])
    assert contention["read_bytes"] == cpu.CONTENTION_READ_BYTES and 790_000 < cpu.CONTENTION_READ_BYTES <= 801_000
    assert all(0 <= c["read"]["slowed_share"] <= 1 <= c["read"]["p50_over_best"] and c["read"]["best_us"] > 0
               for c in contention["cores"])                   # its reads of one core's half of fc1, timed too
    assert floor.cores == cpu.cores() >= 1 and floor.blas_env_cleared == []          # tests keep the variables
    assert floor.floor_us.all_cores <= floor.floor_us.one_core and floor.read["bytes"] >= NUM_PARAMS * 4
    assert floor.read["loop"] == cpu.READ_LOOP                  # which read loop measured it, for later readers
    if pytest.importorskip("threadpoolctl"):
        assert floor.blas["internal_api"] in ("openblas", "mkl", "blis") and floor.blas["architecture"]


@pytest.mark.parametrize("code", [ptx.EMPTY, ptx.fma()], ids=["empty", "fma"])
def test_floor_kernels_assemble_for_hopper(code, tmp_path):
    ptxas = shutil.which("ptxas")
    if not ptxas:
        pytest.skip("ptxas (CUDA toolkit) not installed")
    (tmp_path / "k.ptx").write_bytes(code)
    done = subprocess.run([ptxas, "-arch=sm_90", "-v", str(tmp_path / "k.ptx"), "-o", str(tmp_path / "k.cubin")],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "0 bytes spill stores" in done.stderr


@pytest.mark.gpu
@pytest.mark.device_wide
def test_gpu_floors_are_consistent():
    from lenet.backends import cuda_unavailable

    if cuda_unavailable():
        pytest.skip(cuda_unavailable())
    floor = gpu.floor(quick=True)
    if floor.fp32_fma_per_s_peak:
        assert 0.3 < floor.fp32_fma_per_s_measured / floor.fp32_fma_per_s_peak < 1.05
    assert floor.dtod_bytes_per_s > 100e9 and floor.launch_sync_us.p50 > 0
    assert floor.host_to_host_floor_us == floor.chain_us.p50 > 0


def test_training_is_shown_as_a_fraction_of_the_training_roofline():
    # ceiling 43 610 images/s for the forward; training does 3x the multiply-adds: 14 537 images/s
    raw = gpu_doc()
    raw["results"][0]["train"] = {"images_per_s": 7268.0, "epoch_s": 0.55, "first_epoch_s": 0.6, "accuracy": 0.9,
                                  "epochs": 2, "images": 4000, "dataset": "embedded", "learning_rate": 0.05,
                                  "batch_size": 64}
    raw["results"][1]["train"] = dict(raw["results"][0]["train"])     # a GPU row: no CPU roofline
    doc = typed(raw)
    table = report.markdown(doc)
    assert "training roofline 14,537 images/s" in table
    assert "| train img/s | train ÷ roofline |" in table
    assert "| 7,268 | 0.50 |" in table
    assert markdown.of_roofline(doc, doc.results[1]) == "–"
    assert "| 7,268 | 0.50 |" in markdown.readme_table(doc)


def test_a_runs_floor_keeps_each_rates_better_measurement():
    """Measured before and after the workers: a measurement slowed by a busy moment (here the SGEMM
    before, the reads after) does not lower the floor; both measurements are kept."""
    base = from_json(Results, gpu_doc()).floors.cpu
    before = cpu.best_of(base, base)                              # the same twice: nothing changes
    assert before.floor_us == base.floor_us and [m["when"] for m in before.measured] == ["before", "after"]
    slow_sgemm = replace(base, sgemm_gmacs_per_s=PerCores(25.0, 114.6), sgemm_threads_gmacs_per_s=114.6)
    slow_reads = replace(base, read={**base.read, "one_core_bytes_per_s": 50e9, "all_cores_bytes_per_s": 100e9})
    both = cpu.best_of(slow_sgemm, slow_reads)
    assert both.sgemm_gmacs_per_s == PerCores(50.0, 229.3) and both.read["all_cores_bytes_per_s"] == 200e9
    assert both.floor_us.all_cores == pytest.approx(MULTIPLY_ADDS / 229.3e3)       # 10 µs, as measured at best
    assert both.weights_read_us.all_cores == pytest.approx(NUM_PARAMS * 4 / 200e9 * 1e6)
    assert [m["sgemm_all_threads"] for m in both.measured] == [114.6, 229.3]
    assert "before and after" in both.how and "114.6 and 229.3 GMAC/s" in markdown.cpu_floor_text(both)


def test_a_floor_whose_two_readings_are_apart_says_so():
    """moved(): the larger 1 - slower / faster of the all-threads SGEMM and all-cores reads of the
    floor's two readings; results.md says so past 5 %, where the host's speed moved in the run."""
    base = from_json(Results, gpu_doc()).floors.cpu
    assert cpu.moved(base) is None                                  # measured once: nothing to compare
    reads = lambda rate: replace(base, read={**base.read, "all_cores_bytes_per_s": rate})
    same = cpu.best_of(reads(200e9), reads(200e9))
    assert cpu.moved(same) == 0.0 and "apart" not in markdown.cpu_floor_text(same)
    slow_reads = cpu.best_of(reads(200e9), reads(180e9))             # the SGEMM the same, the reads 10 % apart
    assert cpu.moved(slow_reads) == pytest.approx(0.10)
    text = markdown.cpu_floor_text(slow_reads)
    assert "all-cores reads 200 and 180 GB/s)" in text and "**The two readings are 10% apart**" in text
    slow_sgemm = replace(reads(200e9), sgemm_gmacs_per_s=PerCores(50.0, 220.1), sgemm_threads_gmacs_per_s=220.1)
    small = cpu.best_of(reads(200e9), slow_sgemm)                   # SGEMM 229.3 and 220.1: 4 % apart
    assert cpu.moved(small) == pytest.approx(1 - 220.1 / 229.3) and "apart" not in markdown.cpu_floor_text(small)
