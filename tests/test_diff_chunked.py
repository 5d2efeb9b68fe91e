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

import cgprof
from cgprof.diff import RunView, view, window_asker
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
    capped = dict(env, CGPROF_CHUNK_STEPS="3")
    for cached in (False, True):
        j = _diff(ta, tb, *extra, "--json", "-", "--memory-limit", "100MB", env=capped)
        t = _diff(ta, tb, *extra, "--memory-limit", "100MB", env=capped)
        assert j.returncode == 0 and t.returncode == 0, j.stderr + t.stderr
        assert j.stdout == whole_json.stdout, f"cached={cached}"
        assert t.stdout == whole_text.stdout, f"cached={cached}"
        assert len(_notes(j.stderr)) == (1 if a == b else 2), j.stderr
        json.loads(j.stdout)


def test_html_page_still_reads_whole(tmp_path: Path) -> None:
    """-o draws each run's events: the traces are read whole under the cap (no chunk note),
    and the page is written."""
    ta, tb = (str(REPO / "traces" / f"mlp_train_{m}.sqlite") for m in ("eager", "graph"))
    env = {"CGPROF_CACHE": str(tmp_path / "cache"), "CGPROF_CHUNK_STEPS": "3"}
    out = tmp_path / "d.html"
    r = _diff(ta, tb, "-o", str(out), "--memory-limit", "100MB", env=env)
    assert r.returncode == 0, r.stderr
    assert not _notes(r.stderr) and out.stat().st_size > 10_000
    whole = [ln for ln in r.stderr.splitlines() if "read whole for the HTML page" in ln]
    assert len(whole) == 2 and "without -o" in whole[0], r.stderr
