"""The conftest's isolation of modules marked `pytestmark = pytest.mark.isolated`: each runs in
its own process, never in the parent's, and every test's outcome, failure text and skip reason
comes back to the parent's report. And the tests refuse, in one line, to run a `lenet` other than
this checkout's."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import lenet

TESTS = Path(__file__).resolve().parent
HEADER = "import os, sys\nimport pytest\n\npytestmark = pytest.mark.isolated\n"


def test_isolated_modules_run_apart_and_report_each_test(tmp_path):
    shutil.copy(TESTS / "conftest.py", tmp_path)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    isolated: own process\n    slow: slow\n")
    (tmp_path / "test_first.py").write_text(HEADER + """
os.environ["FIRST_IMPORTED"] = str(os.getpid())           # a process-wide change, like loading LLVM

def test_passes():
    assert os.environ["FIRST_IMPORTED"] == str(os.getpid())

def test_fails():
    assert 1 + 1 == 3, "the child's own message"

def test_skips():
    pytest.skip("not on this machine")

@pytest.mark.slow
def test_marked_slow():
    pass
""")
    (tmp_path / "test_second.py").write_text(HEADER + """
def test_never_shares_a_process_with_the_first():
    assert "FIRST_IMPORTED" not in os.environ
""")
    (tmp_path / "test_skipped_module.py").write_text(HEADER + """
pytest.skip("no framework installed", allow_module_level=True)
""")
    (tmp_path / "test_crash.py").write_text(HEADER + """
def test_aborts():
    os.abort()                                              # as TensorFlow and triton do together

def test_after_the_abort():
    pass
""")
    (tmp_path / "test_plain.py").write_text("""import os, sys

def test_the_parent_imported_no_isolated_module():
    assert "FIRST_IMPORTED" not in os.environ and "test_first" not in sys.modules
""")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(lenet.__file__).parents[1]),
                                                       os.environ.get("PYTHONPATH", "")]))
    env.pop("LENET_ISOLATED_CHILD", None)
    run = subprocess.run([sys.executable, "-m", "pytest", "-ra", "-p", "no:cacheprovider", "-m", "not slow", "."],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    out = run.stdout
    assert run.returncode == 1, out + run.stderr
    assert "3 failed, 3 passed, 2 skipped, 1 deselected" in out, out
    assert "no result from the child process, exit status -6" in out and "Fatal Python error: Aborted" in out, out
    assert "FAILED test_first.py::test_fails" in out and "the child's own message" in out, out
    assert "SKIPPED [1] test_first.py:15: not on this machine" in out, out
    assert "SKIPPED [1] test_skipped_module.py:6: no framework installed" in out, out
    assert "test_fails - AssertionError: the child's own message" in out, out


def test_the_tests_refuse_a_lenet_that_is_not_this_checkouts(tmp_path):
    """A non-editable install of this very checkout runs (CI installs so); one whose files differ
    (a .py edited here after installing) is refused at start, saying how to fix it."""
    checkout = TESTS.parent
    site = tmp_path / "site"
    shutil.copytree(checkout / "python" / "lenet", site / "lenet", ignore=shutil.ignore_patterns("__pycache__"))
    run = f"""import sys
sys.meta_path[:] = [f for f in sys.meta_path if "ScikitBuild" not in type(f).__name__]   # an editable install's finder
sys.path.insert(0, {str(site)!r})
import lenet, pytest
assert lenet.__file__ == {str(site / "lenet" / "__init__.py")!r}, lenet.__file__
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", "--collect-only", "tests/test_data.py"]))"""

    def pytest_with_the_copy():
        return subprocess.run([sys.executable, "-c", run], cwd=checkout, capture_output=True, text=True, timeout=300)

    same = pytest_with_the_copy()
    assert same.returncode == 0, same.stdout + same.stderr
    with open(site / "lenet" / "check.py", "a") as f:
        f.write("# edited after the install\n")
    stale = pytest_with_the_copy()
    message = [line for line in (stale.stdout + stale.stderr).splitlines() if line.startswith("ERROR: ")]
    assert stale.returncode == 4 and message == [
        f"ERROR: lenet is imported from {site / 'lenet'}, not from this checkout (its check.py differs from this "
        f"checkout's): run `pip install -e {checkout}`, or reinstall it (`pip install {checkout}`)"], stale.stdout + stale.stderr
