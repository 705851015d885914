"""The short tables bench/gpu-check.sh prints last: one line per benchmark row and the floors;
with --host-cpu, one line per run of the host CPU's goals command (phase host-cpu), and over two
runs or more, how many met each goal.

    python bench/gpu_summary.py OUT_DIR/bench/results.json
    python bench/gpu_summary.py --host-cpu RUN_DIR/results.json [...]
"""
import sys

from lenet._cli import Parser
from lenet.bench import results
from lenet.bench.floors.cpu import moved
from lenet.bench.markdown import has_reads, times_floor
from lenet.bench.readings import chained_floor_us, device_p50, fmt, host_p50
from lenet.bench.stats import percentile


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


# The CPU goals (README), in the order of the summary's ratios: one image at most 1.15× its chained
# floor and 0.5× ONNX Runtime's p50, training at least 3× PyTorch eager's images/s.
GOALS = {"× chained": ("≤", 1.15), "× ORT": ("≤", 0.5), "train × eager": ("≥", 3.0)}


def median_worst(readings: list[list[float]]) -> float | None:
    """The median reading's worst core (nearest-rank: of two readings, the lower), from each reading's cores' shares."""
    return percentile([max(shares) for shares in readings], 50) if readings else None


def percent(share: float | None) -> str:
    return "–" if share is None else f"{share:.0%}"


def host_cpu(paths: list[str]) -> int:
    """Each run's single image (cblas threads) against its chained floor and ONNX Runtime, and its
    training against PyTorch eager: the CPU goals, as each run's own floor and peers give them; the
    host's contention beside them, as its floor read it (the worst core, before or after the
    workers) and around cblas threads' latency phases (the median reading's worst core; `reads around`:
    the same of the passes over fc1's half, which also see a host sharing the caches or memory); and how
    far the floor's two readings are apart (`floor moved`: the host's speed changed during the run)."""
    print(f"run  {'cpu, vCPUs':33} threads p50 µs  chained µs  × chained  ORT p50 µs  × ORT  "
          "train × torch eager  hand-off µs  by rows  contended  around latency  reads around  floor moved")
    failed = 0
    goals = {name: [] for name in GOALS}   # each run's ratios, where it has them
    for n, path in enumerate(paths, 1):
        try:
            doc = results.load(path)
        except (OSError, ValueError) as exc:
            print(f"{n:<4} no results: {exc}")
            failed = 1
            continue
        rows = {(r.backend, r.variant): r for r in doc.results if r.ok and r.device == "cpu"}
        ours, ort, torch = (rows.get(k) for k in (("cblas", "threads"), ("onnxruntime", "default"), ("torch", "eager")))
        p50, chained, ort_p50 = ours and host_p50(ours), chained_floor_us(doc, "cpu"), ort and host_p50(ort)
        train = (ours and ours.train and ours.train.images_per_s, torch and torch.train and torch.train.images_per_s)
        ratios = [a / b if a and b else None for a, b in ((p50, chained), (p50, ort_p50), train)]
        for kept, r in zip(goals.values(), ratios):
            if r is not None:
                kept.append(r)   # unrounded: a 1.154 printed as 1.15 is not within 1.15
        chained_x, ort_x, train_x = ("–" if r is None else f"{r:.2f}" for r in ratios)
        layers = ours and ours.layers
        handoff = layers and layers.handoff_us and layers.handoff_us.p50
        share = layers and layers.row_split_share
        contended = max((c["slowed_share"] for m in (doc.floors.cpu and doc.floors.cpu.contention) or []
                         for c in m["cores"]), default=None)   # the worst core's share of slowed windows
        readings = (ours and ours.latency and ours.latency.contention) or []      # around each latency phase
        around = median_worst([[c["slowed_share"] for c in m["cores"]] for m in readings])
        reads = median_worst([[c["read"]["slowed_share"] for c in m["cores"]] for m in readings if has_reads(m)])
        apart = doc.floors.cpu and moved(doc.floors.cpu)
        print(f"{n:<4} {doc.meta.cpu + ', ' + str(doc.meta.cpu_affinity):33} {fmt(p50):>14}  {fmt(chained):>10}  "
              f"{chained_x:>9}  {fmt(ort_p50):>10}  {ort_x:>5}  {train_x:>19}  "
              f"{fmt(handoff, 2):>11}  {percent(share):>7}  {percent(contended):>9}  {percent(around):>15}  "
              f"{percent(reads):>12}  {percent(apart):>11}")
    if len(paths) > 1:
        print(goals_line(goals))
    return failed


def goals_line(goals: dict[str, list[float]]) -> str:
    """How many runs met each goal, of those that measured it, and the range of their ratios."""
    cells = []
    for name, (sign, goal) in GOALS.items():
        ratios = goals[name]
        if not ratios:
            cells.append(f"{name} not measured")
            continue
        met = sum(r <= goal if sign == "≤" else r >= goal for r in ratios)
        cells.append(f"{name} {min(ratios):.2f}–{max(ratios):.2f}, {sign} {goal:g} in {met} of {len(ratios)}")
    return "goals: " + "; ".join(cells)


def parse(argv: list[str] | None = None):
    p = Parser(prog="bench/gpu_summary.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--host-cpu", action="store_true",
                   help="one line per run of the CPU goals command (lenet.bench's results.json of each)")
    p.add_argument("results", nargs="+", metavar="RESULTS_JSON")
    args = p.parse_args(argv)
    if not args.host_cpu and len(args.results) > 1:
        p.error(f"expected one results.json without --host-cpu, got {len(args.results)}")
    return args


if __name__ == "__main__":
    args = parse()
    sys.exit(host_cpu(args.results) if args.host_cpu else main(args.results[0]))
