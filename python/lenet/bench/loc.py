"""Lines of code per backend: pygount over the files each backend lists in SOURCES.

code = pygount's source lines (code, plus lines holding only string literals, which is how
pygount's CMake lexer classes most CMake commands); comment = documentation lines (comments,
docstrings); blank = pygount's "empty": blank lines and lines of punctuation alone, such as a
closing brace. Counted when a run starts and kept in its raw results (results.Plan.loc), so
a report regenerated later shows the code that was measured.
"""
from __future__ import annotations

from pathlib import Path

from .._repo import source_root
from .results import Loc, LocFile


def count_files(paths, root: Path) -> Loc:
    """Lines summed over `paths` (relative to `root`), and per file.
    Raises FileNotFoundError naming the first missing file."""
    from pygount import SourceAnalysis

    files = []
    for rel in paths:
        path = Path(root) / rel
        if not path.is_file():
            raise FileNotFoundError(f"{rel}: not found under {root}")
        analysis = SourceAnalysis.from_file(str(path), "lenet")
        files.append(LocFile(path=str(rel), language=analysis.language, code=analysis.source_count,
                             comment=analysis.documentation_count, blank=analysis.empty_count))
    return Loc(code=sum(f.code for f in files), comment=sum(f.comment for f in files),
               blank=sum(f.blank for f in files), files=files)


def backend_loc(name: str, root: Path | None = None) -> tuple[Loc | None, str | None]:
    """(counts, None) for backend `name`, or (None, one-line reason)."""
    from .. import backends

    try:
        sources = tuple(backends.module(name).SOURCES)
    except Exception as exc:
        return None, f"cannot read {name}.SOURCES: {' '.join(str(exc).split())}"
    if not sources:
        return None, f"{name} lists no SOURCES"
    root = root or source_root()
    if root is None:
        return None, "source tree not found (run from the lenet checkout to count lines of code)"
    try:
        import pygount  # noqa: F401
    except ImportError:
        return None, "pygount is not installed (pip install '.[bench]')"
    try:
        return count_files(sources, root), None
    except (OSError, UnicodeError) as exc:
        return None, " ".join(str(exc).split())
