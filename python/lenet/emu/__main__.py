"""python -m lenet.emu: run the hand-written CUDA kernels on the CPU emulator of CUDA semantics.

Each kernel version's forward pass and one SGD step (on 7 images) run through the very launch sequences the
cupy and pycuda backends use, on the shipped weights and embedded digits, with every load and
store checked; each result is compared with the NumPy reference (lenet.check; the step's images
are held-out digits away from ties, as in the tests), a wrong one followed by the first launch
whose output differs from its NumPy model (lenet.emu.divergence); then, per layer of each forward, its launches
and the bytes its threads load and store (counts, never times). Exit status 0
when everything agrees and the emulator reported nothing, else 1.
"""
from __future__ import annotations

import sys

from .. import data, model, weights
from .._cli import Parser, guarded, number
from ..backends import _cuda_kernels as ck
from ..backends import _cuda_net as cn
from ..check import logits_reason, reference_logits, step, step_batch
from . import build, modules
from .divergence import NO_DIVERGENCE, forward_divergence, step_divergence
from .launcher import NEVER_TIMED, EmuGPU, layer_traffic
from .runtime import EmuError

MAX_BATCH = 64      # the largest batch the tests run; more only takes longer
STEP_BATCH = 7      # the SGD step's batch, as in the tests (lenet.check.step_batch at 1 picks a digit
                    # on which even the float32 NumPy reference misses the step tolerance)


def parse(argv):
    parser = Parser(prog="python -m lenet.emu", description=__doc__.split("\n\n")[0].split(": ", 1)[1])
    parser.add_argument("--variant", choices=[*ck.VERSIONS, "all"], default="all",
                        help="kernel version: 1 simple, 2 tiled, 3 fused (forward; trains with 2) (default: all)")
    parser.add_argument("--batch", type=number(int, 1, MAX_BATCH), default=7,
                        help=f"images per forward pass, 1..{MAX_BATCH} (default: 7); the SGD step takes {STEP_BATCH}")
    return parser.parse_args(argv)


def check_variant(variant, params, dataset, n, gpu=EmuGPU) -> list[tuple[str, str | None]]:
    """[(what was run, why it failed or None)] for the forward and the SGD step of `variant`; a wrong
    value comes with the first launch that computes one (lenet.emu.divergence). `gpu` makes the EmuGPU."""
    results = []
    net = cn.CudaNet("emu", gpu(), params, variant)
    x = dataset.test_x[:n]
    try:
        reason = logits_reason(net.predict(x), reference_logits(params, x))
        if reason:
            reason += "\n  " + (forward_divergence(cn.CudaNet("emu", gpu(), params, variant), x) or NO_DIVERGENCE)
        results.append((f"v{variant} forward, batch {n}", reason))
    except EmuError as err:
        results.append((f"v{variant} forward, batch {n}", str(err)))
    trains = "" if variant != "3" else " (v3 trains with the v2 kernels)"
    try:
        images, labels = step_batch(params, dataset.test_x, dataset.test_y, STEP_BATCH)
        reason = step(net, params, images, labels)["reason"]
        if reason:
            fresh = cn.CudaNet("emu", gpu(), params, variant)
            reason += "\n  " + (step_divergence(fresh, images, labels, model.LEARNING_RATE) or NO_DIVERGENCE)
        results.append((f"v{variant} SGD step, batch {STEP_BATCH}{trains}", reason))
    except EmuError as err:
        results.append((f"v{variant} SGD step, batch {STEP_BATCH}{trains}", str(err)))
    return results


def traffic_lines(variant, params, dataset, n) -> list[str]:
    """The forward's launches and memory traffic per layer (layer_traffic), as a small table."""
    counts = layer_traffic(cn.CudaNet("emu", EmuGPU(), params, variant), dataset.test_x[:n])
    kb = lambda b: f"{b / 1e3:,.1f}"                   # noqa: E731
    lines = [f"v{variant} forward, batch {n}, what each layer's threads load and store (kB, every access "
             "counted, before caches): launches, device memory read / written, shared memory read / written"]
    for group, c in counts.items():
        lines.append(f"  {group:32} {c['launches']:>2}  {kb(c['global_read']):>10} / {kb(c['global_written']):>8}"
                     f"  {kb(c['shared_read']):>10} / {kb(c['shared_written']):>8}")
    return lines


def unchecked_limits() -> str | None:
    """The line saying which launch limits go unchecked here, and why (none where nvcc is on PATH)."""
    if missing := modules.sm90(ck.KERNEL_DIR / "fused.cu").missing:
        return (f"launch limits from nvcc (registers per block, __launch_bounds__) not checked: {missing}; "
                "shared-memory alignments are x86's")
    return None


@guarded
def main(argv=None) -> int:
    args = parse(argv)
    build.require()
    params, dataset = weights.load(), data.embedded()
    variants = list(ck.VERSIONS) if args.variant == "all" else [args.variant]
    if note := unchecked_limits():
        print(note, flush=True)
    results = []
    for variant in variants:
        for what, reason in check_variant(variant, params, dataset, args.batch):
            print(f"{what}: {'agrees with the NumPy reference' if reason is None else 'FAILED: ' + reason}", flush=True)
            results.append(reason)
        if results[-1] is None:
            print("\n".join(traffic_lines(variant, params, dataset, args.batch)), flush=True)
    failed = sum(r is not None for r in results)
    print(f"verdict: {len(results) - failed} of {len(results)} checks agree with the NumPy reference, "
          f"{failed} failed" + ("" if failed else "; the emulator reported no race, out-of-bounds access or barrier error"))
    print(NEVER_TIMED)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
