"""`cgprof diff` of traces whose whole analysis would exceed the memory cap: each one-process
trace is analysed a chunk of steps at a time (cgprof.metrics.chunked), gathering the totals
of the windows the diff shows (cgprof.metrics.windows.WindowTotals), and every view of it is
the whole analysis's view, frame for frame: its steps, kernels per name, launch families,
replays and gap histogram; the text and JSON diffs byte for byte. An HTML page draws events:
it still reads a trace whole."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pandas.testing as pdt
import pytest
from conftest import cgprof_in_process

import cgprof
from cgprof.diff import view, window_asker, window_totals
from cgprof.errors import CgprofError
from cgprof.metrics import analyze, chunked

pytestmark = pytest.mark.timeout(300)

REPO = Path(__file__).resolve().parent.parent
#: Views as `cgprof diff` takes them: (label, --steps, --mode).
RUNS = [("steady", None, None), ("all", None, "all"), ("some", slice(1, 4), None),
        ("last", slice(-2, None), "all"), ("eager", None, "eager"), ("graph", None, "graph"),
        ("warmup", None, "warmup"), ("none", slice(10**6, None), None)]


@pytest.fixture(autouse=True)
def _no_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CGPROF_NO_CACHE", "1")


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
    return cgprof_in_process(["diff", *args], {**env, "CGPROF_NO_CACHE": None})


def _notes(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if "chunk of steps at a time (" in ln]


@pytest.mark.parametrize("pair", [
    ("mlp_train_eager", "mlp_train_graph", ()),
    ("resnet18_train_graph", "resnet18_train_graph", ("--mode", "warmup,graph")),
    ("transformer_train_eager", "transformer_train_graph", ("--steps", "2:7,1:6")),
], ids=["two-traces", "one-trace-twice", "windows"])
def test_command_diffs_in_chunks_under_the_cap(tmp_path: Path, pair) -> None:
    """The text and JSON diffs under a cap the traces exceed are the whole analyses' (read in
    chunks from the cache entries the whole runs wrote); stderr says each trace was read in
    chunks."""
    a, b, extra = pair
    ta, tb = (str(REPO / "traces" / f"{n}.sqlite") for n in (a, b))
    env = {"CGPROF_CACHE": str(tmp_path / "cache")}
    whole_json = _diff(ta, tb, *extra, "--json", "-", env=env)
    whole_text = _diff(ta, tb, *extra, env=env)
    assert whole_json.returncode == 0 and whole_text.returncode == 0, whole_json.stderr
    assert not _notes(whole_json.stderr)
    for args, want in ((["--json", "-"], whole_json), ([], whole_text)):  # (3 steps a chunk)
        r = cgprof_in_process(["diff", ta, tb, *extra, *args, "--memory-limit", "100MB"],
                              {**env, "CGPROF_NO_CACHE": None}, chunk_steps=3)
        assert r.returncode == 0, r.stderr
        assert r.stdout == want.stdout, args
        assert len(_notes(r.stderr)) == (1 if a == b else 2), r.stderr
    json.loads(whole_json.stdout)


@pytest.mark.parametrize("case", [
    ("mlp_train_eager", "mlp_train_graph", (), 3),
    ("resnet18_train_eager", "resnet18_train_graph", ("--max-events", "100"), 2),
    ("resnet18_train_graph", "resnet18_train_graph", ("--mode", "warmup,graph"), 3),
    ("transformer_train_eager", "transformer_train_graph",
     ("--steps", "2:7,1:6", "--max-events", "300"), 2),
    ("mlp_train_graph_graphtrace", "mlp_infer_graph", ("--max-events", "2000"), 4),
], ids=["two-traces", "one-step-over-the-cap", "one-trace-twice",
        "windows", "graph-level"])
def test_html_page_in_chunks_is_the_whole_ones(tmp_path: Path, case) -> None:
    """-o under a cap the traces exceed reads them a chunk of steps at a time and draws the
    same page, byte for byte, as the whole analyses do: the timelines' events counted per
    step from the chunks and the gap sweep, the span each timeline draws read alone
    (cgprof.metrics.windows.TimelineCut, figures.timeline_cut), from the cache entries
    the whole runs wrote;
    with windows that fit, that --max-events cuts, and one whose first step alone holds
    more events than the cap (ResNet-18: ~1000 events a step)."""
    a, b, extra, chunk = case
    ta, tb = (str(REPO / "traces" / f"{n}.sqlite") for n in (a, b))
    env = {"CGPROF_CACHE": str(tmp_path / "cache")}
    whole = tmp_path / "whole.html"
    r = _diff(ta, tb, *extra, "-o", str(whole), env=env)
    assert r.returncode == 0 and not _notes(r.stderr), r.stderr
    out = tmp_path / "chunked.html"
    r = cgprof_in_process(["diff", ta, tb, *extra, "-o", str(out), "--memory-limit", "100MB"],
                          {**env, "CGPROF_NO_CACHE": None}, chunk_steps=chunk)
    assert r.returncode == 0, r.stderr
    assert len(_notes(r.stderr)) == (1 if a == b else 2), r.stderr
    assert "read whole" not in r.stderr
    assert out.read_bytes() == whole.read_bytes()


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
    same page and the same text as the whole analysis (read in chunks from the cache entry
    the whole run wrote)."""
    name, extra, chunk = case
    trace = str(REPO / "traces" / f"{name}.sqlite")
    env = {"CGPROF_CACHE": str(tmp_path / "cache")}
    whole = cgprof_in_process(["analyze", trace, *extra, "--html", str(tmp_path / "whole.html"),
                               "--quiet"], {**env, "CGPROF_NO_CACHE": None})
    assert whole.returncode == 0 and not _notes(whole.stderr), whole.stderr
    out = tmp_path / "chunked.html"
    r = cgprof_in_process(["analyze", trace, *extra, "--html", str(out), "--quiet",
                           "--memory-limit", "100MB"], {**env, "CGPROF_NO_CACHE": None},
                          chunk_steps=chunk)
    assert r.returncode == 0 and len(_notes(r.stderr)) == 1, r.stderr
    assert out.read_bytes() == (tmp_path / "whole.html").read_bytes()
    assert r.stdout.replace(str(out), "PAGE") == whole.stdout.replace(
        str(tmp_path / "whole.html"), "PAGE")
