"""Correctness against the NumPy reference (docs/decisions.md, Tolerances), one module for the benchmark's gate
and every test (tests/agree.py turns them into pytest's skips and assertions): the comparisons, their limits,
and the choice of the step-test batch.

Forward: max |Δ| / max |ref| ≤ FORWARD_RTOL against the float64 reference, and the same argmax.
One SGD step: the loss within LOSS_RTOL, and each tensor's update (new - old) within a limit,
relative to the largest element of the reference's update for that tensor:
  TEST_STEP_RTOL (1e-3) in the tests, on a batch chosen away from ties (step_batch), where any
      correct float32 backend lands within ~1e-4: a precision claim;
  GATE_STEP_RTOL (1e-2) in the benchmark, which runs on machines the tests never saw (other
      BLAS builds, GPUs, non-deterministic cuDNN algorithms): a gate against wrong gradients,
      whose errors are O(1), that must never reject a correct backend.
"""
from __future__ import annotations

import numpy as np

from . import model
from .backends.numpy import Reference, pool_windows

FORWARD_RTOL = 1e-4       # float32 logits against the float64 reference
LOSS_RTOL = 1e-4          # |loss - ref| / max(1, |ref|): cuDNN's FFT and Winograd convolutions (its
                          # non-deterministic picks) land 2e-5 off in float32 (an H200, 2026-11-27)
TEST_STEP_RTOL = 1e-3
GATE_STEP_RTOL = 1e-2
TIE_MARGIN = 1e-5         # step_batch: no near tie closer than this, relative to the layer's max |value|:
                          # ~100 float32 epsilons, above the rounding of a 500-term float32 sum (~√500 eps)


def relative_error(got, ref) -> float:
    """max |got - ref| / max |ref|: how every backend is compared with the reference."""
    return float(np.abs(np.asarray(got, np.float64) - ref).max() / np.abs(ref).max())


def reference_logits(params, x) -> np.ndarray:
    return Reference(params, np.float64).forward(x)


def logits_reason(got, ref) -> str | None:
    """Why float32 logits `got` disagree with the reference's `ref`, or None."""
    got = np.asarray(got)
    if got.shape != ref.shape or got.dtype != np.float32:
        return f"got {got.dtype} {got.shape}, expected float32 {ref.shape}"
    if not np.isfinite(got).all():
        return "non-finite values"
    err = relative_error(got, ref)
    if err > FORWARD_RTOL:
        return f"disagree with the reference: max|Δ|/max|ref| = {err:.3g} > {FORWARD_RTOL:g}"
    flipped = int((got.argmax(1) != ref.argmax(1)).sum())
    return f"argmax differs from the reference on {flipped} images" if flipped else None


def step(net, params, x, y, lr=model.LEARNING_RATE, rtol=TEST_STEP_RTOL) -> dict:
    """One SGD step of `net` (holding `params`) against the float64 reference's step.
    Returns {"ok", "max_rel_err" (worst tensor), "reason"}."""
    ref_loss, ref_grads = Reference(params, np.float64).gradients(x, y)
    loss = net.train_step(x, y, lr)
    if not abs(loss - ref_loss) <= LOSS_RTOL * max(1.0, abs(ref_loss)):
        return {"ok": False, "max_rel_err": None,
                "reason": f"train step loss {loss:.6g} differs from the reference's {ref_loss:.6g}"}
    got, worst = net.parameters(), 0.0
    if set(got) != set(model.PARAM_NAMES):
        return {"ok": False, "max_rel_err": None, "reason": f"parameters() names {sorted(got)}"}
    for name in model.PARAM_NAMES:
        value = np.asarray(got[name])
        if value.dtype != np.float32 or value.shape != params[name].shape:
            return {"ok": False, "max_rel_err": None, "reason": f"{name}: {value.dtype} {value.shape} after the step"}
        err = relative_error(value.astype(np.float64) - params[name], -lr * ref_grads[name])
        worst = max(worst, err) if np.isfinite(err) else float("inf")
        if not err <= rtol:
            return {"ok": False, "max_rel_err": worst, "reason": f"train step: {name} update disagrees "
                    f"with the reference: max|Δ|/max|ref| = {err:.3g} > {rtol:g}"}
    return {"ok": True, "max_rel_err": worst, "reason": None}


# --- which images -------------------------------------------------------------------------

def spread(n: int, total: int) -> np.ndarray:
    """n indices spread evenly over range(total): every class of a label-sorted set."""
    return np.linspace(0, total - 1, min(n, total)).astype(int)


def _blank(x, size: int) -> np.ndarray:
    """(N,H,W) -> (N,H-size+1,W-size+1): True where the size x size input patch is all zero."""
    windows = np.lib.stride_tricks.sliding_window_view(x[:, 0] != 0, (size, size), axis=(1, 2))
    return ~windows.any(axis=(-1, -2))


def _pool_ok(a, blank, margin) -> np.ndarray:
    """Per image: every 2x2 window of `a` (N,C,H,W) has a clear first maximum, or its tied maxima
    all have blank receptive fields (exactly equal in any arithmetic, and harmless)."""
    win = pool_windows(a)                                                 # N,C,h,w,4
    top = win.max(-1, keepdims=True)
    tied = win == top
    close = (top - win < margin[:, None, None, None, None]) & ~tied       # near but not equal
    blank_win = pool_windows(np.broadcast_to(blank[:, None], a.shape))    # N,C,h,w,4
    bad = close.any(-1) | ((tied.sum(-1) > 1) & (tied & ~blank_win).any(-1))
    return ~bad.reshape(len(a), -1).any(1)


def away_from_ties(params, x, margin: float = TIE_MARGIN) -> np.ndarray:
    """Per image of x (N,1,28,28): True when, in the float64 reference forward at `params`, no
    pooling window has a near tie (see _pool_ok) and no fc1 pre-activation lies within
    `margin` x max |fc1| of zero, so float32 rounding cannot change which path a gradient takes."""
    a = Reference(params, np.float64).forward(x, keep=True)

    def scale(v):                                                         # per image: margin x max |v|
        return margin * np.abs(v).reshape(len(v), -1).max(1)

    blank1 = _blank(x, model.FILTER_SIZE)                                 # conv1 outputs: 5x5 patch
    blank2 = _blank(x, 14)[:, ::2, ::2]                                   # conv2 outputs: 14x14, stride 2
    fc1 = (np.abs(a["fc1"]) >= scale(a["fc1"])[:, None]).all(1)
    return _pool_ok(a["conv1"], blank1, scale(a["conv1"])) & _pool_ok(a["conv2"], blank2, scale(a["conv2"])) & fc1


def step_batch(params, x, y, n: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """n digits of (x, y) (held-out ones: the weights have not fitted them, so every update is
    large) away from ties at `params` (away_from_ties), spread over the classes: candidates are
    checked 256 at a time, class by class in turn, until each class can give its share."""
    by_class = [np.flatnonzero(y == c) for c in np.unique(y)]
    order = np.array([c[k] for k in range(max(map(len, by_class))) for c in by_class if k < len(c)])
    share = -(-n // len(by_class))
    good = np.zeros(len(x), bool)
    for i in range(0, len(order), 256):
        chunk = order[i:i + 256]
        good[chunk] = away_from_ties(params, x[chunk])
        if min(good[c].sum() for c in by_class) >= share:
            break
    per_class = [c[good[c]] for c in by_class]
    picks = [c[k] for k in range(max(map(len, per_class))) for c in per_class if k < len(c)][:n]
    if len(picks) < n:
        raise ValueError(f"only {len(picks)} of {len(x)} digits sit away from ties; asked for {n}")
    pick = np.sort(np.array(picks))
    return np.ascontiguousarray(x[pick]), np.ascontiguousarray(y[pick])
