"""Figure specs of cgprof.report.figures: trace names, axes, event counts, caps and the note."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import plotly.graph_objects as go
import pytest

import cgprof
from cgprof.diff import view
from cgprof.report import figures as F

TRACES = Path(__file__).resolve().parents[1] / "traces"


@pytest.fixture(scope="module")
def d(node):
    return cgprof.diff(node, node, labels=("eager", "graph"), modes=("eager", "graph"))


@pytest.fixture(scope="module")
def figs(d):
    return F.diff_figures(d)


def _counts(fig: go.Figure) -> dict[str, int]:
    return {t.name: len(t.x) for t in fig.data}


def test_diff_figure_ids(figs):
    assert list(figs) == ["cgprof-timeline-0", "cgprof-timeline-1", "cgprof-steps",
                          "cgprof-gaps", "cgprof-families", "cgprof-compactness"]
    assert all(isinstance(f, go.Figure) for f in figs.values())


def test_timeline_event_counts(figs):
    eager, graphed = figs["cgprof-timeline-0"], figs["cgprof-timeline-1"]
    assert _counts(eager) == {"step": 20, "NVTX range": 21, "kernel launch call": 320,
                              "other API call": 162, "kernel": 320, "idle gap": 321}
    assert _counts(graphed) == {"step": 20, "NVTX range": 21, "graph launch call": 20,
                                "sync call": 1, "other API call": 20,
                                "kernel in graph replay": 320, "idle gap": 320}


def test_timeline_is_bars_not_shapes(figs):
    for fid in F.TIMELINE_IDS:
        fig = figs[fid]
        assert len(fig.layout.shapes) == 0
        assert {t.type for t in fig.data} == {"bar"}
        assert {t.orientation for t in fig.data} == {"h"}
        assert fig.layout.barmode == "overlay"
        assert set(t.name for t in fig.data) <= set(F.EVENT_COLORS)
        for t in fig.data:
            assert t.marker.color == F.EVENT_COLORS[t.name]
            assert len(t.base) == len(t.x) == len(t.y) == len(t.hovertext)


def test_timeline_rows_and_axes(figs):
    rows = ("steps", "NVTX 1", "NVTX 2", "CPU python3 1010", "GPU 0 stream 7", "GPU 0 idle")
    for fid in F.TIMELINE_IDS:
        lay = figs[fid].layout
        assert lay.yaxis.categoryarray == rows
        assert lay.yaxis.autorange == "reversed"
        assert lay.yaxis.fixedrange is True
        assert lay.xaxis.title.text == "us since the start of this run's first window step"
    # Both runs open on the same width (same scale), starting at their first step.
    r0 = figs["cgprof-timeline-0"].layout.xaxis.range
    r1 = figs["cgprof-timeline-1"].layout.xaxis.range
    assert r0 == r1
    assert r0[0] < 0 < r0[1]


def test_timeline_times_in_us_from_first_step(figs, d):
    steps = next(t for t in figs["cgprof-timeline-0"].data if t.name == "step")
    st = d.baseline.steps
    assert list(steps.base) == list(np.round((st["start_ns"] - st["start_ns"][0]) / 1000, 3))
    assert list(steps.x) == list(np.round(st["dur_ns"] / 1000, 3))
    assert steps.base[0] == 0.0
    assert list(steps.text) == [str(i) for i in range(20)]
    gsteps = next(t for t in figs["cgprof-timeline-1"].data if t.name == "step")
    assert list(gsteps.text) == [str(i) for i in range(20, 40)]


def test_hover_text_is_escaped(figs):
    kern = next(t for t in figs["cgprof-timeline-0"].data if t.name == "kernel")
    text = "".join(kern.hovertext)
    assert "&lt;" in text and "<cutlass" not in text and "Kernel2&lt;cutlass" in text
    assert all(h.count("<br>") == 1 for h in kern.hovertext)
    assert "%{hovertext}" in kern.hovertemplate and "%{base:.3f} us" in kern.hovertemplate


def test_draw_window_cap_and_note(d):
    w = F.draw_window(d.views)
    assert (w.first, w.stop, w.total, w.truncated, w.complete) == (0, 20, 20, False, True)
    assert w.drawn == w.available == [1164, 722]
    assert w.note(d.views) == ("Timeline: every step of the window drawn: eager steps 0-19 "
                               "(1,164 of 1,164 events); graph steps 20-39 (722 of 722 events).")
    w = F.draw_window(d.views, max_events=500)
    assert (w.first, w.stop, w.truncated, w.complete) == (0, 8, False, False)
    assert all(n <= 500 for n in w.drawn)
    assert w.note(d.views) == (
        "Timeline: window positions 0-7 of 20 drawn (eager steps 0-7 (468 of 1,164 events); "
        "graph steps 20-27 (315 of 722 events)); at most 500 events per run are drawn to keep "
        "the page responsive. The tables and charts below cover every step of the window. "
        "Choose other steps with --steps A:B (window positions, B exclusive) or raise "
        "--max-events.")
    fig = F.timeline(d.baseline, w)
    assert sum(len(t.x) for t in fig.data) == w.drawn[0] == 468
    st = d.baseline.steps
    assert max(float(np.max(t.base)) for t in fig.data) < (
        st["extent_end_ns"][:8].max() - st["start_ns"][0]) / 1000


def test_draw_window_one_step_over_cap_is_cut(d):
    w = F.draw_window(d.views, max_events=30)
    assert (w.stop, w.truncated) == (1, True)
    assert w.drawn == [30, 30]
    assert "one step alone exceeds that, so it is cut at the cap" in w.note(d.views)
    fig = F.timeline(d.baseline, w)
    assert sum(len(t.x) for t in fig.data) == 30


def test_capped_timeline_stays_in_drawn_steps(node):
    v = view(node, "run")
    w = F.draw_window([v], max_events=300)
    fig = F.timeline(v, w)
    end_us = (v.steps["extent_end_ns"][: w.stop].max() - v.start_ns) / 1000
    assert sum(len(t.x) for t in fig.data) == w.drawn[0] <= 300
    assert max(float(np.max(t.base)) for t in fig.data) < end_us


def test_graph_granularity_timeline_has_replay_bars(graph):
    v = view(graph, "graph", mode="graph")
    fig = F.timeline(v)
    c = _counts(fig)
    assert c["graph replay"] == 20
    assert "kernel in graph replay" not in c
    assert c["graph launch call"] == 20


def test_step_times(figs, d):
    fig = figs["cgprof-steps"]
    assert [t.name for t in fig.data] == ["eager", "graph"]
    assert list(fig.data[0].y) == list(np.round(d.baseline.steps["effective_ns"] / 1000, 3))
    assert list(fig.data[1].x) == list(range(20))
    assert fig.data[0].line.color == F.RUN_COLORS[0]
    assert fig.data[1].line.color == F.RUN_COLORS[1]
    assert fig.layout.yaxis.title.text == "us"


def test_gap_histogram(figs, d):
    fig = figs["cgprof-gaps"]
    assert fig.layout.xaxis.type == "log"
    assert fig.layout.xaxis.title.text == "gap length, us (log scale)"
    for t, v in zip(fig.data, d.views, strict=True):
        assert t.line.shape == "hv"
        assert sum(t.y[:-1]) == int(v.gap_hist["count"].sum())
        assert t.x[0] == 0.01 and t.x[-1] == 1e6
    assert sum(fig.data[0].y[:-1]) == 320
    assert sum(fig.data[1].y[:-1]) == 319


def test_launch_families(figs):
    fig = figs["cgprof-families"]
    assert fig.layout.barmode == "group"
    assert list(fig.data[0].x) == ["kernel_launch", "graph_launch", "other"]
    assert list(fig.data[0].y) == [16.0, 0.0, 8.1]
    assert list(fig.data[1].y) == [0.0, 1.0, 1.0]


def test_replay_compactness(figs, node):
    fig = figs["cgprof-compactness"]
    assert [t.name for t in fig.data] == ["graph"]
    comp = node.replays.replays["compactness"].astype(float).round(4)
    assert list(fig.data[0].y) == list(comp)
    assert [a.text for a in fig.layout.annotations] == ["eager: no graph replays in its window"]
    assert list(fig.layout.yaxis.range) == [0, 1.05]


def test_compactness_graph_granularity_note(graph):
    fig = F.replay_compactness([view(graph, "g", mode="graph")])
    assert len(fig.data) == 0
    assert [a.text for a in fig.layout.annotations] == [
        "g: 20 replays, inside not visible (graph-granularity trace; record with "
        "--cuda-graph-trace=node)"]


def test_single_figures(node):
    figs = F.single_figures(view(node, "mlp8_node"))
    assert list(figs) == ["cgprof-timeline-0", "cgprof-steps", "cgprof-gaps",
                          "cgprof-families", "cgprof-compactness"]
    tl = figs["cgprof-timeline-0"]
    c = _counts(tl)
    assert (c["kernel"], c["kernel in graph replay"]) == (320, 320)
    assert (c["kernel launch call"], c["graph launch call"]) == (320, 20)


def test_labels_are_escaped(node):
    v = view(node, "<b>x</b>", steps=slice(0, 2))
    fig = F.timeline(v)
    assert fig.layout.title.text.startswith("<b>&lt;b&gt;x&lt;/b&gt;</b>: ")
    assert F.step_times([v]).data[0].name == "&lt;b&gt;x&lt;/b&gt;"


def test_step_marks(d):
    w = F.draw_window(d.views)
    marks = F.step_marks(d.candidate, w)
    assert len(marks) == 20
    assert marks[0] == {"i": 0, "step": 20, "x0": 0.0,
                        "x1": marks[0]["x1"]}
    assert all(a["x0"] < b["x0"] for a, b in zip(marks, marks[1:], strict=False))
    assert all(m["x1"] > m["x0"] for m in marks)


def test_unequal_windows_draw_the_shorter_length(node):
    d = cgprof.diff(node, node, steps=(slice(0, 5), slice(20, 23)))
    w = F.draw_window(d.views)
    assert (w.stop, w.total, w.lengths, w.complete) == (3, 3, [5, 3], False)
    assert w.note(d.views).startswith(
        "Timeline: window positions 0-2 drawn, as many as the shorter window has (baseline "
        "steps 0-2 (")
    assert w.note(d.views).endswith("give the runs windows of one length with --steps A:B,C:D.")


def test_warmup_outlier_opens_after_it(node):
    v = view(node, "run", mode="eager")
    assert F.leading_outliers(v) == 0
    st = v.steps.copy()
    st.loc[0, "effective_ns"] = 50 * int(st["effective_ns"].median())
    v.steps = st
    assert F.leading_outliers(v) == 1
    w = F.draw_window([v])
    assert F.initial_step([v], w) == 1
    fig = F.timeline(v, w, start_pos=1)
    x0 = (st["start_ns"][1] - st["start_ns"][0]) / 1000
    assert fig.layout.xaxis.range[0] < x0 < fig.layout.xaxis.range[1]
    assert F.step_times([v]).layout.yaxis.type == "log"
