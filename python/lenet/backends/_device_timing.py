"""CUDA-event timing of a forward pass, the same for every GPU backend (lenet.net.Net.device_times_us).

A `timer` is the backend's view of its stream: `event()` a new timing event, `record(event)` on
the stream, `elapsed_ms(a, b)` between two recorded events (after synchronizing), and
`hold(ns)`, which enqueues a kernel that keeps the stream busy for about `ns` nanoseconds.

forward_us: an event before the forward and one after it, as the backend enqueues it, so the
    host's gaps between launches count.
kernels_us: the sum of an event pair around each launch (per_launch_us; layer_times_us assigns
    them to layers by kernel name). The stream first runs the hold kernel,
    long enough for the host to enqueue every launch and event before the GPU reaches them, so
    no host gap falls inside a pair. A sample counts only if the host finished enqueueing
    within the hold as the GPU timed it (the hold cannot start before the host launched it);
    otherwise the hold doubles and the sample is taken again.
"""
from __future__ import annotations

import time

HOLD_NS = 100_000           # the first hold: 100 us, several times what enqueueing LeNet takes
ATTEMPTS = 8                # per sample, each with a hold twice as long as the last


def forward_us(timer, forward, repeats: int) -> list[float]:
    """`repeats` device times (us) of `forward()`, from an event before it to one after it."""
    start, end = timer.event(), timer.event()
    times = []
    for _ in range(repeats):
        timer.record(start)
        forward()
        timer.record(end)
        times.append(timer.elapsed_ms(start, end) * 1e3)
    return times


def kernels_us(timer, launches, repeats: int) -> list[float]:
    """`repeats` kernel-only times (us): the summed event pairs around each of `launches`
    (callables that enqueue one kernel each), the GPU held until all are enqueued."""
    return [sum(sample) for sample in per_launch_us(timer, launches, repeats)]


def layer_times_us(timer, launches, kernel_names, repeats: int) -> dict[str, list[float]]:
    """Per-layer kernel times (lenet.net.Net.layer_times_us) from the event pairs around each of
    `launches`, assigned to layers by their `kernel_names` (lenet.layers.by_layer); a single launch
    (a fused forward) is one group of every layer."""
    from ..layers import by_launch, stack
    return stack([by_launch(kernel_names, sample) for sample in per_launch_us(timer, launches, repeats)])


def per_launch_us(timer, launches, repeats: int) -> list[list[float]]:
    """`repeats` samples of the event pair around each of `launches` (us, in launch order), the GPU
    held until all are enqueued."""
    pairs = [(timer.event(), timer.event()) for _ in launches]
    held, released = timer.event(), timer.event()
    hold_ns, times = HOLD_NS, []
    for _ in range(repeats):
        for _ in range(ATTEMPTS):
            t0 = time.perf_counter()
            timer.record(held)
            timer.hold(hold_ns)
            timer.record(released)
            for launch, (start, end) in zip(launches, pairs):
                timer.record(start)
                launch()
                timer.record(end)
            enqueue_ns = (time.perf_counter() - t0) * 1e9
            if enqueue_ns < 0.8 * timer.elapsed_ms(held, released) * 1e6:
                times.append([timer.elapsed_ms(start, end) * 1e3 for start, end in pairs])
                break
            hold_ns *= 2
        else:
            raise RuntimeError(f"kernel timing: the host took {enqueue_ns / 1e3:.0f} us to enqueue "
                               f"{len(launches)} launches, longer than a {hold_ns / 2e3:.0f} us hold")
    return times
