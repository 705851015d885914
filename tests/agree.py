"""The tests' side of lenet.check: skip a backend that cannot run here, assert agreement with the
NumPy reference (the forward's limit, and the step's test limit TEST_STEP_RTOL)."""
from __future__ import annotations

import pytest

from lenet import backends
from lenet.check import TEST_STEP_RTOL, logits_reason, reference_logits, step
from lenet.model import LEARNING_RATE


def require(backend: str, device: str = "cpu") -> None:
    """In a pytest test: skip, with the backend's own one-line reason, when it cannot run here."""
    reason = backends.unavailable(backend, device)
    if reason:
        pytest.skip(f"{backend} on {device}: {reason}")


def assert_logits_agree(got, params, x) -> None:
    reason = logits_reason(got, reference_logits(params, x))
    if reason:
        raise AssertionError(f"logits {reason}")


def assert_step_agrees(net, params, x, y, lr=LEARNING_RATE) -> None:
    result = step(net, params, x, y, lr, TEST_STEP_RTOL)
    if not result["ok"]:
        raise AssertionError(result["reason"])
