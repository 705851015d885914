"""results.md and the README's results table, from a Results document."""
from __future__ import annotations

from ..model import LAYERS
from .floors.cpu import MOVED_NOTE, moved
from .readings import (chained_floor_us, device_p50, floor_us, fmt, host_p50, label, layered_rows, ok_rows,
                       on_runtime, short_label)
from .results import CpuFloor, Floors, GpuFloor, Results, Row, Split

README_BLOCKS = {"cpu": "results:table", "gpu": "results:gpu-table"}    # the README's table per device


def below_floor(doc: Results) -> list[Row]:
    """Rows whose p50 beats their device's floor: impossible, so the floor is wrong."""
    return [r for r in doc.results if r.ok and r.latency and floor_us(doc, r.device)
            and host_p50(r) < floor_us(doc, r.device)]


def times_floor(doc: Results, row: Row, short: bool = False) -> str:
    """p50 as a multiple of the floor (one decimal; `short`: two significant digits from 10×),
    '⚠ below the floor' where it beats it, '–' without either."""
    ratio = _ratio(row, floor_us(doc, row.device))
    if ratio is None:
        return "–"
    return "**⚠ below the floor**" if ratio < 1 else _times(ratio, 1, short)


def times_chained(doc: Results, row: Row) -> str:
    """p50 as a multiple of the chained floor (two decimals below 10×), '–' without either. Below 1
    is shown as it is: a single image could beat it only by overlapping fc1's weight reads with the
    convolutions."""
    ratio = _ratio(row, chained_floor_us(doc, row.device))
    return "–" if ratio is None else _times(ratio, 2, short=True)


def _ratio(row: Row, floor: float | None) -> float | None:
    return host_p50(row) / floor if row.latency and floor else None


def _times(ratio: float, decimals: int, short: bool) -> str:
    return f"{fmt(ratio, 2)}×" if short and ratio >= 10 else f"{ratio:.{decimals}f}×"


def train_roofline(doc: Results) -> float | None:
    """The CPU training roofline, images/s: forward, data gradient and weight gradient, each as many
    multiply-adds as the forward (3 × per image), at the all-cores SGEMM rate."""
    cpu = doc.floors.cpu if doc.floors else None
    return cpu.images_per_s_ceiling / 3 if cpu else None


def with_range(median: float, runs: list[float] | None, show) -> str:
    """`show(median)`, and the runs' min–max in brackets when there are several."""
    if not runs or len(runs) < 2:
        return show(median)
    return f"{show(median)} ({show(min(runs))}–{show(max(runs))})"


def train_text(row: Row) -> str:
    """Training images/s: the median run's, the runs' range in brackets ('–' untrained)."""
    return with_range(row.train.images_per_s, row.train.runs, fmt) if row.train else "–"


def of_roofline(doc: Results, row: Row) -> str:
    """A CPU row's training images/s as a fraction of the training roofline, the runs' range in
    brackets ('–' without either)."""
    roof = train_roofline(doc)
    if not (row.device == "cpu" and row.train and roof):
        return "–"
    return with_range(row.train.images_per_s / roof, [v / roof for v in row.train.runs or []], lambda v: f"{v:.2f}")


def _loc_text(row: Row) -> str:
    return f"{row.loc.code}/{row.loc.comment}/{row.loc.blank}" if row.loc else "–"


def markdown(doc: Results) -> str:
    meta = doc.meta
    gpu_names = ", ".join(sorted({g.get("name", "?") for g in meta.gpus or []})) or "no GPU"
    lines = [f"# LeNet benchmark: {meta.cpu} ({meta.cpu_affinity} cores), {gpu_names}", "",
             f"{meta.date} · `{meta.command}` · commit {meta.git.get('commit') or '?'}"
             f" · lenet {meta.versions.get('lenet', '?')}"
             f" · load average at start {', '.join(f'{x:.1f}' for x in meta.load_average or [])}", ""]
    lines += _below_floor_warning(doc)
    batches = meta.batch_sizes
    gpu_rows = any(r.ok and r.device == "gpu" for r in doc.results)
    chained = any(chained_floor_us(doc, r.device) for r in doc.results if r.ok)
    head = (["backend", "device", "variant", "p50 µs", "**p90 µs**", "p99 µs", "p50 × floor"]
            + (["p50 × chained"] if chained else [])
            + (["device µs (forward)", "kernels µs"] if gpu_rows else [])
            + [f"img/s @{b}" for b in batches]
            + ["train img/s", "train ÷ roofline", "epoch s (first)", "train acc", "acc", "LOC code/comment/blank"])
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in doc.results:
        if not r.ok:
            continue
        lat, tput, train = r.latency and r.latency.host_us, r.throughput.images_per_s if r.throughput else {}, r.train
        cells = [r.backend, r.device, str(r.variant or "–") + on_runtime(r),
                 fmt(lat and lat.p50), f"**{fmt(lat and lat.p90)}**", fmt(lat and lat.p99), times_floor(doc, r)]
        if chained:
            cells.append(times_chained(doc, r))
        if gpu_rows:
            cells += [fmt(device_p50(r, "forward")), fmt(device_p50(r, "kernels"))]
        cells += [fmt(tput.get(str(b))) for b in batches]
        cells += [train_text(r), of_roofline(doc, r),
                  f"{fmt(train.epoch_s)} ({fmt(train.first_epoch_s)})" if train else "–",
                  f"{train.accuracy:.2%}" if train else "–",
                  f"{r.accuracy:.2%}" if r.accuracy is not None else "–", _loc_text(r)]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines.append(f"Latency: one image at a time through `predict`, host to host, after warm-up; nearest-rank "
                 f"percentiles over all samples of {meta.repeats} interleaved run(s), each in a fresh process. "
                 "× floor: p50 over the CPU roofline floor (all cores) or the GPU host→host floor (below). "
                 + ("× chained: p50 over the CPU's chained floor, one image with its layers in sequence "
                    "(below). " if chained else "")
                 + ("GPU rows, p50 of CUDA-event times without the copies: device µs (forward) is the forward "
                    "as `forward()` enqueues it, the host's launch gaps included; kernels µs is kernel-only time "
                    "(a graph replay of the same launches, or summed per-kernel events). " if gpu_rows else "")
                 + f"Throughput: {meta.throughput}. {_training_note(doc)}"
                 "acc: the weights under test on the 1 000 embedded test digits. LOC: pygount over each backend's "
                 "SOURCES, counted when the run started.")
    lines += ["", *_floor_text(doc.floors)]
    lines += latency_contention_lines(doc)
    lines += layers_table(doc)
    others = [r for r in doc.results if not r.ok]
    if others:
        lines += ["", "Not measured:", ""]
        lines += [f"- {label(r)}: **{r.status}**: {r.reason}" + (f" (LOC {_loc_text(r)})" if r.loc else "")
                  for r in others]
    cut = [r for r in doc.results if r.ok and r.cut]
    if cut:
        lines += ["", "Cut short (what the worker measured before it is kept, the rest is missing):", ""]
        lines += [f"- {label(r)}: {r.cut}" for r in cut]
    notes = [r for r in doc.results if r.ok and r.train_reason]
    if notes:
        lines += ["", "Not trained:", ""] + [f"- {label(r)}: {r.train_reason}" for r in notes]
    return "\n".join(lines) + "\n"


def _below_floor_warning(doc: Results) -> list[str]:
    rows = below_floor(doc)
    if not rows:
        return []
    names = ", ".join(f"{label(r)} (p50 {fmt(host_p50(r))} µs)" for r in rows)
    return [f"> **⚠ Warning: {len(rows)} row(s) beat the floor, which no code can: the floor of this run is "
            f"wrong** (see the floors below; a BLAS kernel forced by the environment, or a busy machine while "
            f"it was measured). No ratio to the floor is shown for them: {names}.", ""]


def cpu_floor_text(cpu: CpuFloor) -> str:
    reads = cpu.weights_read_us
    rates = {"one_core": cpu.sgemm_gmacs_per_s.one_core, "all_cores": cpu.sgemm_gmacs_per_s.all_cores}
    parts = {k: (f"{fmt(getattr(cpu.arithmetic_us, k))} µs of arithmetic at {rates[k]:.1f} GMAC/s"
                 + (f", {fmt(getattr(reads, k))} µs to read the weights at "
                    f"{cpu.weight_bytes / getattr(reads, k) / 1e3:.0f} GB/s" if reads else ""))
             for k in rates}
    cores = cpu.cores or (cpu.read or {}).get("cores", "?")
    blas = cpu.blas or {}
    kernel = (f" SGEMM by {blas.get('internal_api', '?')} {blas.get('version') or ''} with its "
              f"{blas.get('architecture') or '?'} kernel".replace("  ", " ") if blas else "")
    cleared = f" ({', '.join(cpu.blas_env_cleared)} cleared for it)" if cpu.blas_env_cleared else ""
    text = (f"**CPU floor** (roofline per image: the larger of {cpu.multiply_adds_per_image / 1e6:.3f} M "
            f"multiply-adds at the measured SGEMM rate and {cpu.weight_bytes / 1e6:.2f} MB of float32 weights "
            f"read once from the cache they fit in): one core **{fmt(cpu.floor_us.one_core)} µs** "
            f"({parts['one_core']}); all {cores} cores **{fmt(cpu.floor_us.all_cores)} µs** "
            f"({parts['all_cores']}); SGEMM ceiling {fmt(cpu.images_per_s_ceiling)} images/s; training roofline "
            f"{fmt(cpu.images_per_s_ceiling / 3)} images/s (forward, data and weight gradients: 3 × the "
            f"multiply-adds; \"train ÷ roofline\" in the tables)."
            + (f"{kernel}{cleared}." if kernel else ""))
    if not reads:
        text += f" Without the weights-read term: {cpu.read_reason}."
    if cpu.chained_us:
        bounds = ", ".join(f"{name} {fmt(us)}" for name, us in (cpu.layer_bounds_us or {}).items() if us)
        text += (f" **Chained floor** (one image, its layers in sequence: conv1, conv2 and fc2's multiply-adds "
                 f"at the SGEMM rate plus fc1 at the slower of its multiply-adds and its weights read, since fc1 "
                 f"needs conv2's output): all {cores} cores **{fmt(cpu.chained_us.all_cores)} µs** ({bounds} µs), "
                 f"one core {fmt(cpu.chained_us.one_core)} µs; \"× chained\" in the tables. The floor above, "
                 f"where fc1's reads overlap the arithmetic, bounds batches and training.")
    if cpu.measured:
        read_rates = (", all-cores reads " + " and ".join(f"{m['read_all_cores'] / 1e9:.0f}" for m in cpu.measured)
                      + " GB/s" if all(m.get("read_all_cores") for m in cpu.measured) else "")
        text += (" Measured before and after the workers, each rate the better of the two (all-threads SGEMM "
                 + " and ".join(f"{m['sgemm_all_threads']:.1f}" for m in cpu.measured) + f" GMAC/s{read_rates}).")
        apart = moved(cpu)
        if apart is not None and apart > MOVED_NOTE:
            text += (f" **The two readings are {apart:.0%} apart**: the host's speed moved during this run, and "
                     f"its ratios to the floor, which takes the faster reading, carry that move (docs/measuring.md).")
    return text + contention_text(cpu.contention)


READS_TOO = (" (in brackets: of as many passes over one core's half of fc1's weights, which also see a host "
             "sharing the caches or memory)")


def contention_text(contention: list[dict] | None) -> str:
    """How contended the host was (floors.cpu.contention): each core's share of slowed windows."""
    if not contention:
        return ""
    first = contention[0]
    cores = " / ".join(str(c["cpu"]) for c in first["cores"])
    shares = "; ".join(shares_text(m) + (f" {m['when']} the workers" if m.get("when") else "") for m in contention)
    return (f" **Host contention**: of {first['window_us']} µs windows of a register-only loop, the share that each "
            f"core (cpu {cores}) ran at {first['slower']}× its fastest or slower{reads_legend(first)}: {shares}. "
            f"A single image waits for both of its halves, so it is slowed where either core is (docs/measuring.md).")


def has_reads(reading: dict) -> bool:
    """Whether a contention reading timed its read windows too (since csrc/NOTES.md v42)."""
    return all("read" in c for c in reading["cores"])


def reads_legend(reading: dict) -> str:
    return READS_TOO if has_reads(reading) else ""


def shares_text(reading: dict) -> str:
    """One contention reading's slowed shares, core by core: '2% / 4%', or with its reads '2% / 4% (66% / 28%)'."""
    text = " / ".join(f"{c['slowed_share']:.0%}" for c in reading["cores"])
    if has_reads(reading):
        text += " (" + " / ".join(f"{c['read']['slowed_share']:.0%}" for c in reading["cores"]) + ")"
    return text


def latency_contention_lines(doc: Results) -> list[str]:
    """Each CPU row's Latency.contention: its cores' shares of slowed windows just before and after
    each run's latency phase."""
    rows = [r for r in doc.results if r.ok and r.latency and r.latency.contention]
    if not rows:
        return []
    first = rows[0].latency.contention[0]

    def run_text(readings: list[dict]) -> str:
        return " → ".join(shares_text(m) for m in readings)

    lines = ["", f"Host contention around each run's latency phase: the share of {first['window_us']} µs windows "
             f"that each core (cpu {' / '.join(str(c['cpu']) for c in first['cores'])}) ran at {first['slower']}× "
             f"its fastest or slower{reads_legend(first)}, just before the warm-up → "
             "after the timed calls, run by run (the floor's reading, above; docs/measuring.md).", ""]
    for r in rows:
        runs = sorted({m.get("run", 1) for m in r.latency.contention})
        lines.append(f"- {short_label(r)}: " + "; ".join(
            run_text([m for m in r.latency.contention if m.get("run", 1) == n]) for n in runs))
    return lines


def gpu_floor_text(gpu: GpuFloor) -> str:
    peak = gpu.fp32_fma_per_s_peak
    return (f"**GPU floors** ({gpu.device_name}, {gpu.sm_count or '?'} SMs): host→host "
            f"**{fmt(gpu.host_to_host_floor_us)} µs** "
            + ("= a 3 KB host→device copy, an empty kernel launch and a 40 B device→host copy queued in order, "
               "one wait (p50); each alone with its own wait: " if gpu.chain_us else "= the sum of ")
            + f"launch + synchronize {fmt(gpu.launch_sync_us.p50)}, 3 KB host→device {fmt(gpu.h2d_3kb_us.p50)}, 40 B "
            f"device→host {fmt(gpu.d2h_40b_us.p50)} µs (p50s); kernel-only **{fmt(gpu.kernel_floor_us)} µs** "
            f"= the larger of {fmt(gpu.kernel_arithmetic_us)} µs of FP32 FMAs at the measured "
            f"{gpu.fp32_fma_per_s_measured / 1e12:.1f} T/s"
            + (f" (peak from the device attributes {peak / 1e12:.1f} T/s)" if peak else "")
            + f" and {fmt(gpu.kernel_weights_read_us)} µs to read the weights once at the measured device "
            f"bandwidth {gpu.dtod_bytes_per_s / 1e9:,.0f} GB/s (device-to-device copy, bytes read + written).")


def _floor_text(floors: Floors) -> list[str]:
    """The floors and their parts, one paragraph per device."""
    cpu = cpu_floor_text(floors.cpu) if floors.cpu else f"**CPU floor**: not measured ({floors.cpu_reason})."
    gpu = gpu_floor_text(floors.gpu) if floors.gpu else f"**GPU floors**: none ({floors.gpu_reason})."
    return [cpu, "", gpu]


def layers_table(doc: Results) -> list[str]:
    """--mode layers: each row's layer p50s and dispatch overhead, and why rows have none."""
    measured = layered_rows(doc)
    if not measured and "layers" not in doc.meta.modes:
        return []
    head = ["backend (variant)", "host→host p50 µs", *LAYERS, "Σ layers", "overhead µs", "overhead %", "method"]
    lines = ["", "## Where the time goes: per-layer p50 µs and the dispatch overhead", "",
             "| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 2) + "---|"]
    bounds = doc.floors.cpu.layer_bounds_us if doc.floors and doc.floors.cpu else None
    if bounds and any(r.device == "cpu" for r in measured):
        chained = fmt(sum(bounds.values()))
        lines.append("| " + " | ".join([f"CPU bound, all cores: {chained} µs chained", "–",
                                        *(fmt(bounds.get(name)) for name in LAYERS), chained, "–", "–",
                                        "each layer's floor (below)"]) + " |")
    for r in measured:
        lay = r.layers
        host, over = lay.overhead_host_us, lay.overhead_us
        lines.append("| " + " | ".join([
            short_label(r), fmt(host), *_layer_cells(lay.us), fmt(sum(lay.us.values())),
            fmt(over) + (" ⚠" if lay.overhead_warning else ""),
            f"{over / host:.0%}" if over is not None and host else "–", lay.method or "–"]) + " |")
    lines += ["", "Each layer: the p50 over the profiled single-image forwards of all runs, measured apart from "
              "the timed latency runs with the backend's own profiler or instrumentation (method); fc1 includes "
              "its ReLU. A cell `x → conv1+pool1` holds a fused group's time, which the backend does not split "
              "(↑: in the group above). Overhead: host→host latency p50 minus the sum of the layer p50s, what a "
              "call costs besides its layers' kernels (the framework's Python, dispatch, conversions, copies, "
              "thread hand-offs). ⚠: negative, the profiler's own cost inflated the layers."
              + (" CPU bound: each layer's own floor at this run's measured rates (its multiply-adds at the "
                 "SGEMM rate; fc1 the slower of that and its weights read), whose sum is the chained floor; a "
                 "fused group's bound is the sum of its layers'." if bounds else "")]
    lines += [f"- {short_label(r)}: {r.layers.overhead_warning}" for r in measured if r.layers.overhead_warning]
    lines += handoff_lines(measured)
    for text in filter(None, (split_text(doc, s) for s in doc.splits)):
        lines += ["", text]
    missing = [r for r in doc.results if r.ok and r.layers and not r.layers.us and r.layers.reason]
    if missing:
        lines += ["", "Per-layer times not measured:", ""] + [f"- {label(r)}: {r.layers.reason}" for r in missing]
    return lines


def handoff_lines(measured: list) -> list[str]:
    """The rows' hand-offs (Layers.handoff_us), where their backend records them."""
    rows = [r for r in measured if r.layers.handoff_us]
    if not rows:
        return []
    lines = ["", "Hand-offs: how long after each forward began a helper thread started on its half, in the "
             "same profiled forwards (p50 over all runs; each run's p50). Each forward pays it, and the lines "
             "the two cores exchange cost more the farther apart they sit: a run whose hand-off stands out had "
             "its cores farther apart, at least while profiled (docs/measuring.md). Cuts: the calling "
             "thread's part of conv1's and conv2's 20 and 50 output channels and fc1's 500 rows as each "
             "run's latency phase left them; they move to the thread that runs faster, so a cut off half "
             "says that one vCPU ran slower.", ""]
    for r in rows:
        h, share, cuts = r.layers.handoff_us, r.layers.row_split_share, r.layers.cuts
        percent = f"{share:.0%}" if share >= 0.005 else "under 1%"
        split = f"; split by rows in {percent} of the forwards" if share else ""
        cut = f"; cuts per run {' · '.join('/'.join(map(str, c)) for c in cuts)}" if cuts else ""
        lines.append(f"- {short_label(r)}: {fmt(h.p50, 2)} µs (p90 {fmt(h.p90, 2)}; per run "
                     f"{' / '.join(fmt(run.p50, 2) for run in h.runs or [h])}; {h.n:,} hand-offs{split}{cut})")
    return lines


def split_text(doc: Results, split: Split) -> str | None:
    """`split` of this run's rows as its text (results.Split), or None without both rows measured."""
    def row(backend, device, variant):
        return next((r for r in doc.results if r.ok and (r.backend, r.device, r.variant) == (backend, device, variant)
                     and r.latency and r.layers and r.layers.us), None)

    whole, base = row(*split.row), row(*split.base)
    if not (whole and base):
        return None
    total, arithmetic = host_p50(whole), sum(whole.layers.us.values())
    dispatch = host_p50(base) - sum(base.layers.us.values())
    parts = {"top": total - arithmetic - dispatch, "dispatch": dispatch, "arithmetic": arithmetic}
    return f"**{split.title}**: " + split.text.format(
        total=fmt(total), base=fmt(host_p50(base)), **{k: fmt(v) for k, v in parts.items()},
        **{f"{k}_share": f"{v / total:.0%}" for k, v in parts.items()})


def _layer_cells(layers_us: dict[str, float]) -> list[str]:
    """One cell per layer of LAYERS; a fused group's time in its first layer's cell."""
    cells = []
    for name, us in layers_us.items():
        parts = name.split("+")
        cells += [fmt(us) if len(parts) == 1 else f"{fmt(us)} → {name}"] + ["↑"] * (len(parts) - 1)
    return cells


def _training_note(doc: Results) -> str:
    trained = ok_rows(doc, "train")
    if not trained:
        return "Training: no row trained in this run. "
    t = trained[0].train
    return (f"Training: lr {t.learning_rate}, batch {t.batch_size}, from the seeded init, {doc.meta.epochs} "
            f"epoch(s) on {t.images} images of {t.dataset}, in every run; train img/s is the median run's "
            f"(the runs' min–max in brackets), and its epoch s excludes the first epoch. ")


def readme_device(doc: Results) -> str:
    """The device a results document's README table is for: "gpu" when every measured row ran on one."""
    measured = [r for r in doc.results if r.ok and r.latency]
    return "gpu" if measured and all(r.device == "gpu" for r in measured) else "cpu"


def readme_table(doc: Results) -> str:
    """The README's results table for readme_device(doc): every measured row, the figures a reader
    compares (GPU: the CUDA-event device times and the largest batch instead of the CPU floors)."""
    gpu = readme_device(doc) == "gpu"
    largest = str(max(doc.meta.batch_sizes or [64]))
    per_run = (doc.meta.repeats or 1) > 1            # one run: its p50 is the p50
    head = (["backend (variant)", "p50 µs"] + (["per-run p50 µs"] if per_run else []) + ["p90 µs", "× floor"]
            + (["p99 µs", "device µs (forward)", "kernels µs", "img/s @64", f"img/s @{largest}", "train img/s"] if gpu
               else ["× chained", "img/s @64", "train img/s", "train ÷ roofline"]) + ["code lines"])
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for r in doc.results:
        if not (r.ok and r.latency):
            continue
        lat, tput = r.latency.host_us, r.throughput.images_per_s if r.throughput else {}
        cells = ([short_label(r), fmt(lat.p50)] + ([" / ".join(fmt(one.p50) for one in lat.runs or []) or "–"]
                                                     if per_run else []) + [fmt(lat.p90), times_floor(doc, r, short=True)])
        cells += ([fmt(lat.p99), fmt(device_p50(r, "forward")), fmt(device_p50(r, "kernels")), fmt(tput.get("64")),
                   fmt(tput.get(largest)), train_text(r)] if gpu
                  else [times_chained(doc, r), fmt(tput.get("64")), train_text(r), of_roofline(doc, r)])
        lines.append("| " + " | ".join(cells + [str(r.loc.code) if r.loc else "–"]) + " |")
    return "\n".join(lines) + "\n"


def _markers(device: str) -> tuple[str, str]:
    return f"<!-- {README_BLOCKS[device]} -->", f"<!-- /{README_BLOCKS[device]} -->"


def replace_readme_block(text: str, table: str, where: str = "README", device: str = "cpu") -> str:
    """`text` with the block between `device`'s table markers replaced by `table`;
    ValueError if the markers are missing or out of order."""
    begin, end_mark = _markers(device)
    start, end = text.find(begin), text.find(end_mark)
    if start < 0 or end < start:
        raise ValueError(f"{where} has no {begin} ... {end_mark} block")
    return text[:start + len(begin)] + "\n" + table + text[end:]


def readme_block(text: str, device: str = "cpu") -> str | None:
    """The table between `device`'s table markers, or None without them."""
    begin, end_mark = _markers(device)
    start, end = text.find(begin), text.find(end_mark)
    return text[start + len(begin):end].strip("\n") + "\n" if 0 <= start < end else None
