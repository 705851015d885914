"""CI runs the README's set-up, literally: `.ci/run` takes its commands from the README's marked
blocks and holds no install step of its own."""
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
INSTALL = re.compile(r"\b(pip3?|apt-get|apt|conda|mamba|uv|dnf|yum|brew|npm)\b[^\n#]*\binstall\b|\b(curl|wget)\b")


def readme_block(name: str) -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = re.search(rf"^<!-- ci:{name} -->\n```sh\n(.*?)```\n<!-- /ci:{name} -->$", text, re.S | re.M)
    assert block, f"README has no ci:{name} block"
    return [re.sub(r"\s+#.*$", "", line) for line in block.group(1).splitlines() if line.strip()]


def test_ci_runs_exactly_the_readme_commands():
    setup = readme_block("setup")
    assert setup == ['pip install ".[cpu]" && python -m lenet.bench --backend all',
                     'pip install ".[test,cpu]" && python -m pytest'], setup
    dry = subprocess.run(["bash", str(ROOT / ".ci" / "run"), "--dry-run"], capture_output=True, text=True, timeout=60)
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.splitlines() == readme_block("prerequisites") + [setup[0] + " --quick", setup[1]]


def test_ci_has_no_install_step_the_readme_does_not_show():
    shown = readme_block("prerequisites") + readme_block("setup")
    script = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()
              if line.strip() and not line.strip().startswith("#")]
    hidden = [line for line in script if INSTALL.search(line) and line not in shown]
    assert not hidden, f".ci/run installs what the README does not show: {hidden}"
    assert INSTALL.search("python -m pip install -q torch==2.13.0")        # the pattern catches such a step


def test_ci_removes_its_directory_after_both_passes(tmp_path):
    """The EXIT trap, as .ci/run sets it (errexit on, both passes reaped): a failing `kill` with no
    process must not end the trap before the rm (each run left 16 GB of venvs behind)."""
    trap = next(line for line in (ROOT / ".ci" / "run").read_text().splitlines() if line.startswith("trap "))
    work = tmp_path / "ci"
    work.mkdir()
    script = f'set -euo pipefail\ntmp={work}\nwith="" without=""\n{trap}\nexit 1\n'
    assert subprocess.run(["bash", "-c", script], timeout=60).returncode == 1
    assert not work.exists()
