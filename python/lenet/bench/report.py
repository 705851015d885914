"""The report: results.json, results.md and PNG plots, from a run's raw results.

    python -m lenet.bench.report OUT [--no-plots] [--readme README.md]

(Re)writes them from OUT/raw/, each file atomically and in UTF-8; a damaged raw file or a plot
that fails is a one-line warning. --readme rewrites the README's results table (the block between
<!-- results:table --> and <!-- /results:table -->) from OUT/results.json.
"""
from __future__ import annotations

import sys
from pathlib import Path

from .._files import atomic_write, read_regular
from ..errors import InputError
from . import require_tools, results
from .markdown import below_floor, markdown, readme_device, readme_table, replace_readme_block
from .plots import PLOTS, render
from .readings import host_p50, label
from .raw import assemble


def write(doc: results.Results, out: Path, plots: bool = True) -> list[str]:
    """results.json and results.md, then each plot; returns one `warning:` line per plot that failed."""
    out = Path(out)
    atomic_write(out / "results.json", doc.dumps().encode("utf-8"))
    atomic_write(out / "results.md", markdown(doc).encode("utf-8", "backslashreplace"))
    warnings = []
    for plot in PLOTS if plots else ():
        try:
            render(plot, doc, out / plot.file)
        except Exception as exc:  # an optional step: the results are written already
            warnings.append(f"warning: {plot.file} not written: {type(exc).__name__}: {' '.join(str(exc).split())}")
    return warnings


def regenerate(out, plots: bool = True) -> results.Results:
    """The document from OUT/raw/, written out as the report; warnings go to stderr."""
    doc, warnings = assemble(out)
    warnings += [f"warning: {label(r)} beats the floor (p50 {host_p50(r):.3g} µs): the floor of this run "
                 "is wrong; results.md says so" for r in below_floor(doc)]
    for line in warnings + write(doc, out, plots):
        print(line, file=sys.stderr)
    return doc


def update_readme(readme: Path, results_json: Path) -> None:
    """Rewrite the README's results table for the document's device (markdown.readme_device) from a
    results.json (atomically; nothing else changes)."""
    try:
        doc = results.load(results_json)
        text = read_regular(readme, InputError).decode("utf-8")
        new = replace_readme_block(text, readme_table(doc), str(readme), readme_device(doc))
    except (OSError, ValueError) as exc:
        raise InputError(" ".join(str(exc).split())) from None
    atomic_write(readme, new.encode("utf-8"))


def main(argv=None) -> int:
    from .._cli import Parser

    p = Parser(prog="python -m lenet.bench.report", description="Write results.json, results.md and the "
               "PNG plots of a benchmark run from its raw results (OUT/raw/), e.g. after an interrupted run.")
    p.add_argument("out", metavar="OUT", help="the run's output directory (--out of python -m lenet.bench)")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.add_argument("--readme", metavar="FILE", help="instead, rewrite FILE's results table from "
                   "OUT/results.json: between <!-- results:table --> and <!-- /results:table -->, or "
                   "results:gpu-table for a run whose measured rows are all on the GPU")
    args = p.parse_args(argv)
    out = Path(args.out)
    if args.readme:
        update_readme(Path(args.readme), out / "results.json")
        print(f"wrote the results table of {args.readme} from {out / 'results.json'}", file=sys.stderr)
        return 0
    if not args.no_plots:
        require_tools(("matplotlib",))
    doc = regenerate(out, plots=not args.no_plots)
    done = doc.meta.runs_finished, doc.meta.runs_planned
    print(f"wrote {out}/results.json, results.md from {done[0]} of {done[1]} planned run(s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    from .._cli import guarded

    sys.exit(guarded(main)())
