"""The native extension lenet._native: it imports, finds its BLAS on its own, and reports its build."""
import os
import subprocess
import sys

import pytest

import lenet


@pytest.fixture(scope="module")
def native():
    try:
        from lenet import _native
    except ImportError as exc:
        pytest.skip(f"lenet._native not built (pip install .): {exc}")
    return _native


def test_build_configuration(native):
    assert native.__version__ == lenet.__version__
    assert isinstance(native.WITH_CUDA, bool) and isinstance(native.CUDA_WHY, str)
    assert "\n" not in native.CUDA_WHY
    assert (native.CUDA_WHY == "") == native.WITH_CUDA, native.CUDA_WHY
    # devices seen: some exactly when built with CUDA and the driver has a usable device, else none
    assert (native.cuda_device_count() > 0) == (native.WITH_CUDA and lenet.backends.cuda_unavailable() is None)
    assert "OpenBLAS" in native.blas_config()


def test_no_gpu_means_no_device(native):
    """Without a usable GPU (asked of the driver), the module sees no CUDA device, built with CUDA or not."""
    if lenet.backends.cuda_unavailable() is None:
        pytest.skip("a CUDA device is present")
    assert native.cuda_device_count() == 0


def test_finds_its_blas_without_library_paths(native):
    """The RPATH, not the environment, locates libscipy_openblas (and the CUDA libraries)."""
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    code = "import lenet._native as m; print(m.blas_config())"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "OpenBLAS" in out.stdout, out.stderr


def test_cblas_listed_as_available(native):
    assert ("cblas", "cpu", True, "ok") in lenet.available()


def test_one_version_from_pyproject_through_the_build():
    import importlib.metadata
    native = pytest.importorskip("lenet._native", reason="lenet._native not built")
    try:
        installed = importlib.metadata.version("lenet")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("lenet is not installed (a source checkout): no build-time version to compare")
    assert lenet.__version__ == native.__version__ == installed
