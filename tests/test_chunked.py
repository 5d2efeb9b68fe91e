"""A one-process trace analysed a chunk of steps at a time (cgprof.metrics.chunked): the
result is the whole analysis's, as the reports and `cgprof diff`'s views read it.

Every shipped trace the chunked path takes (eager, graphed, warm-up and capture steps, a
graph-level trace, a scored step choice) and the real nsys samples are analysed whole and in
chunks (one chunk, a few steps, and for some one step: conftest.CHUNK_STEPS), read from
SQLite (DuckDB), from its cache entry, and from nsys's parquetdir and arrowdir exports; the
JSON document (``result_to_dict``) and the text report must be the same bytes, every view
of every window the same frames. The commands take the path when the memory cap is below the
whole analysis's estimate, say so on stderr, and print the same stdout.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pandas.testing as pdt
import pytest
from conftest import CHUNK_STEPS, cgprof_in_process

import cgprof
from cgprof.diff import RunView, view, window_asker
from cgprof.errors import CgprofError
from cgprof.metrics import analyze
from cgprof.metrics.chunked import GAP_LIMIT, analyze_path, chunk_rows
from cgprof.report import json_report, text

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO.parent / "shared" / "nsys-samples"
TRACES = sorted(REPO.glob("traces/*.sqlite"))
#: Traces the chunked path does not take: steps that overlap in time (torch.compile's
#: scored choices) and several processes (DDP: read rank by rank instead; torch.compile's
#: compile workers, a second process that calls CUDA).
NOT_TAKEN = {"compile_train_model.sqlite", "compile_train_step.sqlite",
             "ddp_mlp_train_eager.sqlite", "ddp_mlp_train_graph.sqlite",
             "plain_train_compile.sqlite", "plain_infer_compile.sqlite"}
TAKEN = [p for p in TRACES if p.name not in NOT_TAKEN]
SHARED = sorted(SAMPLES.glob("*.sqlite"))  # (none where the samples are not found)
COLUMNAR = [REPO / "traces" / "columnar" / n for n in (
    "mlp_infer_eager.parquetdir", "mlp_infer_graph.parquetdir", "mlp_infer_graph.arrowdir")]

pytestmark = pytest.mark.timeout(300)


def _reports(result) -> tuple[str, str]:
    return (json.dumps(json_report.result_to_dict(result), sort_keys=True),
            text.render(result))


def _whole(path: Path, **kw) -> tuple[str, str]:
    result = analyze(cgprof.load(path, cache=False), **kw)
    return _reports(result.light(json_report.GAP_LIST_LIMIT))


def _no_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CGPROF_NO_CACHE", "1")


#: Traces also read a step per chunk (every chunk is a read: ~0.3 s a step here): graphed
#: (a capture step, warm-up), graph-level replay rows, a scored step choice. The others are
#: read in one chunk and in chunks of a few steps.
ONE_STEP = {"mlp_train_graph", "mlp_train_graph_graphtrace", "user_train_graph"}
CASES = [pytest.param(path, k, id=f"{path.stem}-{label}")
         for path in [*TAKEN, *SHARED] for label, k in CHUNK_STEPS.items()
         if k != 1 or path.stem in ONE_STEP]

#: Views as `cgprof diff` takes them: (label, --steps, --mode).
RUNS = [("steady", None, None), ("all", None, "all"), ("some", slice(1, 4), None),
        ("last", slice(-2, None), "all"), ("eager", None, "eager"), ("graph", None, "graph"),
        ("warmup", None, "warmup"), ("none", slice(10**6, None), None)]


def _view(result, run) -> RunView | str:
    try:
        return view(result, *run)
    except CgprofError as exc:
        return str(exc)


def _same_view(a: RunView | str, b: RunView | str) -> None:
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


@pytest.mark.parametrize(("path", "k"), CASES)
def test_chunks_give_the_whole_analysis(path: Path, k: int,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Every one-process trace (eager, graphed, warm-up and capture steps, graph-level
    replay rows, a scored step choice, the real nsys samples) read from SQLite in chunks of
    ``k`` steps, gathering the totals of the windows `cgprof diff` shows: the whole
    analysis's JSON document and text report, byte for byte, and every view of every window
    the whole analysis's, frame for frame (a window that selects no steps: the same error)."""
    _no_cache(monkeypatch)
    whole = analyze(cgprof.load(path, cache=False))
    wanted = [_view(whole, run) for run in RUNS]
    got = analyze_path(path, chunk_steps=k, windows=window_asker(path, RUNS))
    assert got is not None, f"{path.name}: not taken"
    assert got.trace is None and len(got.windows) == len(RUNS)
    assert _reports(got) == _reports(whole.light(json_report.GAP_LIST_LIMIT))
    for run, want in zip(RUNS, wanted, strict=True):
        _same_view(_view(got, run), want)
    # not vacuous: the views compared have kernels and gaps (and replays, when graphed)
    every = wanted[1]
    assert isinstance(every, RunView)
    assert len(every.kernels) and int(every.gap_hist["count"].sum()) > 0
    if "graph" in path.stem:
        assert len(every.replays)


@pytest.mark.parametrize(("name", "kw"), [
    ("mlp_train_graph.sqlite", {"skip": 2}), ("user_train_graph.sqlite", {"skip": 2}),
    ("mlp_train_eager.sqlite", {"min_gap_us": 5.0}),
    ("mlp_train_graph_graphtrace.sqlite", {"min_gap_us": 5.0})],
    ids=["skip-graphed", "skip-scored", "min-gap-eager", "min-gap-graph-level"])
def test_chunks_give_the_whole_analysis_with_options(name: str, kw: dict,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """--skip (graphed: warm-up and capture steps; a scored step choice) and --min-gap-us
    (eager; graph-level replay rows), in chunks of 2 steps (no windows asked): the whole
    analysis's reports."""
    _no_cache(monkeypatch)
    path = REPO / "traces" / name
    assert _reports(analyze_path(path, chunk_steps=2, **kw)) == _whole(path, **kw)


def test_chunks_read_from_the_cache_entry(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CGPROF_CACHE", str(tmp_path / "cache"))
    for name in ("mlp_train_graph.sqlite", "resnet18_train_eager.sqlite",
                 "mlp_train_graph_graphtrace.sqlite"):
        path = REPO / "traces" / name
        want = _whole(path)
        cgprof.load(path)  # writes the entry
        assert any((tmp_path / "cache").iterdir())
        assert _reports(analyze_path(path, chunk_steps=3)) == want, name


@pytest.mark.parametrize("path", COLUMNAR, ids=lambda p: p.name)
def test_chunks_of_nsys_columnar_exports(path: Path) -> None:
    assert _reports(analyze_path(path, chunk_steps=3)) == _whole(path)


@pytest.mark.parametrize("name", sorted(NOT_TAKEN))
def test_traces_the_path_does_not_take(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _no_cache(monkeypatch)
    assert analyze_path(REPO / "traces" / name, chunk_steps=2) is None


def test_the_default_gap_list_is_the_json_documents() -> None:
    assert GAP_LIMIT == json_report.GAP_LIST_LIMIT


def test_chunk_size_from_the_cap() -> None:
    assert chunk_rows(10**9) == (10**9 - 200_000_000) // (8 * 95)
    assert chunk_rows(10**6) == 50_000  # the floor


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return cgprof_in_process(["analyze", *args, "--quiet"], env)


def test_command_reads_in_chunks_under_the_cap(tmp_path: Path) -> None:
    """Under a cap the trace exceeds, `analyze` reads it in chunks (3 steps a chunk), says so
    once on stderr and prints the whole run's JSON (first: no cache entry yet) and text (from
    the cache the first run wrote)."""
    trace = str(REPO / "traces" / "mlp_train_graph.sqlite")
    env = {"CGPROF_CACHE": str(tmp_path / "cache")}
    whole_json = _cli(trace, "--json", "-", env={"CGPROF_CACHE": str(tmp_path / "whole")})
    whole_text = _cli(trace, env={"CGPROF_CACHE": str(tmp_path / "whole")})
    assert whole_json.returncode == 0, whole_json.stderr
    for args, want in ((["--json", "-"], whole_json), ([], whole_text)):
        r = cgprof_in_process(["analyze", trace, *args, "--memory-limit", "100MB", "--quiet"],
                              env, chunk_steps=3)
        assert r.returncode == 0, r.stderr
        assert r.stdout == want.stdout, args
        notes = [ln for ln in r.stderr.splitlines() if "at a time (" in ln]
        assert len(notes) == 1 and "(9 chunks)" in notes[0], r.stderr
    json.loads(whole_json.stdout)


def test_command_with_all_gaps_reads_whole(tmp_path: Path) -> None:
    """--all-gaps lists every gap: not what the chunks keep, so the trace is read whole."""
    trace = str(REPO / "traces" / "mlp_train_eager.sqlite")
    env = {"CGPROF_CACHE": str(tmp_path / "cache")}
    out = tmp_path / "o.json"
    r = cgprof_in_process(["analyze", trace, "--json", str(out), "--all-gaps", "--memory-limit",
                           "100MB", "--quiet"], env, chunk_steps=3)
    assert r.returncode == 0, r.stderr
    assert "at a time (" not in r.stderr
    doc = json.loads(out.read_text())
    assert doc["gpu"]["gaps_total"] == len(doc["gpu"]["gaps"]) > json_report.GAP_LIST_LIMIT \
        or doc["gpu"]["gaps_total"] == len(doc["gpu"]["gaps"])


def _check(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return cgprof_in_process(["check", *args], env)


@pytest.mark.parametrize("name", ["mlp_train_graph", "resnet18_train_eager",
                                  "transformer_train_graph"])
def test_check_reads_in_chunks_under_the_cap(tmp_path: Path, name: str) -> None:
    """`cgprof check` of a one-process trace over the cap is analysed a chunk of steps at a
    time, as `analyze` is: every figure of the baseline it saves, its JSON and its verdict
    are the whole analysis's."""
    trace = str(REPO / "traces" / f"{name}.sqlite")
    env = {"CGPROF_CACHE": str(tmp_path / "cache")}
    rules = ["--max", "gpu_idle_pct=99", "--min", "steps=1", "--max", "step_p50_ns=1"]
    got = {}
    for how, extra in (("whole", []), ("chunked", ["--memory-limit", "100MB"])):
        base = tmp_path / f"{how}.base.json"
        args = [trace, *rules, *extra, "--json", "-", "--save-baseline", str(base)]
        r = (_check(*args, env=env) if how == "whole" else  # (3 steps a chunk)
             cgprof_in_process(["check", *args], env, chunk_steps=3))
        assert r.returncode == 1, r.stderr  # the step_p50_ns rule fails: a real verdict
        notes = [ln for ln in r.stderr.splitlines() if "chunk of steps at a time (" in ln]
        assert len(notes) == (how == "chunked"), r.stderr
        doc = json.loads(base.read_text())
        assert doc["figures"]["steps"] and doc["figures"]["step_p50_ns"]
        got[how] = (doc, r.stdout)
    assert got["chunked"] == got["whole"]


def test_check_takes_the_engine_options(tmp_path: Path) -> None:
    """`check --no-cache` reads the trace without writing the cache; a bad --memory-limit is
    one usage error (exit 2), as for `analyze`."""
    trace = str(REPO / "traces" / "mlp_infer_graph.sqlite")
    cache = tmp_path / "cache"
    r = _check(trace, "--min", "steps=1", "--no-cache", env={"CGPROF_CACHE": str(cache)})
    assert r.returncode == 0, r.stderr
    assert not cache.exists() or list(cache.iterdir()) == []
    r = _check(trace, "--min", "steps=1", env={"CGPROF_CACHE": str(cache)})
    assert r.returncode == 0, r.stderr
    assert len([p for p in cache.iterdir() if not p.name.startswith(".")]) == 1
    bad = _check(trace, "--min", "steps=1", "--memory-limit", "lots", env={})
    assert bad.returncode == 2 and bad.stdout == ""
    assert "Invalid value for '--memory-limit'" in bad.stderr
