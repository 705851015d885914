"""python/lenet/_native.pyi is hand-written (it documents shapes and errors), so it is checked
against what pybind11-stubgen reads off the built module: the same names, the same parameters."""
import ast
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

import lenet

STUB = Path(lenet.__file__).with_name("_native.pyi")


def outline(source: str) -> dict:
    """{name: parameter names} for module-level functions and attributes, and Class.member."""
    out = {}

    def visit(body, prefix=""):
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                args = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
                out[prefix + node.name] = tuple(a.arg for a in args if a.arg != "self")
            elif isinstance(node, ast.ClassDef):
                out[prefix + node.name] = "class"
                visit(node.body, prefix + node.name + ".")
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                if node.target.id != "__all__":
                    out[prefix + node.target.id] = "attribute"
    visit(ast.parse(source).body)
    return out


def test_stub_matches_the_built_module(tmp_path):
    if importlib.util.find_spec("pybind11_stubgen") is None:
        pytest.skip("pybind11-stubgen is not installed (pip install '.[test]')")
    native = pytest.importorskip("lenet._native", reason="lenet._native not built")
    env_path = str(Path(lenet.__file__).parents[1])
    done = subprocess.run([sys.executable, "-m", "pybind11_stubgen", "lenet._native", "-o", str(tmp_path)],
                          capture_output=True, text=True, env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    generated = outline((tmp_path / "lenet" / "_native.pyi").read_text())
    written = outline(STUB.read_text())
    if not native.WITH_CUDA:          # the stub describes the CUDA build; a CPU-only build has a subset
        written = {k: v for k, v in written.items() if k in generated}
    assert generated == written
