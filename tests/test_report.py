"""The report: damaged raw results, atomic UTF-8 writes, the README's table, label placement."""
import json
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from lenet.bench import markdown, meta, plots, progress, results

from test_bench import small_run, validate

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = ROOT / "bench" / "results" / "cpu-2core" / "results.json"


def run_report(out, *args, **kwargs):
    return subprocess.run([sys.executable, "-m", "lenet.bench.report", str(out), *args],
                          capture_output=True, text=True, timeout=120, **kwargs)


def test_damaged_raw_files_are_named_and_left_out(tmp_path):
    small_run(tmp_path)
    bad = {"run-1-0.json": '{"backend": "nu', "run-1-1.json": "", "run-1-2.json": "{}", "run-1-3.json": "[1,2]",
           "run-0-0 (copy).json": "{}", "floors-after.json": "[]"}
    for name, text in bad.items():
        (tmp_path / "raw" / name).write_text(text)
    done = run_report(tmp_path, "--no-plots")
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == len(bad)
    for name in bad:
        assert sum(str(tmp_path / "raw" / name) in w for w in warnings) == 1, (name, warnings)
    assert any("empty file" in w for w in warnings) and any("list where an object (Row)" in w for w in warnings)
    doc = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
    validate(doc)
    assert [(r["backend"], r["status"]) for r in doc["results"]] == [("numpy", "ok"), ("keras", "unavailable")]


def test_a_plan_without_its_lists_is_a_warning(tmp_path):
    small_run(tmp_path)
    plan = json.loads((tmp_path / "raw" / "plan.json").read_text())
    del plan["skipped"]
    (tmp_path / "raw" / "plan.json").write_text(json.dumps(plan))
    done = run_report(tmp_path, "--no-plots")
    assert done.returncode == 0 and f"warning: {tmp_path / 'raw' / 'plan.json'}: no 'skipped'" in done.stderr
    (tmp_path / "raw" / "plan.json").write_text("[1, 2]")
    done = run_report(tmp_path, "--no-plots")
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "plan.json: not a benchmark plan" in done.stderr


def _limit_file_size():
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)           # a write past the limit fails (EFBIG) instead
    resource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000))


def test_a_report_that_cannot_be_written_keeps_the_previous_one(tmp_path):
    """As on a full disk: the write fails with a message naming the file, and the good
    results.json and results.md of an earlier report stay whole."""
    small_run(tmp_path)
    assert run_report(tmp_path, "--no-plots").returncode == 0
    before = {name: (tmp_path / name).read_bytes() for name in ("results.json", "results.md")}
    assert len(before["results.json"]) > 1000
    done = run_report(tmp_path, "--no-plots", preexec_fn=_limit_file_size)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("error: ") and f"cannot write {tmp_path / 'results.json'}: File too large" in done.stderr
    assert {name: (tmp_path / name).read_bytes() for name in before} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["raw", "results.json", "results.md"]   # no temporaries


def test_bench_under_the_c_locale_into_a_non_utf8_directory(tmp_path):
    """The whole run, report and table on stdout included, with an ASCII locale and an --out
    whose name is not UTF-8; and a report-only rerun there."""
    out = Path(os.fsdecode(bytes(tmp_path) + b"/out-\xff"))     # not UTF-8
    env = {"PATH": os.environ["PATH"], "LC_ALL": "C", "PYTHONUTF8": "0", "LENET_KEEP_BLAS_ENV": "1",
           "MPLCONFIGDIR": str(tmp_path / "mpl")}
    done = subprocess.run([sys.executable, "-m", "lenet.bench", "--backend", "numpy", "--quick", "--mode",
                           "latency,loc", "--out", bytes(out)], capture_output=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    text = (out / "results.md").read_text(encoding="utf-8")
    assert "| numpy | cpu | float32 |" in text and "µs" in text and text.encode() in done.stdout
    assert (out / "cost_of_abstraction.png").stat().st_size > 1000
    done = subprocess.run([sys.executable, "-m", "lenet.bench.report", bytes(out)], capture_output=True, timeout=120,
                          env=env)
    assert done.returncode == 0 and (out / "results.md").read_text(encoding="utf-8") == text


def test_readme_table_is_rewritten_between_its_markers_only(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# title\n\nbefore\n<!-- results:table -->\nold table\n<!-- /results:table -->\nafter µ\n",
                      encoding="utf-8")
    done = run_report(COMMITTED.parent, "--readme", str(readme))
    assert done.returncode == 0, done.stderr
    text = readme.read_text(encoding="utf-8")
    table = markdown.readme_table(results.load(COMMITTED))
    assert text == f"# title\n\nbefore\n<!-- results:table -->\n{table}<!-- /results:table -->\nafter µ\n"
    assert ("| cblas (threads) | 15.9 | 16.4 / 16.3 / 13.4 | 16.9 | 1.4× | 1.05× | 96,533 | 34,007 (33,912–34,102) | "
            "1.14 (1.14–1.14) | 1619 |") in table
    assert "| keras (tensorflow/predict) | 30,503 | 31,165 / 31,609 / 28,804 | 33,738 | 2,730× | 2,020× |" in table
    readme.write_text("no markers\n")
    done = run_report(COMMITTED.parent, "--readme", str(readme))
    assert done.returncode == 2 and "has no <!-- results:table --> ... <!-- /results:table --> block" in done.stderr
    assert readme.read_text() == "no markers\n"


def test_the_readme_table_agrees_with_the_committed_results():
    block = markdown.readme_block((ROOT / "README.md").read_text(encoding="utf-8"))
    if block is None:
        pytest.skip("README.md has no <!-- results:table --> block yet")
    assert block == markdown.readme_table(results.load(COMMITTED)), \
        f"regenerate it: python -m lenet.bench.report {COMMITTED.parent.relative_to(ROOT)} --readme README.md"


def test_the_readme_gpu_table_agrees_with_the_committed_h200_results():
    committed = ROOT / "bench" / "results" / "h200" / "results.json"
    doc = results.load(committed)
    assert markdown.readme_device(doc) == "gpu" and markdown.readme_device(results.load(COMMITTED)) == "cpu"
    table = markdown.readme_table(doc)
    assert table.startswith("| backend (variant) | p50 µs | p90 µs | × floor | p99 µs | device µs (forward) | kernels µs |")
    assert "| cupy (3) on GPU | 60.7 | 67.3 | 2.7× | 81.8 | 29.7 | 29.7 | 406,478 | 515,955 | 107,274 | 729 |" in table
    assert "| torch (graph) on GPU | 70.9 | 77.6 | 3.1× | 91.2 | 39.5 | 39.4 | 498,128 | 1,173,269 | 27,057 | 174 |" in table
    assert markdown.readme_block((ROOT / "README.md").read_text(encoding="utf-8"), "gpu") == table, \
        "regenerate it: python -m lenet.bench.report bench/results/h200 --readme README.md"


def test_the_committed_h200_repeats_hold_the_goal_rows_four_runs_each():
    doc = results.load(ROOT / "bench" / "results" / "h200" / "repeats" / "results.json")
    assert sorted((r.backend, r.variant, r.runs) for r in doc.results) == [
        ("cudnn", "graph", 4), ("cupy", "3", 4), ("torch", "eager", 4), ("torch", "graph", 4)]
    assert all(r.check.ok and len(r.train.runs) == 4 for r in doc.results)


@pytest.mark.parametrize("folder, cpu", [("xeon-2vcpu", "Xeon"), ("xeon-2core", "Xeon")])
def test_the_readme_states_the_committed_goal_runs_ratios(folder, cpu):
    runs = sorted((ROOT / "bench" / "results" / folder).glob("run-*/results.json"))
    assert len(runs) == 3
    chained, ort, train = [], [], []
    for path in runs:
        doc = results.load(path)
        assert cpu in doc.meta.cpu and doc.meta.cpu_affinity == 2
        rows = {(r.backend, r.variant): r for r in doc.results if r.device == "cpu"}
        assert sorted(rows) == [("cblas", "threads"), ("onnxruntime", "default"), ("torch", "eager")]
        assert all(r.check.ok and r.runs == 3 for r in rows.values())
        cblas = rows["cblas", "threads"]
        chained.append(markdown.times_chained(doc, cblas))   # as the run's results.md shows it
        ort.append(f"{cblas.latency.host_us.p50 / rows['onnxruntime', 'default'].latency.host_us.p50:.2f}×")
        train.append(f"{cblas.train.images_per_s / rows['torch', 'eager'].train.images_per_s:.1f}×")
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    for ratios in (chained, ort, train):
        assert " / ".join(ratios) in readme, ratios


H100_RUNS = [ROOT / "bench" / "results" / "h100" / "results.json",
             ROOT / "bench" / "results" / "h100" / "previous" / "20261126T190055Z-3515" / "results.json"]


def test_the_cpu_versus_gpu_figure_pairs_backends_and_tiers_from_the_first_run_that_measured_them(tmp_path):
    from lenet.bench import versus
    docs = [results.load(p) for p in [COMMITTED, *H100_RUNS]]
    latency = {cpu.group: (cpu.name, round(cpu.value), gpu.name, round(gpu.value))
               for cpu, gpu in versus.best(docs, versus.latency_p50)}
    assert latency == {"numba": ("1thread", 98, "per-layer", 648), "keras": ("jax/predict_on_batch", 114,
                       "jax/predict_on_batch", 1028), "torch": ("compile", 151, "compile", 335)}
    tiers = {cpu.group: (cpu.name, gpu.name) for cpu, gpu in versus.best(docs, versus.train_ips, tiers=True)}
    # cupy v3 of the second run, not PyCUDA's faster v3 of the first: never the best of several runs
    assert tiers["raw kernels tier"] == ("numba 1thread", "cupy 2") and tiers["native tier"] == ("cblas threads", "cudnn graph")
    out = tmp_path / "cpu_vs_gpu.png"
    done = subprocess.run([sys.executable, "-m", "lenet.bench.versus", str(out), str(COMMITTED), *map(str, H100_RUNS)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and out.stat().st_size > 10_000, done.stderr
    (tmp_path / "empty.json").write_text("{}")                # valid JSON, not a results document
    for args, said in (([str(out), str(COMMITTED)], "no backend has a measurement on both the CPU and the GPU"),
                       ([str(tmp_path / "x.svg"), str(COMMITTED)], "the figure is a PNG file"),
                       ([str(out), str(tmp_path / "none.json")], "none.json"),
                       ([str(out), str(tmp_path / "empty.json")], "empty.json: $: Results lacks 'meta'")):
        done = subprocess.run([sys.executable, "-m", "lenet.bench.versus", *args], capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 2 and done.stderr.startswith("error: ") and said in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1


def test_labels_cover_no_other_label_or_point():
    # three points in one column, close together, and one to their left whose label would run over them
    points = [(0.5, 0.50), (0.5, 0.51), (0.5, 0.52), (0.35, 0.505)]
    widths = [0.1, 0.1, 0.1, 0.3]
    places = plots.place_labels(points, widths)

    def span(i):
        x, (_, side) = points[i][0], places[i]
        return (x + 0.015, x + 0.015 + widths[i]) if side == "left" else (x - 0.015 - widths[i], x - 0.015)

    for i, (y, _) in enumerate(places):
        x0, x1 = span(i)
        assert 0 <= x0 < x1 <= 1
        for k, (yk, _) in enumerate(places):
            if k != i and not (span(k)[1] <= x0 or x1 <= span(k)[0]):
                assert abs(y - yk) >= 0.045 - 1e-9, (i, k, places)
            if k != i and x0 < points[k][0] < x1:
                assert abs(y - points[k][1]) >= 0.027 - 1e-9, (i, k, places)
    assert places[0] == (0.5, "left")                    # the lowest label stays at its point's height
    assert places[3][1] == "right"                       # no room on the right: left of its point


def test_labels_keep_clear_of_the_floor_lines():
    # a point between two floor lines too close together for a label: its label goes just past one
    lines = (0.09, 0.115)
    (y, side), = plots.place_labels([(0.5, 0.1)], [0.2], lines=lines)
    assert all(abs(y - h) >= 0.045 / 2 - 1e-9 for h in lines) and abs(y - 0.1) < 0.04 and side == "left"
    assert plots.place_labels([(0.5, 0.1)], [0.2]) == [(0.1, "left")]   # without them, at its point's height


def test_progress_estimates_the_time_left():
    order = [(r, c) for r in range(2) for c in range(3)]
    p = progress.Progress(order)
    assert p.left_s() is None and p.status() == "0/6 done, ~? left"
    p.finished(0, 0, 30.0)                                 # the first run: 30 s
    assert p.left_s() == 150.0                             # five more like it
    p.finished(0, 1, 10.0)
    p.finished(0, 2, 20.0)
    assert p.left_s() == 60.0                              # each config's run again
    p.finished(1, 0, 12.0)
    assert p.left_s() == 30.0 and p.status() == "4/6 done, ~30 s left"   # config 0's latest time
    assert [progress.duration(s) for s in (5, 65, 3725)] == ["5 s", "1 min 05 s", "1 h 02 min"]


def test_lenet_version_from_a_source_checkout(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[build-system]\nrequires = []\n\n[project]\nname = "lenet"\n'
                                             'version = "1.2.3"\n\n[tool.x]\nversion = "9"\n')
    assert meta.lenet_version("unknown", tmp_path) == "1.2.3 (source tree)"
    assert meta.lenet_version("0.1.0", tmp_path) == "0.1.0"
    assert meta.lenet_version("unknown", tmp_path / "nowhere") == "unknown"


@pytest.mark.parametrize("file", ["throughput.png", "latency_distribution.png", "latency.png"])
def test_legends_sit_inside_the_figure_and_off_the_axes_and_every_line_looks_different(file):
    import matplotlib.pyplot as plt
    doc = results.load(COMMITTED)   # 22 rows: more lines than any colour map has colours
    (plot,) = [p for p in plots.PLOTS if p.file == file]
    fig = plots.figure(plot, doc)
    try:
        fig.canvas.draw()
        ax, (legend,) = fig.axes[0], fig.legends
        box, axes, page = legend.get_window_extent(), ax.get_window_extent(), fig.bbox
        assert page.y0 <= box.y0 and box.y1 <= axes.y0 and page.x0 <= box.x0 and box.x1 <= page.x1
        styles = [(line.get_color(), line.get_linestyle()) for line in ax.get_lines() if not line.get_label().startswith("_")]
        assert len(set(styles)) == len(styles)
    finally:
        plt.close(fig)
