"""What the benchmark is running, what is left, and an estimate of the time left.

The estimate sums, over the runs left, the time that run should take: the last time of the same
configuration, else the mean of the runs finished so far (no estimate before the first run ends).
"""
from __future__ import annotations


def duration(seconds: float | None) -> str:
    """'1 h 02 min', '4 min 05 s', '12 s', or '?' when unknown."""
    if seconds is None:
        return "?"
    s = round(seconds)
    if s >= 3600:
        return f"{s // 3600} h {s % 3600 // 60:02d} min"
    if s >= 60:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s} s"


class Progress:
    """The order of runs, (repeat, config) pairs, and the time each finished one took."""

    def __init__(self, order: list[tuple[int, int]]):
        self.order = list(order)
        self.times: dict[tuple[int, int], float] = {}

    def finished(self, repeat: int, config: int, seconds: float) -> None:
        self.times[(repeat, config)] = seconds

    def _expected(self, config: int) -> float:
        same = [t for (_, c), t in self.times.items() if c == config]
        if same:
            return same[-1]
        return sum(self.times.values()) / len(self.times)

    def left_s(self) -> float | None:
        """Seconds the runs not finished yet should take; None before any run has finished."""
        if not self.times:
            return None
        return sum(self._expected(c) for r, c in self.order if (r, c) not in self.times)

    def status(self) -> str:
        """'3/21 done, ~4 min 10 s left'."""
        return f"{len(self.times)}/{len(self.order)} done, ~{duration(self.left_s())} left"
