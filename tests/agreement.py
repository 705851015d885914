"""Shared checks of a backend against the NumPy reference (DESIGN.md §6)."""
from __future__ import annotations

import numpy as np
import pytest

import lenet
from lenet.backends import numpy as reference
from lenet.backends.numpy import FORWARD_RTOL, relative_error

STEP_RTOL = 1e-3         # max |Δ update| / max |ref update| per tensor, one SGD step vs float64


def require(backend: str, device: str = "cpu") -> None:
    """Skip loudly, with the backend's own one-line reason, when it cannot run here."""
    reason = lenet.backends.unavailable(backend, device)
    if reason:
        pytest.skip(f"{backend} on {device}: {reason}")


def reference_logits(params, x) -> np.ndarray:
    return reference.Reference(params, np.float64).forward(x)


def assert_logits_agree(got, params, x) -> None:
    ref = reference_logits(params, x)
    assert got.shape == ref.shape and got.dtype == np.float32, (got.shape, got.dtype)
    assert np.isfinite(got).all(), "non-finite logits"
    err = relative_error(got, ref)
    assert err <= FORWARD_RTOL, f"max |Δ| / max |ref| = {err:.3g} > {FORWARD_RTOL}"
    assert (got.argmax(1) == ref.argmax(1)).all(), "argmax differs from the reference"


def assert_step_agrees(net, params, x, y, lr=0.05) -> None:
    """One SGD step of `net` (built from `params`) against the float64 reference's step."""
    ref = reference.Reference(params, np.float64)
    ref_loss = ref._train_step(x, y, lr)
    loss = net.train_step(x, y, lr)
    assert abs(loss - ref_loss) <= 1e-5 * max(1.0, abs(ref_loss)), (loss, ref_loss)
    got = net.parameters()
    assert set(got) == set(lenet.model.PARAM_NAMES)
    for name in lenet.model.PARAM_NAMES:
        assert got[name].dtype == np.float32 and got[name].shape == params[name].shape, name
        ref_update = ref.p[name] - params[name]
        err = relative_error(got[name] - params[name], ref_update)
        assert err <= STEP_RTOL, f"{name}: max |Δ update| / max |ref update| = {err:.3g} > {STEP_RTOL}"
