"""Floors (lenet.bench.floors) and how the report shows them and the GPU device times."""
import shutil
import subprocess

import pytest
from lenet.bench import floors, report
from lenet.bench.stats import summary
from lenet.model import MULTIPLY_ADDS, NUM_PARAMS

from test_bench import validate


def _lat(p50):
    return summary([p50 * 0.9, p50, p50, p50 * 1.25, p50 * 2], keep_samples=True)


def _row(backend, device, variant, p50, device_us=None, layer="raw kernels"):
    return {"backend": backend, "device": device, "variant": variant, "kernel": variant, "layer": layer,
            "status": "ok", "reason": None,
            "accuracy": 0.99, "check": {"ok": True}, "latency_us": _lat(p50), "device_us": device_us,
            "throughput_ips": {"1": 1e6 / p50, "64": 64e6 / (4 * p50)}, "train": None,
            "loc": {"code": 100, "comment": 10, "blank": 5}}


def gpu_doc() -> dict:
    """A hand-made results document with CPU and GPU rows and both floors (made-up numbers, so that
    every derived cell is known: floors 10 µs CPU on all cores, 8 µs GPU host to host; each
    latency's p90 and p99 are twice its p50)."""
    cpu_floor = {"multiply_adds_per_image": MULTIPLY_ADDS, "weight_bytes": NUM_PARAMS * 4,
                 "sgemm_gmacs_per_s": {"one_core": 50.0, "all_cores": 229.3},
                 "read": {"cores": 2, "one_core_bytes_per_s": 100e9, "all_cores_bytes_per_s": 200e9},
                 "read_reason": None,
                 "arithmetic_us": {"one_core": 45.86, "all_cores": 10.0},
                 "weights_read_us": {"one_core": 17.24, "all_cores": 8.62},
                 "floor_us": {"one_core": 45.86, "all_cores": 10.0}, "images_per_s_ceiling": 43610.0}
    gpu_floor = {"device_name": "NVIDIA H100 80GB HBM3", "sm_count": 132, "launch_sync_us": _lat(4.0),
                 "h2d_3kb_us": _lat(2.5), "d2h_40b_us": _lat(1.5), "host_to_host_floor_us": 8.0,
                 "dtod_bytes_per_s": 3.0e12, "fp32_fma_per_s_measured": 32e12, "fp32_fma_per_s_peak": 33.45e12,
                 "kernel_arithmetic_us": 0.0717, "kernel_weights_read_us": 0.575, "kernel_floor_us": 0.575}
    return {
        "meta": {"date": "2026-11-23", "command": "python -m lenet.bench --device gpu", "python": "3.12",
                 "cpu": "test CPU", "cpu_affinity": 2, "versions": {"lenet": "0.1.0", "numpy": "2"},
                 "git": {"commit": "abc"}, "repeats": 1, "modes": ["latency", "throughput"], "batch_sizes": [1, 64],
                 "gpus": [{"name": "NVIDIA H100 80GB HBM3"}]},
        "floors": {"cpu": cpu_floor, "gpu": gpu_floor, "gpu_reason": None},
        "results": [_row("numpy", "cpu", "float32", 300.0, layer="reference"),
                    _row("cupy", "gpu", "3", 20.0, {"forward": _lat(9.0), "kernels": _lat(4.0)}),
                    _row("cudnn", "gpu", "graph", 40.0, {"forward": _lat(30.0), "kernels": _lat(12.0)}, "native"),
                    {"backend": "tensorflow", "device": "gpu", "variant": None, "kernel": None, "layer": "framework",
                     "status": "unavailable", "reason": "TensorFlow has no CUDA build here", "loc": None}],
    }


def test_gpu_rows_show_host_device_and_kernel_times_and_multiples_of_the_floor(tmp_path):
    doc = gpu_doc()
    validate(doc)
    table = report.markdown(doc)
    assert "| backend | device | variant | p50 µs | **p90 µs** | p99 µs | p50 × floor | device µs (forward) | kernels µs |" in table
    # p50 20 over the 8 µs host->host floor; forward 9, kernels 4
    assert "| cupy | gpu | 3 | 20 | **40** | 40 | 2.5× | 9 | 4 | 50,000 | 800,000 |" in table
    assert "| cudnn | gpu | graph | 40 | **80** | 80 | 5.0× | 30 | 12 |" in table
    # CPU rows: p50 300 over the 10 µs all-cores roofline; no device times
    assert "| numpy | cpu | float32 | 300 | **600** | 600 | 30.0× | – | – |" in table
    assert "host→host **8 µs** = empty kernel launch + synchronize 4 + 3 KB host→device 2.5 + 40 B device→host 1.5" in table
    assert "kernel-only **0.575 µs**" in table and "32.0 T/s" in table and "3,000 GB/s" in table
    assert "one core **45.9 µs**" in table and "all 2 cores **10 µs**" in table
    assert "(10 µs of arithmetic at 229.3 GMAC/s, 8.62 µs to read the weights at 200 GB/s)" in table
    assert "- tensorflow/gpu: **unavailable**: TensorFlow has no CUDA build here" in table
    report.write(doc, tmp_path)
    assert all((tmp_path / name).stat().st_size > 1000 for name in report.PLOTS)


def test_cpu_only_table_has_no_gpu_columns_and_says_why_a_term_is_missing():
    doc = gpu_doc()
    doc["results"] = doc["results"][:1]
    doc["floors"].update(gpu=None, gpu_reason="no CUDA driver (libcuda.so.1 not found)")
    doc["floors"]["cpu"].update(read=None, weights_read_us=None, read_reason="numba not installed",
                                floor_us={"one_core": 45.86, "all_cores": 22.93})
    validate(doc)
    table = report.markdown(doc)
    assert "kernels µs" not in table
    assert "| numpy | cpu | float32 | 300 | **600** | 600 | 13.1× | 3,333 |" in table
    assert "**GPU floors**: none (no CUDA driver (libcuda.so.1 not found))." in table
    assert "Without the weights-read term: numba not installed." in table


def test_cpu_floor_is_the_larger_term_per_core_count():
    pytest.importorskip("numba")
    cpu = floors.cpu_floor(quick=True)
    for k in ("one_core", "all_cores"):
        assert cpu["floor_us"][k] == max(cpu["arithmetic_us"][k], cpu["weights_read_us"][k]) > 0
        assert cpu["arithmetic_us"][k] == pytest.approx(MULTIPLY_ADDS / (cpu["sgemm_gmacs_per_s"][k] * 1e3))
    assert cpu["floor_us"]["all_cores"] <= cpu["floor_us"]["one_core"]
    assert 0 <= cpu["read"]["bytes"] - cpu["weight_bytes"] < 256 * 4 and cpu["weight_bytes"] == NUM_PARAMS * 4
    assert cpu["weights_read_us"]["one_core"] == pytest.approx(
        cpu["weight_bytes"] / cpu["read"]["one_core_bytes_per_s"] * 1e6)


@pytest.mark.parametrize("ptx", [floors.EMPTY_PTX, floors._fma_ptx()], ids=["empty", "fma"])
def test_floor_kernels_assemble_for_hopper(ptx, tmp_path):
    ptxas = shutil.which("ptxas")
    if not ptxas:
        pytest.skip("ptxas (CUDA toolkit) not installed")
    (tmp_path / "k.ptx").write_bytes(ptx)
    done = subprocess.run([ptxas, "-arch=sm_90", "-v", str(tmp_path / "k.ptx"), "-o", str(tmp_path / "k.cubin")],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "0 bytes spill stores" in done.stderr


@pytest.mark.gpu
def test_gpu_floors_are_consistent():
    from lenet.backends import cuda_unavailable

    if cuda_unavailable():
        pytest.skip(cuda_unavailable())
    gpu = floors.gpu_floor(quick=True)
    assert gpu["host_to_host_floor_us"] == pytest.approx(
        sum(gpu[k]["p50"] for k in ("launch_sync_us", "h2d_3kb_us", "d2h_40b_us")))
    if gpu["fp32_fma_per_s_peak"]:
        assert 0.3 < gpu["fp32_fma_per_s_measured"] / gpu["fp32_fma_per_s_peak"] < 1.05
    assert gpu["dtod_bytes_per_s"] > 100e9
    assert gpu["kernel_floor_us"] == max(gpu["kernel_arithmetic_us"], gpu["kernel_weights_read_us"])
