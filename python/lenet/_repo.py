"""The lenet source checkout, when there is one (for lines of code and the git commit)."""
from __future__ import annotations

from pathlib import Path


def source_root() -> Path | None:
    """The lenet checkout: the working directory (the usual case, also for an installed package
    run from the checkout), else the one this package lives in; None when neither is one."""
    for root in (Path.cwd(), Path(__file__).resolve().parents[2]):   # python/lenet -> checkout
        if (root / "pyproject.toml").is_file() and (root / "python" / "lenet" / "backends").is_dir():
            return root
    return None
