"""Percentiles and summaries of timing samples.

Percentiles are nearest-rank (NumPy's "inverted_cdf"): the p-th percentile of n sorted samples
is the sample of rank ceil(p / 100 * n), so every reported value is one that was actually measured.
"""
from __future__ import annotations

import numpy as np

from .results import Summary

PERCENTILES = (50, 90, 99)


def percentile(samples, p: float) -> float:
    """Nearest-rank percentile, 0 < p <= 100."""
    if not samples:
        raise ValueError("percentile of no samples")
    if not 0 < p <= 100:
        raise ValueError(f"percentile must lie in (0, 100], got {p}")
    return float(np.percentile(np.asarray(samples, dtype=np.float64), p, method="inverted_cdf"))


def summary(samples, keep_samples: bool = False) -> Summary:
    """n, p50, p90, p99, mean, min, max (+ the samples when asked)."""
    samples = [float(s) for s in samples]
    return Summary(n=len(samples), **{f"p{p}": percentile(samples, p) for p in PERCENTILES},
                   mean=sum(samples) / len(samples), min=min(samples), max=max(samples),
                   samples=[round(s, 2) for s in samples] if keep_samples else None)   # µs to 10 ns: below the noise


def median(values) -> float:
    ordered = sorted(float(v) for v in values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
