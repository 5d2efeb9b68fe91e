"""`gpu.gaps` of the JSON document: the longest GAP_LIST_LIMIT gaps, or every gap (--all-gaps)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

import cgprof
from cgprof.cli import main
from cgprof.report import json_report as jr


def test_longest_gaps_keeps_the_longest_rows_in_table_order_ties_earlier_first():
    gaps = pd.DataFrame({"device_id": np.array([0, 0, 0, 0, 1, 1], dtype=np.int64),
                         "start_ns": np.array([10, 20, 30, 40, 5, 15], dtype=np.int64),
                         "gap_ns": np.array([3, 9, 3, 1, 9, 3], dtype=np.int64)})
    got = jr.longest_gaps(gaps, 4)
    # 9, 9 (rows 1 and 4), then the first two 3s (rows 0 and 2): back in table order
    assert got["start_ns"].tolist() == [10, 20, 30, 5]
    assert jr.longest_gaps(gaps, 6) is gaps
    assert jr.longest_gaps(gaps, None) is gaps


def test_document_lists_the_longest_gaps_and_counts_them_all(traces_dir: Path, monkeypatch):
    r = cgprof.analyze(traces_dir / "mlp_train_eager.sqlite")
    every = r.gaps.gaps
    assert len(every) > 10
    monkeypatch.setattr(jr, "GAP_LIST_LIMIT", 10)
    gpu = json.loads(jr.render([r]))["gpu"]
    assert gpu["gaps_total"] == len(every) and gpu["gaps_limit"] == 10
    listed = gpu["gaps"]
    assert len(listed) == 10
    assert sorted(g["gap_ns"] for g in listed) == sorted(every["gap_ns"].tolist())[-10:]
    assert [g["start_ns"] for g in listed] == sorted(g["start_ns"] for g in listed)
    full = json.loads(jr.render([r], all_gaps=True))["gpu"]
    assert full["gaps_limit"] is None and full["gaps_total"] == len(full["gaps"]) == len(every)
    # the summaries are the same either way: they always cover every gap
    for key in ("devices", "gaps_by_kind", "gap_histogram", "streams"):
        assert gpu[key] == full[key]


def test_cli_all_gaps(traces_dir: Path, tmp_path: Path):
    db = traces_dir / "mlp_train_eager.sqlite"
    out = tmp_path / "all.json"
    res = CliRunner().invoke(main, ["analyze", str(db), "--json", str(out), "--all-gaps",
                                    "--quiet"])
    assert res.exit_code == 0, res.output
    gpu = json.loads(out.read_text())["gpu"]
    assert gpu["gaps_limit"] is None and len(gpu["gaps"]) == gpu["gaps_total"]
    res = CliRunner().invoke(main, ["analyze", str(db), "--json", "-", "--quiet"])
    assert res.exit_code == 0, res.output
    gpu = json.loads(res.output)["gpu"]
    assert gpu["gaps_limit"] == jr.GAP_LIST_LIMIT
    assert len(gpu["gaps"]) == min(jr.GAP_LIST_LIMIT, gpu["gaps_total"])


@pytest.mark.parametrize("extra", [[], ["--html", "x.html"]])
def test_all_gaps_needs_json(traces_dir: Path, extra: list[str]):
    res = CliRunner().invoke(main, ["analyze", str(traces_dir / "mlp_infer_graph.sqlite"),
                                    "--all-gaps", *extra])
    assert res.exit_code == 1
    assert res.output == "Error: --all-gaps shapes the --json document; add --json PATH\n"


ALL = sorted(Path(__file__).resolve().parents[1].joinpath("traces").glob("*.sqlite"))
ONE_PROCESS = [p for p in ALL if not p.stem.startswith("ddp_")]


@pytest.mark.parametrize("path", ONE_PROCESS, ids=[p.stem for p in ONE_PROCESS])
def test_light_result_reports_the_same(path: Path, monkeypatch):
    """AnalysisResult.light (what `cgprof analyze` keeps of each trace it reports on, the
    trace and per-call/per-gap tables let go) prints the same text and JSON, the gap list
    cut short or whole."""
    from cgprof.report import text

    r = cgprof.analyze(path)
    monkeypatch.setattr(jr, "GAP_LIST_LIMIT", 7)  # shorter than most traces' gap lists
    for limit, all_gaps in ((7, False), (None, True)):
        lit = r.light(limit)
        assert lit.trace is None and not len(lit.steps.call_steps) and not len(lit.step_gaps)
        assert lit.light(limit) is lit
        assert jr.render([lit], all_gaps=all_gaps) == jr.render([r], all_gaps=all_gaps)
        assert text.render(lit) == text.render(r)


def test_cli_keeps_one_trace_at_a_time(traces_dir: Path, monkeypatch):
    """Several traces in one `cgprof analyze`: each one's trace is let go once analysed (a
    spy on the loads: the real ones run); --html keeps the one it draws."""
    import gc
    import weakref

    import cgprof.io.loader as T

    real, seen, alive = T.load, [], []

    def spy(*args, **kwargs):
        gc.collect()
        alive.append([r() is not None for r in seen])
        out = real(*args, **kwargs)
        seen.append(weakref.ref(out))
        return out

    monkeypatch.setattr(T, "load", spy)
    paths = [str(traces_dir / f"{n}.sqlite") for n in ("mlp_train_eager", "mlp_train_graph",
                                                        "mlp_infer_eager")]
    res = CliRunner().invoke(main, ["analyze", *paths, "--json", "-", "--quiet"])
    assert res.exit_code == 0, res.output
    assert alive == [[], [False], [False, False]]
    docs = json.loads(res.output)
    assert [d["trace"]["path"] for d in docs["traces"]] == paths
