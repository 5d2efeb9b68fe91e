"""Ranks: multi-process traces split per process, cross-rank step times and collective waits,
many files in parallel. Inputs are built in code with hand-checkable nanoseconds."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from nsysdb import K, N, R, make_nsys_db

import cgprof
from cgprof.cli import main
from cgprof.ranks import analyze_ranks, assign_rank_ids, cross_rank, split_ranks, sub_trace

LK = "cudaLaunchKernel_v7000"
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm *, unsigned long, ncclWork *)"
LAUNCHER = 50  # a torchrun-like process: CUDA API calls, no GPU work
STEPS = 3


def skew(i: int) -> int:
    """How much later process 200 reaches step i's all-reduce than process 100."""
    return 200 * (i + 1)


def rows(pid: int, device: int, marker: int | None):
    """One rank: STEPS steps of a gemm and an all-reduce that ends at base+4000 on every rank.

    Process 100 starts its all-reduce at base+1500, process 200 at base+1500+skew(i); process
    200's steps last 100*(i+1) ns longer (host range)."""
    k, r, n = [], [], []
    late = pid == 200
    for i in range(STEPS):
        base = 10_000 * i + 1_000
        end = base + 5_000 + (100 * (i + 1) if late else 0)
        n.append(N(base, end, "step", domain="cgprof", pid=pid, payload=i))
        r.append(R(base + 100, base + 200, LK, corr=10 * i + 1, pid=pid))
        k.append(K(base + 300, base + 1_300, "gemm", corr=10 * i + 1, pid=pid, device=device))
        r.append(R(base + 300, base + 400, LK, corr=10 * i + 2, pid=pid))
        start = base + 1_500 + (skew(i) if late else 0)
        k.append(K(start, base + 4_000, NCCL, corr=10 * i + 2, pid=pid, device=device))
    if marker == 0:  # as cgprof.mark.rank writes it: a zero-length push/pop range
        n.append(N(500, 500, "rank 0/2", domain="cgprof", pid=pid, payload=0))
    elif marker is not None:  # an NVTX mark works too
        n.append(N(500, None, f"rank {marker}/2", domain="cgprof", event_type=34, pid=pid,
                   payload=marker))
    return k, r, n


def build(path, procs, launcher: bool = True):
    """procs: [(pid, device, marker)]."""
    kernels, runtime, nvtx = [], [], []
    for pid, device, marker in procs:
        k, r, n = rows(pid, device, marker)
        kernels += k
        runtime += r
        nvtx += n
    if launcher:
        runtime.append(R(100, 300, "cudaGetDeviceCount_v3020", pid=LAUNCHER))
    return make_nsys_db(path, kernels=kernels, runtime=runtime, nvtx=nvtx,
                        gpus=[(0, "GPU A"), (1, "GPU B")], graph_trace_mode="node")


TWO = [(100, 0, 1), (200, 1, 0)]  # markers say pid 200 is rank 0


@pytest.fixture
def two(tmp_path):
    return build(tmp_path / "two.sqlite", TWO)


def test_split_by_marker_and_counts_add_up(two):
    trace = cgprof.load(two)
    ranks = split_ranks(trace)
    assert [(r.rank_id, r.pid, r.device_ids, r.source) for r in ranks] == [
        (0, 200, (1,), "marker"), (1, 100, (0,), "marker")]
    assert sum(len(r.trace.kernels) for r in ranks) == len(trace.kernels) == 12
    api = [len(r.trace.api_calls) for r in ranks]
    assert api == [6, 6]
    assert sum(api) + 1 == len(trace.api_calls)  # + the launcher's call
    assert list(ranks[0].trace.gpus["device_id"]) == [1]


@pytest.mark.parametrize(("procs", "expected", "source"), [
    ([(100, 0, None), (200, 1, None)], [(0, 100), (1, 200)], "device"),
    ([(100, 1, None), (200, 0, None)], [(0, 200), (1, 100)], "device"),
    ([(100, 0, None), (200, 0, None)], [(0, 100), (1, 200)], "order"),
    ([(100, 0, 5), (200, 1, None)], [(0, 100), (1, 200)], "device"),  # one marker only
])
def test_rank_id_fallbacks(tmp_path, procs, expected, source):
    ranks = split_ranks(cgprof.load(build(tmp_path / "t.sqlite", procs)))
    assert [(r.rank_id, r.pid) for r in ranks] == expected
    assert {r.source for r in ranks} == {source}


def test_assign_rank_ids_duplicates_fall_back():
    assert assign_rank_ids([3, 3], [(0,), (1,)]) == ([0, 1], "device")
    assert assign_rank_ids([None, None], [(0, 1), (2,)]) == ([0, 1], "order")


def test_per_rank_equals_single_process_analysis(tmp_path, two):
    rr = analyze_ranks(cgprof.load(two))
    for pid, device, marker in TWO:
        own = build(tmp_path / f"only{pid}.sqlite", [(pid, device, marker)], launcher=False)
        alone = cgprof.analyze(own)
        mine = next(r for r in rr.ranks if r.pid == pid).result
        pd.testing.assert_frame_equal(mine.steps.steps, alone.steps.steps)
        pd.testing.assert_frame_equal(mine.launches, alone.launches)
        pd.testing.assert_frame_equal(mine.gaps.devices, alone.gaps.devices)
        assert mine.verdict == alone.verdict
        for key in ("kernels", "api_calls", "steps", "nvtx_ranges"):
            assert mine.info[key] == alone.info[key]


def test_cross_rank_numbers(two):
    rr = analyze_ranks(cgprof.load(two))
    cr = rr.cross
    # rank 0 = pid 200 (late by skew(i), steps 100*(i+1) ns longer); rank 1 = pid 100
    assert cr.steps.to_dict("list") == {
        "step": [0, 1, 2], "ranks": [2, 2, 2], "min_ns": [5000, 5000, 5000],
        "max_ns": [5100, 5200, 5300], "spread_ns": [100, 200, 300],
        "slowest_rank": [0, 0, 0], "fastest_rank": [1, 1, 1], "max_wait_ns": [200, 400, 600]}
    w = cr.waits
    assert list(w["wait_ns"]) == [0, 0, 0, 200, 400, 600]
    assert list(w["rank"]) == [0, 0, 0, 1, 1, 1]
    assert list(w["last_rank"]) == [0, 0, 0, 0, 0, 0]
    pr = cr.per_rank.set_index("rank")
    assert pr.loc[1, "wait_ns"] == 1200 and pr.loc[1, "wait_p50_ns"] == 400
    assert pr.loc[0, "wait_ns"] == 0
    assert pr.loc[1, "collective_ns"] == 3 * 2500
    assert pr.loc[0, "collective_ns"] == 2300 + 2100 + 1900
    assert pr.loc[0, "collective_pct"] == pytest.approx(100 * 6300 / (5100 + 5200 + 5300))
    assert list(pr["slowest_steps"]) == [3, 0]
    assert list(pr["collectives"]) == [3, 3]
    sr = cr.step_ranks
    assert list(sr[sr["rank"] == 1]["wait_ns"]) == [200, 400, 600]
    assert list(sr[sr["rank"] == 0]["collective_ns"]) == [2300, 2100, 1900]
    assert cr.notes == []


def test_skip_aligns_steps_and_collectives(two):
    cr = analyze_ranks(cgprof.load(two), skip=1).cross
    assert list(cr.steps["spread_ns"]) == [200, 300]
    assert list(cr.waits[cr.waits["rank"] == 1]["wait_ns"]) == [400, 600]


def test_unequal_steps_noted(tmp_path, two):
    rr = analyze_ranks(cgprof.load(two))
    short = dataclasses.replace(rr.ranks[1], collectives=rr.ranks[1].collectives.iloc[:2])
    cr = cross_rank([rr.ranks[0], short])
    assert cr.notes == ["collective counts differ (rank 0: 3, rank 1: 2); matched the first 2"]
    assert list(cr.waits["seq"]) == [0, 1, 0, 1]


def test_real_trace_split_counts(tmp_path):
    """Two copies of a real trace as two processes: each rank is the original trace."""
    real = cgprof.load("traces/mlp_train_graph.sqlite")
    pid = int(real.kernels["pid"].iloc[0])
    other = pid + 1

    def moved(df):
        return df.assign(pid=other) if "pid" in df.columns else df

    twin = dataclasses.replace(real, **{
        name: pd.concat([getattr(real, name), moved(getattr(real, name))], ignore_index=True)
        for name in ("kernels", "runtime", "memcpy", "memset", "sync", "graph_trace", "nvtx",
                     "threads")})
    ranks = split_ranks(twin)
    assert [r.pid for r in ranks] == [pid, other]
    assert sum(len(r.trace.kernels) for r in ranks) == len(twin.kernels) == 2 * len(real.kernels)
    assert sum(len(r.trace.api_calls) for r in ranks) == len(twin.api_calls)
    whole = cgprof.analyze(real)
    part = cgprof.analyze(sub_trace(twin, pid))
    pd.testing.assert_frame_equal(part.steps.steps, whole.steps.steps)
    assert part.info["kernels"] == whole.info["kernels"] == 7406


def test_one_process_is_one_rank():
    trace = cgprof.load("traces/mlp_infer_graph.sqlite")
    ranks = split_ranks(trace)
    assert len(ranks) == 1 and ranks[0].trace is trace


# --- CLI ------------------------------------------------------------------------------------


def invoke(*args):
    return CliRunner().invoke(main, ["analyze", *map(str, args)])


def test_cli_ranks_section_and_rank_option(two):
    res = invoke(two)
    assert res.exit_code == 0, res.output
    assert f"== {two}: rank 0 (pid 200, GPU 1)" in res.output
    assert f"== {two}: rank 1 (pid 100, GPU 0)" in res.output
    assert f"Ranks: 2 in {two} (ids from NVTX rank markers)" in res.output
    tail = res.output[res.output.index("Step time by rank"):]
    assert tail.splitlines() == [
        "Step time by rank (effective us; step i of every rank)",
        "  step  rank 0  rank 1  spread  slowest  max wait",
        "  ----  ------  ------  ------  -------  --------",
        "  0        5.1     5.0     0.1   rank 0       0.2",
        "  1        5.2     5.0     0.2   rank 0       0.4",
        "  2        5.3     5.0     0.3   rank 0       0.6",
        "  3 collectives matched across ranks (the n-th NCCL kernel of every rank)"]
    row = ("  1     100    0      3       5.0       5.0        0        6          6"
           "             3      7.5    50.0      1.2      0.40")
    assert row in res.output
    one = invoke(two, "--rank", "1")
    assert one.exit_code == 0
    assert "rank 1 (pid 100" in one.output and "rank 0 (pid 200" not in one.output
    bad = invoke(two, "--rank", "7")
    assert bad.exit_code == 1
    assert bad.output.strip().splitlines() == ["Error: --rank 7: no such rank (ranks: 0, 1)"]


def test_cli_json_ranks(two):
    res = invoke(two, "--json", "-", "--rank", "0")
    doc = json.loads(res.output)
    assert [t["rank"]["rank"] for t in doc["traces"]] == [0]
    assert doc["ranks"]["source"] == "marker"
    assert [s["spread_ns"] for s in doc["ranks"]["steps"]] == [100, 200, 300]
    assert [r["wait_ns"] for r in doc["ranks"]["per_rank"]] == [0, 1200]


def test_single_process_output_unchanged():
    path = "traces/mlp_infer_graph.sqlite"
    res = invoke(path)
    from cgprof.report import text

    assert res.output == text.render(cgprof.analyze(path))
    assert "Ranks" not in res.output


def split_files(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    for pid, device, marker in TWO:
        build(folder / f"rank{marker}.sqlite", [(pid, device, marker)], launcher=False)
    return folder


def test_whole_file_tables_count_every_process_once(tmp_path, two):
    """``files``: per file, every process's calls once. A two-rank file: the two ranks'
    tables and the launcher's merged. A file of one rank and a launcher: the rank's tables,
    which already hold the launcher's call (its analysis is of the whole file)."""
    from cgprof.parallel import analyze_files

    rr = analyze_ranks(cgprof.load(two))
    [f] = rr.files
    assert (f.path, f.pids) == (str(two), [LAUNCHER, 100, 200])
    # the all-reduce: 2500 ns on process 100; 2500 - skew(i) on process 200
    assert f.kernel_summary.to_dict("records") == [
        {"name": NCCL, "instances": 6, "total_ns": 3 * 2_500 + 2_300 + 2_100 + 1_900,
         "avg_ns": 2_300.0, "min_ns": 1_900, "max_ns": 2_500},
        {"name": "gemm", "instances": 6, "total_ns": 6_000, "avg_ns": 1_000.0,
         "min_ns": 1_000, "max_ns": 1_000}]
    assert f.api_summary.to_dict("records") == [
        {"name": "cudaLaunchKernel", "calls": 12, "total_ns": 1_200, "avg_ns": 100.0,
         "min_ns": 100, "max_ns": 100},
        {"name": "cudaGetDeviceCount", "calls": 1, "total_ns": 200, "avg_ns": 200.0,
         "min_ns": 200, "max_ns": 200}]
    folder = tmp_path / "run"
    folder.mkdir()
    for pid, device, marker in TWO:  # each file: one rank and a launcher
        build(folder / f"rank{marker}.sqlite", [(pid, device, marker)])
    many = analyze_files([folder / "rank0.sqlite", folder / "rank1.sqlite"], jobs=1)
    assert [(f.path, f.pids) for f in many.files] == [
        (str(folder / "rank0.sqlite"), [LAUNCHER, 200]),
        (str(folder / "rank1.sqlite"), [LAUNCHER, 100])]
    for f in many.files:
        assert dict(zip(f.api_summary["name"], f.api_summary["calls"], strict=True)) == {
            "cudaLaunchKernel": 6, "cudaGetDeviceCount": 1}


def test_many_files_match_one_trace(tmp_path, two):
    from cgprof.parallel import analyze_files, expand_inputs

    folder = split_files(tmp_path)
    files = expand_inputs([folder])
    assert [f.name for f in files] == ["rank0.sqlite", "rank1.sqlite"]
    said: list[str] = []
    many = analyze_files(files, jobs=1, progress=said.append)
    assert said == ["analysing file 1 of 2", "analysing file 2 of 2"]
    one = analyze_ranks(cgprof.load(two))
    assert many.source == "marker"
    for a, b in zip(many.ranks, one.ranks, strict=True):
        pd.testing.assert_frame_equal(a.result.steps.steps, b.result.steps.steps)
    for name in ("steps", "step_ranks", "waits"):
        pd.testing.assert_frame_equal(getattr(many.cross, name), getattr(one.cross, name))
    cols = [c for c in many.cross.per_rank.columns if c != "path"]
    pd.testing.assert_frame_equal(many.cross.per_rank[cols], one.cross.per_rank[cols])


def test_cli_jobs_2_equals_jobs_1(tmp_path):
    folder = split_files(tmp_path)
    out = {}
    for jobs in ("1", "2"):
        res = invoke(folder, "--jobs", jobs, "--json", "-")
        assert res.exit_code == 0, res.output
        out[jobs] = res.output
    assert out["1"] == out["2"]
    doc = json.loads(out["2"])
    assert [r["path"] for r in doc["ranks"]["per_rank"]] == [
        str(folder / "rank0.sqlite"), str(folder / "rank1.sqlite")]
    text = invoke(folder / "rank0.sqlite", folder / "rank1.sqlite", "--ranks", "--jobs", "2")
    assert "Ranks: 2 in 2 files (ids from NVTX rank markers)" in text.output
    one = invoke(folder, "--rank", "1", "--jobs", "1")
    assert one.exit_code == 0, one.output
    assert one.output.startswith(f"== {folder / 'rank1.sqlite'}: rank 1 (pid 100, GPU 0)\n")
    assert ": rank 0 (" not in one.output


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_bad_file_among_many(tmp_path, jobs):
    folder = split_files(tmp_path)
    (folder / "rank5.sqlite").write_text("not a trace\n")
    res = invoke(folder, "--jobs", jobs)
    assert res.exit_code == 1
    assert res.output.splitlines() == [
        f"Error: {folder / 'rank5.sqlite'}: is not an SQLite file; cgprof reads "
        f"`nsys export --type sqlite` output"]


def test_empty_folder(tmp_path):
    (tmp_path / "notes.txt").write_text("x")
    res = invoke(tmp_path)
    assert res.exit_code == 1
    assert res.output.splitlines() == [
        f"Error: {tmp_path}: is a directory with no nsys exports (*.sqlite, *.nsys-rep, "
        f"*.parquetdir)"]


def test_folder_of_reports_without_nsys(tmp_path, monkeypatch):
    """An .nsys-rep in a folder is a rank's trace: exported with the nsys cgprof finds, or
    refused in one line naming the report when there is none."""
    monkeypatch.setenv("CGPROF_NSYS", str(tmp_path / "no-nsys-here"))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    (tmp_path / "a.nsys-rep").write_bytes(b"x")
    res = invoke(tmp_path)
    assert res.exit_code == 1
    assert len(res.output.splitlines()) == 1
    assert res.output.startswith(f"Error: {tmp_path / 'a.nsys-rep'}: ")


def test_compact_result_pickles_small(two):
    import pickle

    from cgprof.parallel import analyze_file

    [a, b] = analyze_file(str(two))
    assert a.result.trace is None and b.result.trace is None
    assert len(pickle.dumps([a, b])) < 200_000
    assert [a.pid, b.pid] == [100, 200]
    assert np.array_equal(a.collectives["start_ns"], [2500, 12500, 22500])


# --- diff of multi-rank runs ---------------------------------------------------------------


def test_diff_ranks_folder_against_trace(tmp_path, two):
    folder = split_files(tmp_path)
    res = CliRunner().invoke(main, ["diff", str(folder), str(two), "--json", "-", "--jobs", "2"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["kind"] == "cgprof.diff.ranks"
    assert doc["overall"]["base"] == {"ranks": 2, "steps": 3, "step_p50_ns": 5200.0,
                                      "spread_p50_ns": 200.0, "wait_ns": 1200}
    assert doc["overall"]["speedup"] == 1.0
    assert [(r["rank"], r["base_step_p50_ns"], r["cand_wait_ns"]) for r in doc["per_rank"]] == [
        (0, 5200.0, 0), (1, 5000.0, 1200)]


def test_diff_ranks_text_and_missing_rank(tmp_path, two):
    one = build(tmp_path / "one.sqlite", [(100, 0, None)], launcher=False)
    res = CliRunner().invoke(main, ["diff", str(one), str(two), "--labels", "single,ddp"])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[3] == ("ddp is 1.04x slower than single per step (slowest rank's step time, "
                        "p50 over 3 aligned steps)")
    assert "  ranks only in ddp: 1" in lines
    bad = CliRunner().invoke(main, ["diff", str(one), str(two), "--steps", "0:2"])
    assert bad.exit_code == 1 and len(bad.output.splitlines()) == 1


def test_html_of_one_rank(tmp_path, two):
    out = tmp_path / "r1.html"
    res = invoke(two, "--html", out)
    assert res.exit_code == 1
    assert res.output.splitlines() == [
        f"Error: {two}: holds 2 ranks; pick the one to draw with --rank N"]
    assert not out.exists()
    res = invoke(two, "--rank", "1", "--html", out)
    assert res.exit_code == 0, res.output
    assert out.read_text().startswith("<!DOCTYPE html>")


def test_folder_of_real_traces_agrees_with_nsys(tmp_path):
    """Each process of each shipped trace as one rank (a DDP trace holds two): the ranks of a
    file add up to its nsys cuda_gpu_kern_sum, instances and total time of every kernel."""
    import csv
    import sqlite3
    from collections import defaultdict
    from pathlib import Path

    from cgprof.parallel import analyze_files, expand_inputs

    traces = Path(__file__).resolve().parents[1] / "traces"
    files = sorted(traces.glob("*.sqlite"))
    run = analyze_files(expand_inputs([traces]), jobs=2)
    procs = 0
    for f in files:  # processes that ran kernels, read straight from the file
        with sqlite3.connect(f"file:{f}?mode=ro", uri=True) as con:
            procs += con.execute("SELECT COUNT(DISTINCT globalPid) FROM "
                                 "CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    assert len(run.ranks) == procs > len(files) and run.source == "order"
    count: dict[str, int] = defaultdict(int)
    total: dict[tuple[str, str], int] = defaultdict(int)
    for r in run.ranks:
        name = Path(r.path).name.removesuffix(".sqlite")
        count[name] += r.result.info["kernels"]
        for k in r.result.kernel_summary.itertuples():
            total[(name, k.name)] += int(k.total_ns)
    for f in files:
        name = f.name.removesuffix(".sqlite")
        with open(traces / "expected" / f"{name}.cuda_gpu_kern_sum.csv") as fh:
            rows = list(csv.DictReader(fh))
        assert count[name] == sum(int(x["Instances"]) for x in rows), name
        for x in rows:
            assert total[(name, x["Name"])] == int(x["Total Time (ns)"]), (name, x["Name"])
    assert list(run.cross.per_rank["kernels"]) == [r.result.info["kernels"] for r in run.ranks]


def test_diff_one_rank_of_a_folder_against_a_trace(tmp_path, two):
    """`diff --rank 1` of a folder of per-rank files (compact results, re-read for the
    timeline) against the two-process trace: the same rank on both sides, so no change."""
    folder = split_files(tmp_path)
    page = tmp_path / "r1.html"
    res = CliRunner().invoke(main, ["diff", str(folder), str(two), "--rank", "1", "--jobs", "1",
                                    "--json", "-", "-o", str(page)])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)  # stdout holds only the JSON; "wrote ..." went to stderr
    assert res.stderr == f"wrote {page}\n"
    assert doc["labels"] == ["baseline rank 1", "candidate rank 1"]
    alone = cgprof.analyze(sub_trace(cgprof.load(two), 100))  # markers: rank 1 is pid 100
    p50 = float(np.median(alone.steps.steps["effective_ns"]))
    base, cand = doc["baseline"]["headline"], doc["candidate"]["headline"]
    assert base["step_p50_ns"] == cand["step_p50_ns"] == p50 and doc["speedup"] == 1.0
    assert page.read_text().startswith("<!DOCTYPE html>")


# --- ranks analysed one at a time (memory) ---------------------------------------------------


def _doc(rr, all_gaps: bool = False) -> str:
    from cgprof.report.json_report import render

    return render([rr], all_gaps=all_gaps)


@pytest.mark.parametrize("path", ["two", "ddp_eager", "ddp_graph"])
def test_light_ranks_print_what_whole_ones_do(request, path, monkeypatch):
    """Ranks made light as they are analysed (no sub-trace, call-to-step map or gaps over
    every step; the gap list cut to the longest) give the JSON document and the text report
    of the whole results, byte for byte, with and without --all-gaps."""
    from cgprof.report import json_report as jr
    from cgprof.report import text

    traces = Path(__file__).resolve().parents[1] / "traces"
    file = {"two": None, "ddp_eager": traces / "ddp_mlp_train_eager.sqlite",
            "ddp_graph": traces / "ddp_mlp_train_graph.sqlite"}[path]
    trace = cgprof.load(request.getfixturevalue("two") if file is None else file)
    monkeypatch.setattr(jr, "GAP_LIST_LIMIT", 3)  # shorter than the gap lists: a real cut
    whole = analyze_ranks(trace)
    light = analyze_ranks(trace, keep=False, gap_limit=3)
    every = analyze_ranks(trace, keep=False, gap_limit=None)
    assert max(len(r.result.gaps.gaps) for r in whole.ranks) > 3
    for r, w in zip(light.ranks, whole.ranks, strict=True):
        assert r.result.trace is None and not len(r.result.steps.call_steps)
        assert len(r.result.gaps.gaps) <= 3 and not len(r.result.step_gaps)
        assert r.result.gaps.listed_total == len(w.result.gaps.gaps)
        assert w.result.trace is not None
    assert _doc(light) == _doc(whole)
    assert _doc(every, all_gaps=True) == _doc(whole, all_gaps=True)
    assert text.render_ranks(light) == text.render_ranks(whole)
    with pytest.raises(ValueError, match="cut"):
        _doc(light, all_gaps=True)  # a cut list is never printed as the whole list


def test_keep_one_rank_whole(two):
    trace = cgprof.load(two)
    rr = analyze_ranks(trace, keep=1)
    assert [r.result.trace is not None for r in rr.ranks] == [False, True]
    rr = analyze_ranks(trace, keep=0)  # rank 0, not False
    assert [r.result.trace is not None for r in rr.ranks] == [True, False]


def test_rank_heads_are_split_ranks_without_sub_traces(tmp_path):
    from cgprof.ranks import rank_heads

    for procs in (TWO, [(100, 0, None), (200, 0, None)], [(100, 0, 5), (200, 1, None)]):
        trace = cgprof.load(build(tmp_path / f"h{len(list(tmp_path.iterdir()))}.sqlite",
                                  procs))
        heads = rank_heads(trace)
        assert [(h.rank_id, h.pid, h.device_ids, h.source, h.marker) for h in heads] == [
            (r.rank_id, r.pid, r.device_ids, r.source, r.marker) for r in split_ranks(trace)]


def test_cut_gap_list_refuses_to_be_filtered(two):
    gaps = cgprof.analyze(two).gaps
    cut = gaps.longest(1)
    assert len(cut.gaps) == 1 and cut.listed_total == len(gaps.gaps) > 1
    assert gaps.longest(None) is gaps and gaps.longest(len(gaps.gaps)) is gaps
    for bad in (lambda: cut.above(0), lambda: cut.longest(None)):
        with pytest.raises(ValueError, match="cut"):
            bad()


def test_cli_multi_rank_json_is_the_whole_results(tmp_path, two):
    """`cgprof analyze` of a multi-process trace (ranks made light as they go) writes the
    document of the whole results, with and without --all-gaps."""
    whole = analyze_ranks(cgprof.load(two))
    for flags, all_gaps in (([], False), (["--all-gaps"], True)):
        out = tmp_path / f"o{len(flags)}.json"
        res = CliRunner().invoke(main, ["analyze", str(two), "--json", str(out), "--quiet",
                                        *flags])
        assert res.exit_code == 0, res.output
        assert out.read_text() == _doc(whole, all_gaps=all_gaps)


def test_light_ranks_free_their_sub_traces(two, monkeypatch):
    """No sub-trace outlives its rank's analysis but the kept one (weak references)."""
    import gc
    import weakref

    from cgprof import ranks as R

    cut: list[weakref.ref] = []
    real = R.rank_of

    def spy(trace, head):
        rank = real(trace, head)
        cut.append(weakref.ref(rank.trace))
        return rank

    monkeypatch.setattr(R, "rank_of", spy)
    trace = cgprof.load(two)
    light = analyze_ranks(trace, keep=False)
    gc.collect()
    assert len(cut) == 2 and all(ref() is None for ref in cut)
    cut.clear()
    kept = analyze_ranks(trace, keep=1)
    gc.collect()
    assert [ref() is not None for ref in cut] == [False, True]
    assert kept.ranks[1].result.trace is cut[1]()
    assert light.ranks[0].result.trace is None


def test_rank_progress_names_each_rank(two):
    said: list[str] = []
    rr = analyze_ranks(cgprof.load(two), keep=False, progress=said.append)
    assert [r.rank_id for r in rr.ranks] == [0, 1]
    firsts = [m for m in said if m.endswith("summarising")]
    assert firsts == ["rank 0 (1/2): summarising", "rank 1 (2/2): summarising"]
    assert said.index(firsts[1]) > said.index("rank 0 (1/2): measuring GPU gaps")


@pytest.mark.parametrize("compact", [False, True])
def test_sub_trace_is_cut_from_the_held_frames(two, monkeypatch, compact):
    """Cutting a rank leaves the whole trace's kernel and API-call frames as it holds them
    (no left-out column made), and the rank reads the rows of the whole frames."""
    import cgprof.io.trace as T

    if compact:  # few-valued columns held as codes, as from 2M rows on
        monkeypatch.setattr(T, "COMPACT_MIN_ROWS", 0)
    trace = cgprof.load(two, cache=False)
    ref = cgprof.load(two, cache=False)
    held = {n: list(trace.stored(n).columns) for n in ("kernels", "runtime")}
    assert "dur_ns" not in held["kernels"] and "tid" not in held["runtime"]
    for pid in (100, 200):
        sub = sub_trace(trace, pid)
        assert {n: list(trace.stored(n).columns) for n in held} == held
        for name in ("kernels", "runtime", "nvtx"):
            whole = getattr(ref, name)
            want = whole[whole["pid"] == pid].reset_index(drop=True)
            pd.testing.assert_frame_equal(getattr(sub, name), want)
