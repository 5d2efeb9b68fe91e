"""cgprof's counts and sums agree exactly with Nsight Systems' own reports on real traces.

The oracle is `nsys stats -r REPORT -f csv` run on the same export: for the shared samples in
``../shared/nsys-samples/expected/`` and for the project's own traces in ``traces/expected/``.
"""

from __future__ import annotations

import functools
import json
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from click.testing import CliRunner
from conftest import REPO, SAMPLES

import cgprof
from cgprof.cli import main


def _cases() -> list[tuple[Path, Path]]:
    cases = []
    for folder in (SAMPLES, REPO / "traces", REPO / "traces" / "columnar"):
        expected = folder / "expected"
        # nsys's parquetdir/arrowdir exports of the same reports must match the same oracle.
        dbs = [*folder.glob("*.sqlite"), *folder.glob("*.parquetdir"), *folder.glob("*.arrowdir")]
        for db in sorted(dbs):
            if (expected / f"{db.stem}.cuda_gpu_kern_sum.csv").is_file():
                cases.append((db, expected))
    return cases


CASES = _cases()
IDS = [f"{db.parent.name}/{db.name}" for db, _ in CASES]


def _expected(expected: Path, stem: str, report: str) -> pd.DataFrame | None:
    path = expected / f"{stem}.{report}.csv"
    if not path.is_file():
        return None
    if path.stat().st_size == 0:  # nsys skipped the report: no such data in the trace
        return pd.DataFrame()
    return pd.read_csv(path, keep_default_na=False)


def test_oracle_cases_exist():
    # The shared samples are always beside the repo in CI; without them this module tests nothing.
    assert len(CASES) >= 2, f"no traces with nsys stats oracles found ({SAMPLES})"


@functools.cache
def _analysed(db: Path) -> cgprof.metrics.AnalysisResult:
    return cgprof.analyze(db)


def _assert_matches(ours: pd.DataFrame, exp: pd.DataFrame, our_keys: list[str],
                    their_keys: list[str], exact: dict[str, str]) -> pd.DataFrame:
    """Same rows, and each ``exact`` column (ours -> nsys's) equal as integers.

    Returns ``ours`` indexed by its keys, for further checks.
    """
    ours = ours.set_index(our_keys)
    exp = exp.set_index(their_keys)
    assert sorted(ours.index) == sorted(exp.index)
    for key, row in exp.iterrows():
        got = ours.loc[key]
        for mine, theirs in exact.items():
            assert int(got[mine]) == int(row[theirs]), (key, mine)
    return ours


#: How far a mean or median may lie from nsys's one-decimal print of it (plus float slack).
ROUNDED = 0.05 + 1e-9

EXTREMES = {"total_ns": "Total Time (ns)", "min_ns": "Min (ns)", "max_ns": "Max (ns)"}


@pytest.mark.parametrize(("db", "expected"), CASES, ids=IDS)
def test_kernel_summary_matches_cuda_gpu_kern_sum(db: Path, expected: Path):
    ours = _analysed(db).kernel_summary
    exp = _expected(expected, db.stem, "cuda_gpu_kern_sum")
    if exp is None or exp.empty:
        assert ours.empty
        return
    ours = _assert_matches(ours, exp, ["name"], ["Name"], {"instances": "Instances", **EXTREMES})
    for name, row in exp.set_index("Name").iterrows():
        got = ours.loc[name]
        # nsys prints one decimal, rounding halves up (2732.25 -> 2732.3): within 0.05.
        assert float(got["med_ns"]) == pytest.approx(float(row["Med (ns)"]), abs=ROUNDED), name
        assert float(got["avg_ns"]) == pytest.approx(float(row["Avg (ns)"]), abs=ROUNDED), name


@pytest.mark.parametrize(("db", "expected"), CASES, ids=IDS)
def test_api_summary_matches_cuda_api_sum(db: Path, expected: Path):
    ours = _analysed(db).api_summary
    exp = _expected(expected, db.stem, "cuda_api_sum")
    assert exp is not None
    if exp.empty:
        assert ours.empty
        return
    _assert_matches(ours, exp, ["name"], ["Name"], {"calls": "Num Calls", **EXTREMES})


@pytest.mark.parametrize(("db", "expected"), CASES, ids=IDS)
def test_nvtx_summary_matches_nvtx_sum(db: Path, expected: Path):
    ours = _analysed(db).nvtx_summary
    exp = _expected(expected, db.stem, "nvtx_sum")
    assert exp is not None
    if exp.empty:
        assert ours.empty
        return
    _assert_matches(ours, exp, ["name", "style"], ["Range", "Style"],
                    {"instances": "Instances", **EXTREMES})


@pytest.mark.parametrize(("db", "expected"), CASES, ids=IDS)
def test_json_output_carries_the_three_summaries(db: Path, expected: Path, tmp_path: Path):
    """The JSON summaries equal nsys stats; a multi-process trace (DDP) has one document per
    rank under "traces", and the ranks' summaries add up to the whole file's."""
    out = tmp_path / "r.json"
    res = CliRunner().invoke(main, ["analyze", str(db), "--json", str(out), "--quiet"])
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    assert doc["schema_version"] == 2
    # the processes that are not ranks (torchrun's launcher) have API and NVTX summaries only
    others = doc["ranks"]["other_processes"] if "ranks" in doc else []
    docs = (doc["traces"] if "ranks" in doc else [doc]) + [
        {"kernel_summary": [], **o} for o in others]
    assert "ranks" not in doc or len(docs) == len(doc["ranks"]["per_rank"]) + len(others)

    def summed(section: str, key: Callable[[dict], Any], fields: tuple[str, ...]) -> dict:
        acc: dict = {}
        for d in docs:
            for r in d[section]:
                for f in fields:
                    assert isinstance(r[f], int), (section, f, r[f])
                got = acc.setdefault(key(r), dict.fromkeys(fields, 0))
                for f in fields:
                    got[f] += r[f]
        return acc

    kern = _expected(expected, db.stem, "cuda_gpu_kern_sum")
    assert kern is not None
    by_name = summed("kernel_summary", lambda r: r["name"], ("instances", "total_ns"))
    assert len(by_name) == len(kern)
    for _, row in kern.iterrows():
        assert by_name[row["Name"]]["instances"] == int(row["Instances"])
        assert by_name[row["Name"]]["total_ns"] == int(row["Total Time (ns)"])
    api = summed("api_summary", lambda r: r["name"], ("calls", "total_ns"))
    for _, row in (_expected(expected, db.stem, "cuda_api_sum")).iterrows():
        assert api[row["Name"]]["calls"] == int(row["Num Calls"])
        assert api[row["Name"]]["total_ns"] == int(row["Total Time (ns)"])
    nv = summed("nvtx_summary", lambda r: (r["name"], r["style"]), ("instances", "total_ns"))
    for _, row in _expected(expected, db.stem, "nvtx_sum").iterrows():
        assert nv[(row["Range"], row["Style"])]["instances"] == int(row["Instances"])
        assert nv[(row["Range"], row["Style"])]["total_ns"] == int(row["Total Time (ns)"])


def _processes(db: Path) -> list[int]:
    """The pids of every process of an SQLite export that ran kernels, called the CUDA API
    or opened an NVTX range (nsys's reports count them all)."""
    if db.suffix != ".sqlite":
        return []
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
        return sorted({p for (p,) in con.execute(
            "SELECT (globalPid >> 24) & 16777215 FROM CUPTI_ACTIVITY_KIND_KERNEL UNION "
            "SELECT (globalTid >> 24) & 16777215 FROM CUPTI_ACTIVITY_KIND_RUNTIME UNION "
            "SELECT (globalTid >> 24) & 16777215 FROM NVTX_EVENTS WHERE eventType != 75")})


def _gpu_processes(db: Path) -> int:
    if db.suffix != ".sqlite":
        return 1
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
        return con.execute("SELECT COUNT(DISTINCT globalPid) FROM "
                           "CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]


#: The traces of several processes with GPU work (torchrun launches): cgprof analyses them
#: rank by rank and gives the whole file's summaries in ``ranks.files``.
MULTI = [(db, e) for db, e in CASES if _gpu_processes(db) > 1]


def test_multi_process_cases_exist():
    assert [db.name for db, _ in MULTI] == ["ddp_mlp_train_eager.sqlite",
                                            "ddp_mlp_train_graph.sqlite"]


@pytest.mark.parametrize("memory_limit", [None, "100MB"], ids=["whole", "rank-by-rank"])
@pytest.mark.parametrize(("db", "expected"), MULTI, ids=[db.name for db, _ in MULTI])
def test_json_whole_file_summaries_equal_nsys_stats(db: Path, expected: Path,
                                                     memory_limit: str | None,
                                                     tmp_path: Path):
    """``ranks.files``: the file's kernel, API-call and NVTX tables, every process of it
    (both ranks and torchrun's launcher), equal to nsys stats of the file: the same names,
    counts, totals, minima and maxima exactly, means within nsys's one-decimal print, and
    no median or standard deviation (not determined by the ranks' tables). Read whole and
    read rank by rank (``--memory-limit 100MB``), the same tables."""
    out = tmp_path / "r.json"
    cap = ["--memory-limit", memory_limit] if memory_limit else []
    proc = subprocess.run([sys.executable, "-m", "cgprof", "analyze", str(db), "--json",
                           str(out), "--quiet", *cap], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert ("read rank by rank" in proc.stderr) == (memory_limit is not None), proc.stderr
    doc = json.loads(out.read_text())
    assert doc["schema_version"] == 2
    [whole] = doc["ranks"]["files"]
    assert whole["path"] == str(db)
    assert whole["pids"] == _processes(db)
    assert len(whole["pids"]) == 3  # two ranks and the launcher
    assert whole["summaries_scope"] == ("whole file, every process, as nsys stats; "
                                        "no med_ns, std_ns")
    reports = {"kernel_summary": ("cuda_gpu_kern_sum", ["name"], ["Name"], "instances",
                                  "Instances"),
               "api_summary": ("cuda_api_sum", ["name"], ["Name"], "calls", "Num Calls"),
               "nvtx_summary": ("nvtx_sum", ["name", "style"], ["Range", "Style"],
                                "instances", "Instances")}
    for section, (report, keys, their_keys, count, their_count) in reports.items():
        rows = whole[section]
        assert rows, section
        for r in rows:
            assert set(r) == {*keys, count, "total_ns", "avg_ns", "min_ns", "max_ns"}
            for f in (count, "total_ns", "min_ns", "max_ns"):
                assert isinstance(r[f], int), (section, f, r[f])
            assert r["avg_ns"] == r["total_ns"] / r[count]
        totals = [r["total_ns"] for r in rows]
        assert totals == sorted(totals, reverse=True)  # most total time first, as nsys
        exp = _expected(expected, db.stem, report)
        assert exp is not None and not exp.empty
        ours = _assert_matches(pd.DataFrame(rows), exp, keys, their_keys,
                               {count: their_count, **EXTREMES})
        for key, row in exp.set_index(their_keys).iterrows():
            assert float(ours.loc[key, "avg_ns"]) == pytest.approx(
                float(row["Avg (ns)"]), abs=ROUNDED), (section, key)
