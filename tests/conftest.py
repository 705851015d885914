"""Shared fixtures, and the isolation of test modules marked `pytestmark = pytest.mark.isolated`:
such a module is never imported here; a child `python -m pytest` lists its tests (the modules'
listings side by side), then runs the selected ones once, and each test is reported here with the
child's outcome, traceback text or skip reason. The children run one at a time in the background
from the end of collection, beside this process's own tests, so two cores are busy. This keeps
TensorFlow and PyTorch/triton out of one process (README, Decisions)."""
import json
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import lenet
from lenet.check import step_batch

# The benchmark's floor clears OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE for its SGEMM; tests keep them.
os.environ.setdefault("LENET_KEEP_BLAS_ENV", "1")
CHILD = "LENET_ISOLATED_CHILD"          # set in a child: where it writes its results (JSON lines)
MARKED = re.compile(r"^pytestmark\s*=\s*\[?\s*pytest\.mark\.isolated\b", re.M)   # alone or first in a list


LISTING = ThreadPoolExecutor(max_workers=4)      # the isolated modules' --collect-only children, side by side
RUNNING = ThreadPoolExecutor(max_workers=1)      # their test runs: one child at a time, beside this process
CHILDREN: set = set()                            # the children alive now, ended with the session


def pytest_pycollect_makemodule(module_path, parent):
    if CHILD not in os.environ and MARKED.search(module_path.read_text(encoding="utf-8")):
        module = IsolatedModule.from_parent(parent, path=module_path)
        module.listing = LISTING.submit(module.child, "--collect-only", str(module_path))
        return module
    return None


class IsolatedModule(pytest.File):
    results = None                                          # nodeid -> report, once the child ran
    running = None                                          # the future of its run, once started

    def child(self, *args) -> tuple[int, str, list[dict]]:
        """Run pytest in a fresh process: (exit status, its output, the JSON lines it wrote)."""
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "results.jsonl"
            proc = subprocess.Popen([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args],
                                    cwd=self.config.rootpath, env=dict(os.environ, **{CHILD: str(out)}),
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            CHILDREN.add(proc)
            try:
                output = proc.communicate()[0]
            finally:
                CHILDREN.discard(proc)
            lines = out.read_text().splitlines() if out.exists() else []
        return proc.returncode, output, [json.loads(line) for line in lines]

    def start(self) -> None:
        """Its selected tests, run in the background (in RUNNING's order)."""
        mine = [i.nodeid for i in self.session.items if i.parent is self]
        if mine and self.running is None:
            self.running = RUNNING.submit(self.child, *mine)

    def collect(self):
        code, output, found = self.listing.result()
        for skip in (r for r in found if "skip" in r):       # the whole module skips, with its reason
            self.skipped_at = skip["where"]
            raise pytest.skip.Exception(skip["skip"])
        if code not in (0, 5):
            raise pytest.fail.Exception(f"collecting {self.path.name} in a child process failed:\n{output[-3000:]}")
        ours = {line.split(":")[0].strip() for line in self.config.getini("markers")}   # gpu, slow, ...
        for test in found:
            item = IsolatedItem.from_parent(self, name=test["nodeid"].split("::", 1)[1])
            for marker in ours.intersection(test["markers"]):
                item.add_marker(marker)
            yield item

    def run_once(self) -> dict:
        if self.results is None:
            self.start()
            code, output, found = self.running.result()
            lines = [line for line in output.splitlines() if not line.lstrip().startswith('File "')]
            self.output = f"exit status {code}; its output ends (stack lines left out):\n" + "\n".join(lines[-40:])
            self.results = {r["nodeid"]: r for r in found}      # a failed teardown overrides a passed call
        return self.results


class IsolatedItem(pytest.Item):
    def runtest(self):
        report = self.parent.run_once().get(self.nodeid)
        if report is None:
            raise IsolatedFailure(f"no result from the child process, {self.parent.output}")
        if report["outcome"] == "skipped":
            self.skipped_at = report["where"]                   # reported at the child's line
            pytest.skip(report["text"])
        if report["outcome"] == "failed":
            raise IsolatedFailure(f"{report['crash']} ({report['when']} in a child process)\n{report['text']}")

    def repr_failure(self, excinfo):
        return str(excinfo.value) if isinstance(excinfo.value, IsolatedFailure) else super().repr_failure(excinfo)

    def reportinfo(self):
        return self.path, None, self.name


class IsolatedFailure(Exception):
    pass


def _where(node, report):
    if report.skipped and getattr(node, "skipped_at", None) and isinstance(report.longrepr, tuple):
        report.longrepr = (*node.skipped_at, report.longrepr[2])


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    _where(item, (yield).get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    _where(collector, (yield).get_result())


def pytest_collectreport(report):
    if os.environ.get(CHILD) and report.skipped and isinstance(report.longrepr, tuple):
        with open(os.environ[CHILD], "a") as f:
            f.write(json.dumps({"skip": report.longrepr[2].removeprefix("Skipped: "), "where": report.longrepr[:2]}) + "\n")


def pytest_collection_finish(session):
    if not os.environ.get(CHILD) and not session.config.option.collectonly:
        for module in dict.fromkeys(i.parent for i in session.items if isinstance(i.parent, IsolatedModule)):
            module.start()
    if os.environ.get(CHILD) and session.config.option.collectonly:
        with open(os.environ[CHILD], "a") as f:
            for item in session.items:
                f.write(json.dumps({"nodeid": item.nodeid, "markers": [m.name for m in item.iter_markers()]}) + "\n")


def pytest_sessionfinish(session):
    """A session that stops early (-x, Ctrl-C) ends the children still running, and the queue."""
    RUNNING.shutdown(wait=False, cancel_futures=True)
    for proc in list(CHILDREN):
        proc.kill()


def pytest_runtest_logreport(report):
    if os.environ.get(CHILD) and (report.outcome != "passed" or report.when == "call"):
        skipped = report.skipped and isinstance(report.longrepr, tuple)
        text = report.longrepr[2].removeprefix("Skipped: ") if skipped else report.longreprtext
        crash = getattr(getattr(report.longrepr, "reprcrash", None), "message", "").splitlines()
        with open(os.environ[CHILD], "a") as f:
            f.write(json.dumps({"nodeid": report.nodeid, "when": report.when, "outcome": report.outcome, "text": text,
                                "crash": crash[0] if crash else "", "where": report.longrepr[:2] if skipped else None}) + "\n")


CHECKOUT = Path(__file__).resolve().parents[1]      # the checkout these tests run in
NOT_COMPARED = (".so", ".pyd", ".pyc", ".md")       # built at install, or documentation


def foreign_lenet(package: Path, source: Path) -> str | None:
    """Why the imported `lenet` (the directory `package`) is not the code of this checkout's
    python/lenet (`source`): a file the checkout has that is missing or different there, or a
    module it has that the checkout lacks; None when it is this checkout (editable, or a
    non-editable install of these very files)."""
    if package.resolve() == source.resolve() or not source.is_dir():    # not is_dir: a conftest copied out
        return None

    def files(root):
        return {p.relative_to(root): p for p in root.rglob("*")
                if p.is_file() and "__pycache__" not in p.parts and p.suffix not in NOT_COMPARED}
    installed, ours = files(package), files(source)
    for name, path in sorted(ours.items()):
        if name not in installed:
            return f"{name} is not there"
        if installed[name].read_bytes() != path.read_bytes():
            return f"its {name} differs from this checkout's"
    extra = sorted(str(n) for n in installed.keys() - ours.keys() if n.suffix == ".py")
    return f"it has {extra[0]}, which this checkout has not" if extra else None


def pytest_configure(config):
    """Refuse at once to test code other than this checkout's (an edit would silently go untested)."""
    package = Path(lenet.__file__).resolve().parent
    if why := foreign_lenet(package, CHECKOUT / "python" / "lenet"):
        raise pytest.UsageError(f"lenet is imported from {package}, not from this checkout ({why}): "
                                f"run `pip install -e {CHECKOUT}`, or reinstall it (`pip install {CHECKOUT}`)")


def emu_gpu():
    """An EmuGPU over THIS checkout's kernels and emulator runtime (an edited .cu is tested with no
    reinstall); skips, naming why, where the emulator cannot be built."""
    from lenet.emu import build
    from lenet.emu.launcher import EmuGPU
    if reason := build.unavailable():
        pytest.skip(reason)
    return EmuGPU(CHECKOUT / "python" / "lenet" / "kernels", CHECKOUT / "python" / "lenet" / "emu")


def standin_build(cudnn_net: str | None = None):
    """The path of the cudnn backend built on the cuDNN stand-in (tests/cudnn_standin) from THIS
    checkout's csrc/ and emulator, `cudnn_net` the text compiled instead of csrc/cudnn_net.cu (a
    planted bug); skips, naming why, where it cannot be built."""
    import cudnn_standin
    if reason := cudnn_standin.unavailable():
        pytest.skip(f"cuDNN stand-in build: {reason}")
    return cudnn_standin.build_module(cudnn_net)


@pytest.fixture(scope="session")
def standin_native():
    """The stand-in build (`_native_emu`) of this checkout's csrc/, built once per session (a cached
    build that fails to load is built again once)."""
    import cudnn_standin
    from lenet.emu import build
    return build.open_built(standin_build, cudnn_standin.load)


@pytest.fixture(scope="session")
def dataset():
    """The embedded real MNIST digits (4 000 train, 1 000 test)."""
    return lenet.data.embedded()


@pytest.fixture(scope="session")
def params():
    """The shipped weights, canonical float32."""
    return lenet.weights.load()


@pytest.fixture(scope="session")
def batch(params, dataset):
    """64 real held-out digits with labels for the SGD-step tests, spread over every class and
    away from ties at the shipped weights (lenet.check.step_batch)."""
    return step_batch(params, dataset.test_x, dataset.test_y)
