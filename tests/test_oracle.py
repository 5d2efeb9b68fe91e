"""cgprof's counts and sums agree exactly with Nsight Systems' own reports on real traces.

The oracle is `nsys stats -r REPORT -f csv` run on the same export: for the shared samples in
``../shared/nsys-samples/expected/`` and for the project's own traces in ``traces/expected/``.
"""

from __future__ import annotations

import functools
import json
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
    assert doc["schema_version"] == 1
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
