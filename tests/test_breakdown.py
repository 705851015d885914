"""Where the time goes (--mode layers, lenet.bench.breakdown): one run's profiled layer times, their
merge over runs, the overhead, the table and the plot. No timing assertions."""
import json
from dataclasses import replace
from pathlib import Path
import subprocess
import sys

import numpy as np
import pytest

import lenet
import lenet.backends.keras
import lenet.layers
from lenet.bench import breakdown, markdown, plots, stats
from lenet.bench.results import Floors, Latency, Layers, Meta, Results, Row, Split
from lenet.model import LAYERS
from test_bench import validate

GROUPED = {"conv1+pool1": [10.0, 12.0], "conv2+pool2": [20.0, 20.0], "fc1": [5.0, 5.0], "fc2": [1.0, 1.0]}


def run(layers=None, latency=None, host=None, method="m") -> Row:
    """One worker run's row, as the worker writes it."""
    row = Row("cblas", "cpu", "threads", "ok", latency=latency and Latency(stats.summary(latency, keep_samples=True)),
              layers=Layers(seconds=0.5))
    if layers is None:
        row.layers.reason = "no per-layer instrumentation for x on cpu"
    else:
        row.layers.samples_us, row.layers.method = layers, method
        row.layers.host_us = host and stats.summary(host, keep_samples=True)
    return row


def merged(*runs: Row) -> Row:
    return breakdown.merge(runs[0], list(runs))


def test_runs_are_pooled_and_the_latency_mode_is_preferred():
    got = merged(run(GROUPED, latency=[50.0, 60.0], host=[999.0]), run(GROUPED, latency=[70.0]))
    lay = got.layers
    assert lay.us == {"conv1+pool1": 10.0, "conv2+pool2": 20.0, "fc1": 5.0, "fc2": 1.0}
    assert (lay.overhead_from, lay.overhead_host_us, lay.overhead_us) == ("latency", 60.0, 24.0)
    assert lay.overhead_warning is None and lay.detail_us["fc1"].n == 4 and lay.seconds == 1.0
    assert lay.samples_us is None and lay.host_us is None          # per-run fields are not kept
    doc = Results(Meta(modes=["layers"]), Floors(), [got])
    assert ("| cblas (threads) | 60 | 10 → conv1+pool1 | ↑ | 20 → conv2+pool2 | ↑ | 5 | 1 | 36 | 24 | 40% | m |"
            in markdown.layers_table(doc))


def test_a_negative_overhead_is_a_warning_and_missing_times_a_reason():
    layers = {name: [30.0] for name in LAYERS}
    got = merged(run(layers, host=[100.0]))
    assert (got.layers.overhead_from, got.layers.overhead_us) == ("layers", -80.0)
    assert got.layers.overhead_warning.startswith("the layers' p50s add up to 180 µs, more than the host→host p50 100 µs")
    assert plots.segments(got)[-1] == ("overhead", 0.0)
    table = markdown.layers_table(Results(Meta(modes=["layers"]), Floors(), [got, merged(run())]))
    assert any("-80 ⚠" in line for line in table)
    assert "- cblas/cpu [threads]: no per-layer instrumentation for x on cpu" in table
    none = merged(run())
    assert none.layers.us is None and none.layers.reason == "no per-layer instrumentation for x on cpu"
    mixed = merged(run(layers, host=[100.0]), run({"+".join(LAYERS): [1.0]}, host=[100.0]))
    assert mixed.layers.us is None and mixed.layers.reason.startswith("runs reported different layer groups")


def test_hand_offs_are_pooled_with_each_runs_p50_and_listed_under_the_table():
    near, far, none = run(GROUPED, latency=[50.0]), run(GROUPED, latency=[60.0]), run(GROUPED, latency=[55.0])
    near.layers.handoff_samples_us, far.layers.handoff_samples_us = [0.2, 0.21, 0.19], [0.6, 0.66, 0.62]
    near.layers.row_splits, far.layers.row_splits = 0, 1     # of each run's two forwards, split by rows
    near.layers.cuts, far.layers.cuts = [[10, 25, 250]], [[10, 30, 300]]
    got = merged(near, far, none).layers
    assert got.row_split_share == 0.25 and got.row_splits is None
    assert got.cuts == [[10, 25, 250], [10, 30, 300]]
    assert (got.handoff_us.n, got.handoff_us.p50, got.handoff_us.max) == (6, 0.21, 0.66)
    assert [r.p50 for r in got.handoff_us.runs] == [0.2, 0.62]    # the run that recorded none has no entry
    assert got.handoff_samples_us is None                         # per-run samples are not kept
    one_thread = replace(merged(run(GROUPED)), variant="1thread")
    assert one_thread.layers.handoff_us is None

    def table(*rows):
        return markdown.layers_table(Results(Meta(modes=["layers"]), Floors(), list(rows)))
    lines = table(one_thread, replace(one_thread, variant="threads", layers=got))
    assert ("- cblas (threads): 0.21 µs (p90 0.66; per run 0.2 / 0.62; 6 hand-offs; split by rows in 25% of "
            "the forwards; cuts per run 10/25/250 · 10/30/300)") in lines
    assert "- cblas (threads): 0.21 µs (p90 0.66; per run 0.2 / 0.62; 6 hand-offs)" in table(
        replace(one_thread, variant="threads", layers=replace(got, row_split_share=0.0, cuts=None)))
    assert "6 hand-offs; split by rows in under 1% of the forwards; cuts per run" in "".join(table(
        replace(one_thread, variant="threads", layers=replace(got, row_split_share=0.001))))
    assert sum(line.startswith("- cblas") for line in lines) == 1    # a row without hand-offs: no line
    assert not any("Hand-offs" in line for line in table(one_thread))


def test_no_layers_mode_no_table():
    assert markdown.layers_table(Results(Meta(modes=["latency"]), Floors(), [merged(run(latency=[5.0]))])) == []


class Broken(lenet.Net):
    backend, layers_method = "broken", "wrong"

    def predict(self, x):
        return np.zeros((len(x), 10), np.float32)

    def layer_times_us(self, x, repeats):
        return {"pool1": [1.0] * repeats, "conv1": [1.0] * repeats}


class Untimed(Broken):
    def layer_times_us(self, x, repeats):
        raise lenet.UnavailableError("never timed here")


class Unstacked(Broken):
    def layer_times_us(self, x, repeats):           # a profile that missed a layer in one forward
        return lenet.layers.stack([{"conv1": 1.0}, {}])


class Uninstrumented(Broken):
    layer_times_us = lenet.Net.layer_times_us


@pytest.mark.parametrize("net, reason", [
    (Broken(), "invalid layer times: expected conv1+pool1+conv2+pool2+fc1+fc2 in order, each once (got pool1+conv1)"),
    (Untimed(), "never timed here"),
    (Unstacked(), "invalid layer times: layer times ['conv1']: expected conv1+pool1+conv2+pool2+fc1+fc2 in order, "
                  "each once (got conv1)"),
    (Uninstrumented(), "no per-layer instrumentation for broken on cpu"),
])
def test_layer_times_that_break_the_rules_are_a_reason_not_a_crash(dataset, net, reason):
    assert breakdown.layer_times(net, dataset.test_x, 3, lambda one: one()) == Layers(reason=reason)


def test_layers_mode_alone_end_to_end(tmp_path):
    """--mode layers alone: per-layer p50s, the overhead from its own host→host run, the table, the plot."""
    done = subprocess.run([sys.executable, "-m", "lenet.bench", "--backend", "numpy", "--device", "cpu", "--quick",
                           "--mode", "layers", "--out", str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    doc = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
    validate(doc)
    (row,) = doc["results"]
    lay = row["layers"]
    assert list(lay["us"]) == list(LAYERS) and lay["method"] and row["latency"] is None
    assert lay["overhead_from"] == "layers"
    assert lay["overhead_us"] == pytest.approx(lay["overhead_host_us"] - sum(lay["us"].values()))
    assert "| numpy (float32) |" in (tmp_path / "results.md").read_text(encoding="utf-8").split("Where the time goes")[1]
    assert (tmp_path / "layers.png").stat().st_size > 1000


def test_keras_time_is_split_by_the_tensorflow_eager_row():
    layers = {name: [10.0] for name in LAYERS}                          # Σ layers: 60 µs
    keras = replace(merged(run(layers, latency=[1000.0])), backend="keras", variant="tensorflow/call")
    eager = replace(merged(run({name: [5.0] for name in LAYERS}, latency=[330.0])), backend="tensorflow",
                    variant="eager")                                     # dispatch: 330 - 30 = 300 µs
    split = Split(**lenet.backends.keras.SPLITS[0])                      # as the run's plan keeps it
    doc = Results(Meta(modes=["latency", "layers"]), Floors(), [keras, eager], [split])
    assert markdown.split_text(doc, split).startswith(
        "**Where Keras's time goes**: of Keras-on-TensorFlow's 1,000 µs for one image (`model(x)`, p50), "
        "640 µs (64%) is Keras, 300 µs (30%) TensorFlow's eager dispatch and 60 µs (6%) arithmetic.")
    assert markdown.split_text(Results(Meta(), Floors(), [keras]), split) is None
    assert "**Where Keras's time goes**" in "\n".join(markdown.layers_table(doc))


def test_a_row_of_an_earlier_run_with_flat_layer_fields_loads_into_one_layers_record():
    from lenet.bench.typed import from_json
    flat = {"backend": "numpy", "device": "cpu", "variant": "float32", "status": "ok", "layers_us": {"conv1": 3.0},
            "layers_method": "a clock", "overhead_us": 1.0, "overhead_from": "latency", "layers_reason": None}
    row = from_json(Row, flat)
    assert row.layers == Layers(method="a clock", us={"conv1": 3.0}, overhead_us=1.0, overhead_from="latency")
    assert from_json(Row, {**flat, "layers_us": None, "layers_method": None, "overhead_us": None,
                           "overhead_from": None}).layers is None


@pytest.mark.parametrize("rows", [1, 22])
def test_the_layers_legend_sits_just_below_the_axis_label_at_any_height(rows):
    import matplotlib.pyplot as plt
    from lenet.bench import results

    doc = results.load(Path(__file__).parent.parent / "bench" / "results" / "cpu-2core" / "results.json")
    doc = replace(doc, results=plots.layered_rows(doc)[:rows])
    assert len(plots.layered_rows(doc)) == rows
    (plot,) = [p for p in plots.PLOTS if p.file == "layers.png"]
    fig = plots.figure(plot, doc)
    try:
        fig.canvas.draw()
        ax, (legend,) = fig.axes[0], fig.legends
        box, label = legend.get_window_extent(), ax.xaxis.label.get_window_extent()
        assert fig.bbox.y0 <= box.y0 and box.y1 <= label.y0 and label.y0 - box.y1 < 0.25 * fig.dpi   # no gap
        assert [t.get_text() for t in legend.get_texts()] == [*plots.SEGMENT_COLORS,
                                                              "fused group (its first layer's colour)"]
    finally:
        plt.close(fig)
