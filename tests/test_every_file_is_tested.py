"""Every Python file under python/ and bench/ is imported or run by some test, so that none rots
unseen (bench/sanitize_forward.py once imported names that no longer existed, and no test noticed).

Read from the sources, so it holds for any subset of the suite: a file is reached when a test
file imports it, directly or through what it imports (a package's __init__ runs with it, and a
package whose __init__ lists its modules with pkgutil.iter_modules reaches every public one), or
when a reached file names it in a string the way it is run: its dotted name (`python -m`, a
package's __main__ with it) or, for a script under bench/, its file name.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

from test_docs import tracked

ROOT = Path(__file__).resolve().parents[1]
PACKAGE_ROOT = ROOT / "python"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE_ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in PACKAGE_ROOT.rglob("*.py")}
SCRIPTS = {p.name: p for p in (ROOT / "bench").glob("*.py")}


def with_parents(name: str) -> set[str]:
    """What importing `name` runs: it and every package above it."""
    parts = name.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts) + 1)} & set(MODULES)


def reaches(path: Path) -> set[Path]:
    """The files that importing or running `path` imports or runs, one step."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    own = module_name(path) if path.is_relative_to(PACKAGE_ROOT) else ""
    package = own if path.name == "__init__.py" else own.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1]) if node.level else ""
            base = ".".join(filter(None, [base, node.module]))
            names |= {base} | {f"{base}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Call) and ast.unparse(node.func) == "pkgutil.iter_modules":
            names |= {m for m in MODULES if m.rpartition(".")[0] == own and not m.rpartition(".")[2].startswith("_")}
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if node.value in MODULES:
                names |= {node.value, f"{node.value}.__main__"}
            elif node.value in SCRIPTS:
                names.add(node.value)
    found = {MODULES[m] for name in names for m in with_parents(name)}
    return found | {SCRIPTS[name] for name in names if name in SCRIPTS}


def test_every_python_file_under_python_and_bench_is_imported_or_run_by_a_test():
    reached: set[Path] = set()
    todo = sorted((ROOT / "tests").glob("*.py"))
    while todo:
        path = todo.pop()
        for found in reaches(path) - reached:
            reached.add(found)
            todo.append(found)
    missing = sorted(str(p.relative_to(ROOT)) for p in {*MODULES.values(), *SCRIPTS.values()} - reached)
    assert not missing, f"no test imports or runs: {', '.join(missing)}"


def test_the_reach_is_read_right():
    """The rules above, on files whose reach is known (a wrong rule would pass everything)."""
    names = {str(p.relative_to(ROOT)) for p in reaches(ROOT / "tests" / "test_gpu_script.py")}
    assert {"bench/gpu_summary.py", "python/lenet/bench/devmem.py", "python/lenet/backends/__init__.py",
            "python/lenet/__init__.py"} <= names
    backends = {str(p.relative_to(ROOT)) for p in reaches(ROOT / "python" / "lenet" / "backends" / "__init__.py")}
    assert "python/lenet/backends/numba.py" in backends and "python/lenet/backends/_numba_cpu.py" not in backends
    numba = {str(p.relative_to(ROOT)) for p in reaches(ROOT / "python" / "lenet" / "backends" / "numba.py")}
    assert {"python/lenet/backends/_numba_cpu.py", "python/lenet/backends/_numba_gpu.py",
            "python/lenet/errors.py"} <= numba


def readme_map() -> set[str]:
    """The folders named in the README's "Where things are" block (its first fenced block)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8").split("## Where things are", 1)[1]
    block = text.split("```", 2)[1]
    return {name for line in block.splitlines() for name in re.split(r",\s*", re.split(r"\s{2,}", line)[0]) if name}


def test_every_top_level_and_package_folder_is_in_the_readme_map():
    """The map cannot drift again: each folder of the checkout and of the package has its line."""
    folders = set()
    for path in tracked():
        parts = path.relative_to(ROOT).parts
        if len(parts) > 1:
            folders.add(f"{parts[0]}/")
        if parts[:2] == ("python", "lenet") and len(parts) > 3:
            folders.add(f"python/lenet/{parts[2]}/")
    assert {"python/", "tests/", "python/lenet/backends/"} <= folders       # the listing is read right
    mapped = readme_map()
    assert "python/lenet/backends/" in mapped and "csrc/" in mapped          # the map is read right
    missing = sorted(f for f in folders if f not in mapped and not any(m.startswith(f) for m in mapped))
    assert not missing, f"README's 'Where things are' leaves out: {', '.join(missing)}"
