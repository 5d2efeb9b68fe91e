"""A one-process trace analysed a chunk of steps at a time (cgprof.metrics.chunked): the
result is the whole analysis's, as the reports read it, byte for byte.

Every shipped trace the chunked path takes (eager, graphed, warm-up and capture steps, a
graph-level trace, a scored step choice) is analysed whole and in chunks of 1, 2, 3 and 7
steps and in one chunk, read from SQLite (DuckDB), from its cache entry, and from nsys's
parquetdir and arrowdir exports; the JSON document (``result_to_dict``) and the text report
must be the same bytes. The command takes the path when the memory cap is below the whole
analysis's estimate, says so on stderr, and prints the same stdout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import cgprof_in_process

import cgprof
from cgprof.metrics import analyze
from cgprof.metrics.chunked import GAP_LIMIT, analyze_path, chunk_rows
from cgprof.report import json_report, text

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO.parent / "shared" / "nsys-samples"
TRACES = sorted(REPO.glob("traces/*.sqlite"))
#: Traces the chunked path does not take: steps that overlap in time (torch.compile's
#: scored choices) and several processes (DDP: read rank by rank instead).
NOT_TAKEN = {"compile_train_model.sqlite", "compile_train_step.sqlite",
             "ddp_mlp_train_eager.sqlite", "ddp_mlp_train_graph.sqlite"}
TAKEN = [p for p in TRACES if p.name not in NOT_TAKEN]
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


@pytest.mark.parametrize("path", TAKEN, ids=lambda p: p.name)
def test_chunks_give_the_whole_analysis(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _no_cache(monkeypatch)
    want = _whole(path)
    for k in (2, 10**6):
        got = analyze_path(path, chunk_steps=k)
        assert got is not None, f"{path.name}: not taken"
        assert _reports(got) == want, f"{path.name} chunks of {k}"


#: Eager, graphed (a capture step, warm-up), graph-level replay rows, a scored choice.
VARIED = ["mlp_train_eager.sqlite", "mlp_train_graph.sqlite",
          "mlp_train_graph_graphtrace.sqlite", "user_train_graph.sqlite"]


@pytest.mark.parametrize("name", VARIED)
def test_every_chunk_size_and_option(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _no_cache(monkeypatch)
    path = REPO / "traces" / name
    for kw in ({}, {"skip": 2}, {"min_gap_us": 5.0}):
        want = _whole(path, **kw)
        for k in ((1, 3, 7) if not kw else (1, 4)):
            assert _reports(analyze_path(path, chunk_steps=k, **kw)) == want, (
                f"{name} {kw} chunks of {k}")


def test_chunks_read_from_the_cache_entry(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CGPROF_CACHE", str(tmp_path / "cache"))
    for name in ("mlp_train_graph.sqlite", "resnet18_train_eager.sqlite",
                 "mlp_train_graph_graphtrace.sqlite"):
        path = REPO / "traces" / name
        want = _whole(path)
        cgprof.load(path)  # writes the entry
        assert any((tmp_path / "cache").iterdir())
        assert _reports(analyze_path(path, chunk_steps=2)) == want, name


@pytest.mark.parametrize("path", COLUMNAR, ids=lambda p: p.name)
def test_chunks_of_nsys_columnar_exports(path: Path) -> None:
    want = _whole(path)
    for k in (1, 3):
        assert _reports(analyze_path(path, chunk_steps=k)) == want


def test_shared_samples(monkeypatch: pytest.MonkeyPatch) -> None:
    if not (SAMPLES / "mlp8_node.sqlite").is_file():
        pytest.skip(f"real nsys samples not found at {SAMPLES}")
    _no_cache(monkeypatch)
    for path in sorted(SAMPLES.glob("*.sqlite")):
        want = _whole(path)
        for k in (1, 4):
            got = analyze_path(path, chunk_steps=k)
            if got is None:
                continue
            assert _reports(got) == want, f"{path.name} chunks of {k}"


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
    e = dict(os.environ)
    e.update(env)
    return subprocess.run([sys.executable, "-m", "cgprof", "analyze", *args, "--quiet"],
                          capture_output=True, text=True, env=e, timeout=240, cwd=REPO)


def test_command_reads_in_chunks_under_the_cap(tmp_path: Path) -> None:
    trace = str(REPO / "traces" / "mlp_train_graph.sqlite")
    env = {"CGPROF_CACHE": str(tmp_path / "cache")}
    whole_json = _cli(trace, "--json", "-", env=env)
    whole_text = _cli(trace, env=env)
    assert whole_json.returncode == 0, whole_json.stderr
    for cached in (False, True):  # (3 steps a chunk)
        j = cgprof_in_process(["analyze", trace, "--json", "-", "--memory-limit", "100MB",
                               "--quiet"], env, chunk_steps=3)
        t = cgprof_in_process(["analyze", trace, "--memory-limit", "100MB", "--quiet"], env,
                              chunk_steps=3)
        assert j.returncode == 0 and t.returncode == 0, j.stderr + t.stderr
        assert j.stdout == whole_json.stdout, f"cached={cached}"
        assert t.stdout == whole_text.stdout, f"cached={cached}"
        notes = [ln for ln in j.stderr.splitlines() if "at a time (" in ln]
        assert len(notes) == 1 and "(9 chunks)" in notes[0], j.stderr
        json.loads(j.stdout)


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
    e = dict(os.environ)
    e.update(env)
    return subprocess.run([sys.executable, "-m", "cgprof", "check", *args],
                          capture_output=True, text=True, env=e, timeout=240, cwd=REPO)


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
