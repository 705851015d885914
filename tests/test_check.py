"""lenet.check: the step-test batch sits away from ties, the step check holds the loss to its limit, and
the step tests hold on any OpenBLAS core."""
import glob
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import lenet
from lenet import check

ROOT = Path(__file__).resolve().parents[1]


def test_step_batch_is_spread_over_classes_and_away_from_ties(params, dataset):
    x, y = check.step_batch(params, dataset.test_x, dataset.test_y, 150)
    assert x.shape == (150, 1, 28, 28) and x.flags.c_contiguous
    assert np.bincount(y, minlength=10).tolist() == [15] * 10
    assert check.away_from_ties(params, x).all()
    with pytest.raises(ValueError, match="away from ties"):
        check.step_batch(params, dataset.test_x[:20], dataset.test_y[:20], 64)


def test_a_zero_fc1_pre_activation_or_a_pool_near_tie_is_rejected(params, dataset):
    x, _ = check.step_batch(params, dataset.test_x, dataset.test_y, 1)
    a = lenet.backends.numpy.Reference(params, np.float64).forward(x, keep=True)
    moved = dict(params, **{"fc1.bias": params["fc1.bias"].astype(np.float64)})
    moved["fc1.bias"][7] -= a["fc1"][0, 7]                              # unit 7's pre-activation: 0
    assert not check.away_from_ties(moved, x)[0]
    window = np.zeros((1, 50, 8, 8))                                    # conv2-shaped; one pool window:
    window[0, 3, 2, 2], window[0, 3, 2, 3] = 1.0, 1.0 + 1e-9            # two near-equal maxima
    margin = np.array([1e-5])
    assert not check._pool_ok(window, np.ones((1, 8, 8), bool), margin)[0]
    ones = np.ones((1, 50, 8, 8))                                       # exact ties ...
    assert check._pool_ok(ones, np.ones((1, 8, 8), bool), margin)[0]     # ... with a blank receptive field
    assert not check._pool_ok(ones, np.zeros((1, 8, 8), bool), margin)[0]


class _Stepped:
    """A net whose step leaves the parameters at the reference's and reports loss + `off`."""

    def __init__(self, params, off):
        self.params, self.off = params, off

    def train_step(self, x, y, lr):
        loss, grads = lenet.backends.numpy.Reference(self.params, np.float64).gradients(x, y)
        self.params = {k: (v - lr * grads[k]).astype(np.float32) for k, v in self.params.items()}
        return loss + self.off

    def parameters(self):
        return self.params


def test_the_step_check_holds_the_loss_to_its_limit(params, dataset):
    x, y = check.step_batch(params, dataset.test_x, dataset.test_y, 7)
    ok = check.step(_Stepped(params, 0.5 * check.LOSS_RTOL), params, x, y)
    assert ok["ok"] and ok["max_rel_err"] < 1e-5, ok          # float32 rounding of the update
    bad = check.step(_Stepped(params, 2 * check.LOSS_RTOL), params, x, y)
    assert not bad["ok"] and bad["reason"].startswith("train step loss "), bad


def cpu_flags() -> set[str]:
    """This CPU's feature flags as Linux lists them (empty where there is no /proc/cpuinfo)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    return set(next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), []))


def openblas_core() -> str:
    import ctypes
    import scipy_openblas32
    lib = ctypes.CDLL(glob.glob(os.path.join(scipy_openblas32.get_lib_dir(), "lib*.so"))[0])
    lib.scipy_openblas_get_corename.restype = ctypes.c_char_p
    return lib.scipy_openblas_get_corename().decode()


@pytest.mark.slow
@pytest.mark.parametrize("core", ["Haswell", "SkylakeX", None])
def test_step_tests_pass_under_each_openblas_core(core):
    """The cblas and float32-reference step tests in a fresh process per OpenBLAS kernel set
    (a CPU with AVX-512 runs all three; Haswell with the small L2 size of the machine that failed)."""
    pytest.importorskip("scipy_openblas32")
    if core == "SkylakeX" and not {"avx512f", "avx512bw"} <= cpu_flags():
        pytest.skip("OpenBLAS's SkylakeX kernels need AVX-512, which this CPU lacks (forced, they die of SIGILL)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENBLAS_")}
    if core:
        env.update(OPENBLAS_CORETYPE=core, **({"OPENBLAS_L2_SIZE": "512"} if core == "Haswell" else {}))
    env["PYTHONPATH"] = os.pathsep.join([str(Path(lenet.__file__).parents[1]), env.get("PYTHONPATH", "")])
    probe = subprocess.run([sys.executable, "-c", "import test_check; print(test_check.openblas_core())"],
                           env=env, cwd=ROOT / "tests", capture_output=True, text=True, timeout=60)
    assert probe.returncode == 0, probe.stderr
    assert core is None or probe.stdout.strip() == core, probe.stdout
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "tests/test_cblas.py", "-k", "sgd_step and not isa",   # batched: OpenBLAS sgemm
                          "tests/test_api.py::test_numpy_backend_is_the_reference"],
                         env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert " passed" in run.stdout and " skipped" not in run.stdout and "deselected" in run.stdout, run.stdout[-500:]
