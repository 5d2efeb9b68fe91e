"""`cgprof diff` of traces whose whole analysis would exceed the memory cap: each one-process
trace is analysed a chunk of steps at a time (cgprof.metrics.chunked), gathering the totals
of the windows the diff shows (cgprof.metrics.windows.WindowTotals), and every view of it is
the whole analysis's view, frame for frame: its steps, kernels per name, launch families,
replays and gap histogram; the text and JSON diffs byte for byte. An HTML page draws events:
it still reads a trace whole."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas.testing as pdt
import pytest
from conftest import cgprof_in_process

import cgprof
from cgprof.diff import RunView, view, window_asker, window_totals
from cgprof.errors import CgprofError
from cgprof.metrics import analyze, chunked

pytestmark = pytest.mark.timeout(300)

REPO = Path(__file__).resolve().parent.parent
TRACES = sorted((REPO / "traces").glob("*.sqlite")) + sorted(
    (REPO.parent / "shared" / "nsys-samples").glob("*.sqlite"))

#: Views as `cgprof diff` takes them: (label, --steps, --mode).
RUNS = [("steady", None, None), ("all", None, "all"), ("some", slice(1, 4), None),
        ("last", slice(-2, None), "all"), ("eager", None, "eager"), ("graph", None, "graph"),
        ("warmup", None, "warmup"), ("none", slice(10**6, None), None)]


def _view(result, run) -> RunView | str:
    try:
        return view(result, *run)
    except CgprofError as exc:
        return str(exc)


def _same(a: RunView | str, b: RunView | str) -> None:
    """Two views of one window, frame for frame (or the same error)."""
    if isinstance(a, str) or isinstance(b, str):
        assert a == b
        return
    assert isinstance(b, RunView)
    pdt.assert_frame_equal(a.steps, b.steps)
    pdt.assert_frame_equal(a.kernels, b.kernels)
    pdt.assert_frame_equal(a.families, b.families)
    pdt.assert_frame_equal(a.replays, b.replays)
    pdt.assert_frame_equal(a.gap_hist, b.gap_hist)
    assert a.headline == b.headline
    assert (a.first, a.stop, a.total_steps, a.left_out, a.hidden_steps) == (
        b.first, b.stop, b.total_steps, b.left_out, b.hidden_steps)


@pytest.fixture(autouse=True)
def _no_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CGPROF_NO_CACHE", "1")


def _chunks_of(path: Path) -> tuple[int, ...]:
    """Steps per chunk to try: 3 and one chunk; a step per chunk too for two traces (each
    chunk is a read: ~0.4 s on these small traces)."""
    one = path.stem in ("mlp_train_graph", "resnet18_infer_graph")
    return (1, 3, 10**6) if one else (3, 10**6)


@pytest.mark.parametrize("path", TRACES, ids=[p.stem for p in TRACES])
def test_chunked_views_are_the_whole_views(path: Path) -> None:
    """Every view of every window, from chunks of 3 steps and from one chunk (and of 1 step,
    for two traces): the whole analysis's; a window that selects no steps raises the same
    error."""
    whole = analyze(cgprof.load(path, cache=False))
    wanted = [_view(whole, run) for run in RUNS]
    taken = 0
    for k in _chunks_of(path):
        result = chunked.analyze_path(path, chunk_steps=k, windows=window_asker(path, RUNS))
        if result is None:
            continue  # not a trace the chunked path takes (analysed whole by the command)
        taken += 1
        assert result.trace is None and len(result.windows) == len(RUNS)
        for run, want in zip(RUNS, wanted, strict=True):
            _same(_view(result, run), want)
    if not taken:
        pytest.skip(f"{path.name}: not a trace the chunked path takes")


def test_the_chunked_path_takes_most_traces() -> None:
    """The test above is not vacuous: the chunked path takes the one-process traces shipped
    with a step range, and their views have kernels, replays and gaps to compare."""
    names = ["mlp_train_graph", "resnet18_train_eager", "transformer_train_graph",
             "mlp_infer_graph"]
    seen = {"kernels": 0, "replays": 0, "gaps": 0}
    for name in names:
        path = REPO / "traces" / f"{name}.sqlite"
        result = chunked.analyze_path(path, chunk_steps=3, windows=window_asker(path, RUNS))
        assert result is not None, name
        v = view(result, *RUNS[1])
        seen["kernels"] += len(v.kernels)
        seen["replays"] += len(v.replays)
        seen["gaps"] += int(v.gap_hist["count"].sum())
    assert all(seen.values()), seen


def test_a_window_not_asked_for_is_one_clear_error() -> None:
    path = REPO / "traces" / "mlp_train_graph.sqlite"
    result = chunked.analyze_path(path, chunk_steps=3, windows=window_asker(path, RUNS[:1]))
    assert result is not None
    view(result, *RUNS[0])
    with pytest.raises(CgprofError, match="analysed in chunks without this window"):
        view(result, "other", slice(0, 2), "all")


def test_gap_histograms_would_catch_a_lost_gap() -> None:
    """The histograms compared are not empty, and one gap less shows: the comparison above
    could fail."""
    path = REPO / "traces" / "resnet18_train_eager.sqlite"
    whole = view(analyze(cgprof.load(path, cache=False)), *RUNS[0])
    result = chunked.analyze_path(path, chunk_steps=3, windows=window_asker(path, RUNS[:1]))
    assert result is not None
    got = view(result, *RUNS[0])
    assert int(got.gap_hist["count"].sum()) > 0
    bad = got.gap_hist.copy()
    i = int(np.flatnonzero(bad["count"].to_numpy())[0])
    bad.loc[i, "count"] -= 1
    with pytest.raises(AssertionError):
        pdt.assert_frame_equal(bad, whole.gap_hist)


def _diff(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    e = dict(os.environ)
    e.pop("CGPROF_NO_CACHE", None)
    e.update(env)
    return subprocess.run([sys.executable, "-m", "cgprof", "diff", *args],
                          capture_output=True, text=True, env=e, timeout=240, cwd=REPO)


def _notes(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if "chunk of steps at a time (" in ln]


@pytest.mark.parametrize("pair", [
    ("mlp_train_eager", "mlp_train_graph", ()),
    ("resnet18_train_graph", "resnet18_train_graph", ("--mode", "warmup,graph")),
    ("transformer_train_eager", "transformer_train_graph", ("--steps", "2:7,1:6")),
], ids=["two-traces", "one-trace-twice", "windows"])
def test_command_diffs_in_chunks_under_the_cap(tmp_path: Path, pair) -> None:
    """The text and JSON diffs under a cap the traces exceed are the whole analyses', first
    and from the cache the first run writes; stderr says each trace was read in chunks."""
    a, b, extra = pair
    ta, tb = (str(REPO / "traces" / f"{n}.sqlite") for n in (a, b))
    env = {"CGPROF_CACHE": str(tmp_path / "cache")}
    whole_json = _diff(ta, tb, *extra, "--json", "-", env=env)
    whole_text = _diff(ta, tb, *extra, env=env)
    assert whole_json.returncode == 0 and whole_text.returncode == 0, whole_json.stderr
    assert not _notes(whole_json.stderr)
    for cached in (False, True):  # (3 steps a chunk)
        cached_env = {**env, "CGPROF_NO_CACHE": None}
        j = cgprof_in_process(["diff", ta, tb, *extra, "--json", "-", "--memory-limit", "100MB"],
                              cached_env, chunk_steps=3)
        t = cgprof_in_process(["diff", ta, tb, *extra, "--memory-limit", "100MB"], cached_env,
                              chunk_steps=3)
        assert j.returncode == 0 and t.returncode == 0, j.stderr + t.stderr
        assert j.stdout == whole_json.stdout, f"cached={cached}"
        assert t.stdout == whole_text.stdout, f"cached={cached}"
        assert len(_notes(j.stderr)) == (1 if a == b else 2), j.stderr
        json.loads(j.stdout)


@pytest.mark.parametrize("case", [
    ("mlp_train_eager", "mlp_train_graph", (), 3),
    ("mlp_train_eager", "mlp_train_graph", ("--max-events", "100"), 1),
    ("resnet18_train_eager", "resnet18_train_graph", ("--max-events", "100"), 2),
    ("resnet18_train_graph", "resnet18_train_graph", ("--mode", "warmup,graph"), 3),
    ("transformer_train_eager", "transformer_train_graph",
     ("--steps", "2:7,1:6", "--max-events", "300"), 2),
    ("mlp_train_graph_graphtrace", "mlp_infer_graph", ("--max-events", "2000"), 4),
], ids=["two-traces", "cut-1-step-chunks", "one-step-over-the-cap", "one-trace-twice",
        "windows", "graph-level"])
def test_html_page_in_chunks_is_the_whole_ones(tmp_path: Path, case) -> None:
    """-o under a cap the traces exceed reads them a chunk of steps at a time and draws the
    same page, byte for byte, as the whole analyses do: the timelines' events counted per
    step from the chunks and the gap sweep, the span each timeline draws read alone
    (cgprof.metrics.windows.TimelineCut, figures.timeline_cut), first and from the cache;
    with windows that fit, that --max-events cuts, and one whose first step alone holds
    more events than the cap (ResNet-18: ~1000 events a step)."""
    a, b, extra, chunk = case
    ta, tb = (str(REPO / "traces" / f"{n}.sqlite") for n in (a, b))
    env = {"CGPROF_CACHE": str(tmp_path / "cache")}
    whole = tmp_path / "whole.html"
    r = _diff(ta, tb, *extra, "-o", str(whole), env=env)
    assert r.returncode == 0 and not _notes(r.stderr), r.stderr
    for cached in (False, True):
        out = tmp_path / f"chunked-{cached}.html"
        r = cgprof_in_process(["diff", ta, tb, *extra, "-o", str(out), "--memory-limit", "100MB"],
                              {**env, "CGPROF_NO_CACHE": None}, chunk_steps=chunk)
        assert r.returncode == 0, r.stderr
        assert len(_notes(r.stderr)) == (1 if a == b else 2), r.stderr
        assert "read whole" not in r.stderr
        assert out.read_bytes() == whole.read_bytes(), f"cached={cached}"


def test_a_timeline_cut_is_the_whole_ones(traces_dir: Path) -> None:
    """What a chunked analysis gathers for a view's timeline is what timeline_apart keeps
    of the whole analysis: the counts per step (other events, each thread's calls), the
    cut's tables and gaps; and a count off by one is caught."""
    from cgprof.report import figures as F

    path = traces_dir / "resnet18_train_graph.sqlite"
    run = ("r", None, None)
    whole = F.timeline_apart(view(analyze(cgprof.load(path)), *run), 500)
    got = chunked.analyze_path(path, chunk_steps=2, windows=window_asker(path, [run]),
                               timelines=500)
    assert got is not None
    v = view(got, *run)
    cut = window_totals(got, "r", v.steps["step"].to_numpy(np.int64)).timeline
    mine = F.timeline_cut(v, cut)
    assert mine is not None
    a, b = whole.timeline, mine.timeline
    for field in ("other", "threads", "per_thread"):
        np.testing.assert_array_equal(getattr(a.counts, field), getattr(b.counts, field))
    for name in ("kernels", "runtime", "memcpy", "memset", "graph_trace", "nvtx"):
        x, y = a.trace.stored(name) if name in ("kernels", "runtime") else getattr(
            a.trace, name), (b.trace.stored(name) if name in ("kernels", "runtime")
                             else getattr(b.trace, name))
        assert len(x) == len(y), name
        np.testing.assert_array_equal(x["start_ns"].to_numpy(np.int64),
                                      y["start_ns"].to_numpy(np.int64))
    cols = ["device_id", "start_ns", "end_ns", "gap_ns"]
    pdt.assert_frame_equal(a.gaps[cols].astype("int64").reset_index(drop=True),
                           b.gaps[cols].astype("int64").reset_index(drop=True))
    assert list(a.gaps["kind"].astype(str)) == list(b.gaps["kind"].astype(str))
    assert list(a.gaps["next_api"].astype(str)) == list(b.gaps["next_api"].astype(str))
    bad = b.counts.other.copy()
    bad[-1] += 1
    with pytest.raises(AssertionError):
        np.testing.assert_array_equal(a.counts.other, bad)


@pytest.mark.parametrize("case", [
    ("mlp_train_graph", (), 3),
    ("resnet18_train_eager", ("--max-events", "100"), 1),
    ("user_train", ("--steps", "2:5"), 2),
], ids=["graphed", "one-step-over-the-cap", "window"])
def test_analyze_html_in_chunks_is_the_whole_ones(tmp_path: Path, case) -> None:
    """`analyze --html` under a cap the trace exceeds reads it a chunk of steps at a time
    (the page's views' totals and timeline gathered: html.single_page_runs) and writes the
    same page and the same text as the whole analysis, first and from the cache."""
    name, extra, chunk = case
    trace = str(REPO / "traces" / f"{name}.sqlite")
    env = {"CGPROF_CACHE": str(tmp_path / "cache")}

    def run(out: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
        e = dict(os.environ)
        e.pop("CGPROF_NO_CACHE", None)
        e.update(env)
        return subprocess.run([sys.executable, "-m", "cgprof", "analyze", trace, *extra,
                               "--html", str(out), "--quiet"], capture_output=True,
                              text=True, env=e, timeout=240, cwd=REPO)

    whole = run(tmp_path / "whole.html", env=env)
    assert whole.returncode == 0 and not _notes(whole.stderr), whole.stderr
    for cached in (False, True):
        out = tmp_path / f"chunked-{cached}.html"
        r = cgprof_in_process(["analyze", trace, *extra, "--html", str(out), "--quiet",
                               "--memory-limit", "100MB"], {**env, "CGPROF_NO_CACHE": None},
                              chunk_steps=chunk)
        assert r.returncode == 0 and len(_notes(r.stderr)) == 1, r.stderr
        assert out.read_bytes() == (tmp_path / "whole.html").read_bytes(), f"cached={cached}"
        assert r.stdout.replace(str(out), "PAGE") == whole.stdout.replace(
            str(tmp_path / "whole.html"), "PAGE")
