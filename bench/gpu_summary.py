"""The short table bench/gpu-check.sh prints last: one line per benchmark row and the floors.

    python bench/gpu_summary.py OUT_DIR/bench/results.json
"""
import sys

from lenet.bench import results
from lenet.bench.markdown import times_floor
from lenet.bench.readings import device_p50, fmt


def main(path: str) -> int:
    try:
        doc = results.load(path)
    except (OSError, ValueError) as exc:
        print(f"no benchmark results: {exc}")
        return 1
    print(f"{'backend':11} {'device':6} {'variant':8} {'p50 µs':>8} {'p90 µs':>8} {'× floor':>8} "
          f"{'fwd µs':>7} {'kern µs':>7}  status")
    for r in doc.results:
        lat = r.latency and r.latency.host_us
        times = times_floor(doc, r).replace("–", "-").replace("**", "")
        print(f"{r.backend:11} {r.device:6} {r.variant or '-'!s:8} {fmt(lat and lat.p50):>8} "
              f"{fmt(lat and lat.p90):>8} {times:>8} "
              f"{fmt(device_p50(r, 'forward')):>7} {fmt(device_p50(r, 'kernels')):>7}  "
              f"{r.status}{': ' + r.reason if r.reason else ''}{' (cut short: ' + r.cut + ')' if r.cut else ''}")
    cpu, gpu = doc.floors.cpu, doc.floors.gpu
    if gpu:
        print(f"GPU floors: host→host {fmt(gpu.host_to_host_floor_us)} µs, kernel-only {fmt(gpu.kernel_floor_us)} µs")
    else:
        print(f"GPU floors: none ({doc.floors.gpu_reason})")
    if cpu:
        print(f"CPU floor (reference): {fmt(cpu.floor_us.one_core)} µs on one core, "
              f"{fmt(cpu.floor_us.all_cores)} µs on all cores")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
