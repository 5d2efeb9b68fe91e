"""The shipped two-rank DDP traces (`torchrun --nproc-per-node 2`, both ranks in one nsys
report, recorded on two H200s): ranks, cross-rank figures and rank-by-rank diffs checked
against nsys stats and against single-process analyses of each rank's sub-trace."""

from __future__ import annotations

import csv
import json
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

import cgprof
from cgprof.cli import main
from cgprof.ranks import analyze_ranks, sub_trace

TRACES = Path(__file__).resolve().parents[1] / "traces"
EXPECTED = TRACES / "expected"
EAGER = TRACES / "ddp_mlp_train_eager.sqlite"
GRAPH = TRACES / "ddp_mlp_train_graph.sqlite"
PAIR = [EAGER, GRAPH]

pytestmark = pytest.mark.timeout(300)


def _oracle(path: Path, report: str) -> list[dict[str, str]]:
    with open(EXPECTED / f"{path.stem}.{report}.csv") as fh:
        return list(csv.DictReader(fh))


@pytest.fixture(scope="module", params=PAIR, ids=lambda p: p.stem)
def run(request):
    trace = cgprof.load(request.param)
    return request.param, trace, analyze_ranks(trace)


def test_two_ranks_from_markers(run):
    path, _, rr = run
    assert [r.rank_id for r in rr.ranks] == [0, 1] and rr.source == "marker"
    assert [r.device_ids for r in rr.ranks] == [(0,), (1,)]
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as con:
        procs = {p for (p,) in con.execute(
            "SELECT DISTINCT (globalPid >> 24) & 16777215 FROM CUPTI_ACTIVITY_KIND_KERNEL")}
    assert {r.pid for r in rr.ranks} == procs


def test_per_rank_counts_add_up_to_nsys_stats(run):
    """The cross-rank table's whole-trace kernel and API counts, plus the launcher's calls
    (not a rank), are exactly what nsys stats reports for the whole file; so are the sums."""
    path, _, rr = run
    kern = _oracle(path, "cuda_gpu_kern_sum")
    api = _oracle(path, "cuda_api_sum")
    pr = rr.cross.per_rank
    others = rr.others
    assert len(others) == 1 and len(others[0].pids) == 1  # torchrun's launcher
    assert int(pr["kernels"].sum()) == sum(int(x["Instances"]) for x in kern)
    assert int(pr["api_calls"].sum()) + others[0].api_calls == sum(
        int(x["Num Calls"]) for x in api)
    kern_ns = sum(int(r.result.kernel_summary["total_ns"].sum()) for r in rr.ranks)
    assert kern_ns == sum(int(x["Total Time (ns)"]) for x in kern)
    api_ns = sum(int(r.result.api_summary["total_ns"].sum()) for r in rr.ranks)
    api_ns += int(others[0].api_summary["total_ns"].sum())
    assert api_ns == sum(int(x["Total Time (ns)"]) for x in api)


def test_the_whole_file_tables_are_the_whole_trace_summaries(run):
    """``RanksResult.files``: the ranks' and the launcher's tables merged are what the
    summaries of the whole loaded trace give, row for row (names, order, counts, totals,
    means, extremes), less the median and standard deviation; and nsys stats' counts."""
    from cgprof.metrics.summaries import api_summary, kernel_summary, nvtx_summary

    path, trace, rr = run
    [whole] = rr.files
    assert whole.path == str(path) and len(whole.pids) == 3
    cols = ["total_ns", "avg_ns", "min_ns", "max_ns"]
    for got, direct, count in [(whole.kernel_summary, kernel_summary(trace), "instances"),
                               (whole.api_summary, api_summary(trace), "calls"),
                               (whole.nvtx_summary, nvtx_summary(trace), "instances")]:
        keys = [c for c in ("name", "style") if c in direct.columns]
        assert list(got.columns) == [*keys, count, *cols]
        pd.testing.assert_frame_equal(got, direct[[*keys, count, *cols]])
    kern = _oracle(path, "cuda_gpu_kern_sum")
    assert dict(zip(whole.kernel_summary["name"], whole.kernel_summary["instances"],
                    strict=True)) == {x["Name"]: int(x["Instances"]) for x in kern}
    api = _oracle(path, "cuda_api_sum")
    assert dict(zip(whole.api_summary["name"], whole.api_summary["calls"],
                    strict=True)) == {x["Name"]: int(x["Num Calls"]) for x in api}


def test_cross_rank_numbers_equal_single_rank_analysis(run):
    """Every cross-rank figure of a rank is what a plain analysis of that process's
    sub-trace gives: window steps, p50/max step time, NCCL kernels in window steps."""
    _, trace, rr = run
    for r in rr.ranks:
        alone = cgprof.analyze(sub_trace(trace, r.pid))
        pd.testing.assert_frame_equal(alone.steps.steps, r.result.steps.steps)
        assert alone.verdict == r.result.verdict
        row = rr.cross.per_rank.set_index("rank").loc[r.rank_id]
        st = alone.steps.steps
        win = st[st["in_window"]]
        assert row["steps"] == len(win) == 12
        assert row["step_p50_ns"] == float(np.median(win["effective_ns"]))
        assert row["step_max_ns"] == int(win["effective_ns"].max())
        assert row["kernels"] == alone.info["kernels"]
        assert row["api_calls"] == alone.info["api_calls"]
        k = alone.trace.kernels
        nccl = k[k["name"].astype(str).str.contains("nccl", case=False)]
        calls = alone.steps.call_steps
        nccl = nccl.merge(calls[["pid", "corr_id", "step"]], on=["pid", "corr_id"])
        nccl = nccl[nccl["step"].isin(win["step"])]
        assert row["collectives"] == len(nccl) > 0
        assert row["collective_ns"] == int(nccl["dur_ns"].sum())
    steps = rr.cross.steps
    assert len(steps) == min(len(r.result.steps.steps) for r in rr.ranks)
    assert (steps["spread_ns"] == steps["max_ns"] - steps["min_ns"]).all()


def test_graphed_ranks_replay_one_graph_per_step():
    rr = analyze_ranks(cgprof.load(GRAPH))
    for r in rr.ranks:
        cov = r.result.coverage.summary
        assert cov["launch_calls_per_step_p50"] == 1.0
        assert cov["recaptures"] == 0 and cov["fallbacks"] == 0


def _diff(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(main, ["diff", str(EAGER), str(GRAPH), *args])
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    return res.exit_code, res.output


def test_diff_rank_by_rank_and_html(tmp_path):
    code, out = _diff("--json", "-")
    assert code == 0, out
    doc = json.loads(out)
    assert [r["rank"] for r in doc["per_rank"]] == [0, 1]
    assert all(r["speedup"] > 5 for r in doc["per_rank"])
    for rank in (0, 1):
        page = tmp_path / f"rank{rank}.html"
        code, out = _diff("--rank", str(rank), "--labels", "eager,graph", "-o", str(page))
        assert code == 0, out
        first = out.splitlines()[0]
        assert first.startswith(f"== eager rank {rank}: {EAGER}, steps 3-14 (12 of 15")
        per_rank = doc["per_rank"][rank]
        p50 = f"{per_rank['base_step_p50_ns'] / 1000:.1f} us -> "
        assert p50 in out
        text = page.read_text()
        assert text.startswith("<!DOCTYPE html>") and f"eager rank {rank}" in text
    code, out = _diff("-o", str(tmp_path / "x.html"))
    assert code == 1 and out.splitlines() == [
        "Error: multi-rank runs are compared rank by rank on their steady-state steps; -o, "
        "--steps and --mode compare two single-rank traces: pick one rank with --rank N"]
    code, out = _diff("--rank", "2", "-o", str(tmp_path / "y.html"))
    assert code == 1 and out.splitlines() == [f"Error: {EAGER}: no rank 2 (ranks: 0, 1)"]
    assert not (tmp_path / "x.html").exists() and not (tmp_path / "y.html").exists()


def test_diff_rank_of_a_single_process_trace():
    one = TRACES / "mlp_train_eager.sqlite"
    res = CliRunner().invoke(main, ["diff", str(one), str(GRAPH), "--rank", "1"])
    assert res.exit_code == 1
    assert res.output.splitlines() == [f"Error: {one}: holds 1 rank (rank 0); no rank 1"]
    res = CliRunner().invoke(main, ["diff", str(one), str(GRAPH), "--rank", "0"])
    assert res.exit_code == 0, res.output
    assert res.output.startswith(f"== baseline rank 0: {one}")
