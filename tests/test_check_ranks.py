"""`cgprof check` on traces of several ranks: the shipped two-H200 DDP pair (`torchrun
--nproc-per-node 2`, both ranks and the launcher in one nsys report). Rules apply to each
rank's own figures (those of a plain analysis of the rank's sub-trace), `--rank N`, per-rank
baselines and regression, the JSON / JUnit / GitHub outputs and the history, one row per
rank."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
from click.testing import CliRunner
from test_check import (
    _cli,
    _error,
    _no_project_config,  # noqa: F401  (autouse: runs from an empty folder)
)

import cgprof
from cgprof import check as C
from cgprof.cli import main
from cgprof.ranks import gpu_pids, split_ranks, sub_trace

TRACES = Path(__file__).resolve().parents[1] / "traces"
EAGER = TRACES / "ddp_mlp_train_eager.sqlite"
GRAPH = TRACES / "ddp_mlp_train_graph.sqlite"
SINGLE = TRACES / "mlp_train_graph.sqlite"

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def rank_figures():
    """Per trace, per rank id: figures() of a plain cgprof.analyze of the rank's sub-trace
    (the rank id from split_ranks: the runner's NVTX marker)."""
    out = {}
    for path in (EAGER, GRAPH):
        trace = cgprof.load(path)
        assert len(gpu_pids(trace)) == 2
        out[path] = {r.rank_id: C.figures(cgprof.analyze(sub_trace(trace, r.pid)))
                     for r in split_ranks(trace)}
    return out


def test_each_rank_figure_is_its_sub_trace_analysis(rank_figures):
    for path in (EAGER, GRAPH):
        run = C.load_run(path)
        assert run.multi and run.ids == [0, 1]
        assert run.ranks == rank_figures[path]
    # The ranks really differ, and neither is the whole trace taken as one run.
    whole = C.figures(cgprof.analyze(EAGER))
    e = rank_figures[EAGER]
    assert e[0]["step_p50_ns"] != e[1]["step_p50_ns"]
    assert whole["steps"] == 24 and e[0]["steps"] == e[1]["steps"] == 12
    assert [rank_figures[GRAPH][i]["launch_calls_per_step"] for i in (0, 1)] == [1, 1]
    assert [e[i]["launch_calls_per_step"] for i in (0, 1)] == [50, 50]


def test_text_eager_fails_every_rank(rank_figures):
    code, out = _cli(EAGER, "--max", "launch_calls_per_step=2")
    assert code == 1
    assert out == (
        f"cgprof check {EAGER} (ranks 0, 1)\n"
        "FAIL  rank 0  max_launch_calls_per_step          50  <= 2\n"
        "FAIL  rank 1  max_launch_calls_per_step          50  <= 2\n"
        "FAILED: 1 rules x 2 ranks, 0 passed, 2 failed, 0 skipped\n")


def test_text_graph_passes_every_rank(rank_figures):
    code, out = _cli(GRAPH, "--max", "launch_calls_per_step=2", "--max", "recaptures=0")
    assert code == 0
    assert out == (
        f"cgprof check {GRAPH} (ranks 0, 1)\n"
        "PASS  rank 0  max_launch_calls_per_step           1  <= 2\n"
        "PASS  rank 0  max_recaptures                      0  <= 0\n"
        "PASS  rank 1  max_launch_calls_per_step           1  <= 2\n"
        "PASS  rank 1  max_recaptures                      0  <= 0\n"
        "passed: 2 rules x 2 ranks, 4 passed, 0 failed, 0 skipped\n")


def test_one_failing_rank_fails_the_run(rank_figures):
    """A limit between the two ranks' step times: rank 0 (the slower) fails, rank 1 passes,
    the run fails."""
    e = rank_figures[EAGER]
    assert e[0]["step_p50_ns"] > e[1]["step_p50_ns"]
    limit = (e[0]["step_p50_ns"] + e[1]["step_p50_ns"]) / 2
    code, out = _cli(EAGER, "--max", f"step_p50_ns={limit}")
    assert code == 1
    assert [ln.split()[:3] for ln in out.splitlines()[1:3]] == [
        ["FAIL", "rank", "0"], ["PASS", "rank", "1"]]
    assert out.splitlines()[-1] == "FAILED: 1 rules x 2 ranks, 1 passed, 1 failed, 0 skipped"


def test_rank_option():
    code, out = _cli(EAGER, "--max", "launch_calls_per_step=2", "--rank", "1")
    assert code == 1
    assert out == (
        f"cgprof check {EAGER} (rank 1)\n"
        "FAIL  rank 1  max_launch_calls_per_step          50  <= 2\n"
        "FAILED: 1 rules x 1 rank, 0 passed, 1 failed, 0 skipped\n")
    code, out = _cli(EAGER, "--max", "launch_calls_per_step=2", "--rank", "2")
    assert code == 2 and _error(out) == f"{EAGER}: no rank 2 (ranks: 0, 1)"
    code, out = _cli(SINGLE, "--max", "launch_calls_per_step=2", "--rank", "1")
    assert code == 2 and _error(out) == f"{SINGLE}: holds 1 rank (rank 0); no rank 1"
    # Rank 0 of a single-rank trace is the trace: today's output.
    assert _cli(SINGLE, "--max", "launch_calls_per_step=2", "--rank", "0") == \
        _cli(SINGLE, "--max", "launch_calls_per_step=2")


def test_single_rank_output_unchanged(tmp_path):
    code, out = _cli(SINGLE, "--max", "launch_calls_per_step=2", "--max", "recaptures=0")
    assert code == 0 and out == (
        f"cgprof check {SINGLE}\n"
        "PASS  max_launch_calls_per_step           1  <= 2\n"
        "PASS  max_recaptures                      0  <= 0\n"
        "passed: 2 rules, 2 passed, 0 failed, 0 skipped\n")
    code, out = _cli(SINGLE, "--max", "launch_calls_per_step=2", "--json", "-")
    doc = json.loads(out)
    assert "ranks" not in doc and "notes" not in doc and "rank" not in doc["rules"][0]
    assert doc["figures"] == C.figures(cgprof.analyze(SINGLE))
    base = tmp_path / "b.json"
    assert _cli(SINGLE, "--save-baseline", base)[0] == 0
    saved = json.loads(base.read_text())
    assert "ranks" not in saved and saved["figures"]["steps"] == 20


def test_json_carries_the_rank(rank_figures):
    code, out = _cli(EAGER, "--max", "launch_calls_per_step=2", "--json", "-")
    assert code == 1
    doc = json.loads(out)  # stdout holds only the JSON
    assert doc["passed"] is False and doc["counts"] == {"pass": 0, "fail": 2, "skip": 0}
    assert doc["figures"] is None and doc["notes"] == []
    assert doc["ranks"] == {str(i): {"figures": rank_figures[EAGER][i],
                                     "baseline_figures": None} for i in (0, 1)}
    assert [(r["rank"], r["name"], r["status"], r["value"]) for r in doc["rules"]] == [
        (0, "max_launch_calls_per_step", "fail", 50), (1, "max_launch_calls_per_step",
                                                       "fail", 50)]


def test_junit_and_github_carry_the_rank(tmp_path):
    xml = tmp_path / "check.xml"
    code, out = _cli(EAGER, "--max", "launch_calls_per_step=2", "--max", "recaptures=0",
                     "--junit", xml, "--github")
    assert code == 1
    suite = ET.parse(xml).getroot().find("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("4", "2", "0")
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert list(cases) == ["rank 0: max_launch_calls_per_step", "rank 0: max_recaptures",
                           "rank 1: max_launch_calls_per_step", "rank 1: max_recaptures"]
    assert cases["rank 1: max_launch_calls_per_step"].find("failure").get("message") == (
        "launch_calls_per_step 50 is above 2")
    assert cases["rank 1: max_recaptures"].find("failure") is None
    gh = [ln for ln in out.splitlines() if ln.startswith("::")]
    assert gh == [
        f"::error file={EAGER},title=cgprof check rank 0%3A max_launch_calls_per_step::"
        "rank 0: launch_calls_per_step 50 is above 2 (limit <= 2)",
        f"::error file={EAGER},title=cgprof check rank 1%3A max_launch_calls_per_step::"
        "rank 1: launch_calls_per_step 50 is above 2 (limit <= 2)",
        "::error title=cgprof check::2 passed, 2 failed, 0 skipped"]


def test_per_rank_baseline_round_trip_and_regression(tmp_path, rank_figures):
    base = tmp_path / "graph.json"
    code, out = _cli(GRAPH, "--save-baseline", base)
    assert code == 0 and out == f"wrote {base}\n"
    doc = json.loads(base.read_text())
    assert "figures" not in doc and doc["kind"] == C.BASELINE_KIND
    assert doc["ranks"] == {str(i): rank_figures[GRAPH][i] for i in (0, 1)}
    run = C.load_run(base)
    assert run.multi and run.ranks == rank_figures[GRAPH]

    # graph against itself: every rank passes the default regressions
    code, out = _cli(GRAPH, "--baseline", base)
    assert code == 0, out
    assert out.splitlines()[-1] == "passed: 4 rules x 2 ranks, 8 passed, 0 failed, 0 skipped"

    # eager against graph: rank i compared with baseline rank i
    code, out = _cli(EAGER, "--baseline", base, "--json", "-")
    assert code == 1
    res = json.loads(out)
    assert res["counts"] == {"pass": 0, "fail": 8, "skip": 0}
    for r in res["rules"]:
        assert r["baseline"] == rank_figures[GRAPH][r["rank"]][r["figure"]]
        assert r["value"] == rank_figures[EAGER][r["rank"]][r["figure"]]
    p50 = {r["rank"]: r for r in res["rules"] if r["name"] == "regress_step_p50_ns"}
    assert p50[1]["limit"] == pytest.approx(rank_figures[GRAPH][1]["step_p50_ns"] * 1.05)
    assert res["ranks"]["1"]["baseline_figures"] == rank_figures[GRAPH][1]

    # a baseline rank that regressed only on rank 1
    doc["ranks"]["1"]["step_p50_ns"] = rank_figures[GRAPH][1]["step_p50_ns"] / 2
    slow = tmp_path / "slow1.json"
    slow.write_text(json.dumps(doc))
    code, out = _cli(GRAPH, "--baseline", slow, "--regress", "step_p50_ns=5%")
    assert code == 1
    assert [ln.split()[:3] for ln in out.splitlines()[1:3]] == [
        ["PASS", "rank", "0"], ["FAIL", "rank", "1"]]


def test_rank_missing_from_baseline_is_skipped(tmp_path):
    base = tmp_path / "rank1.json"
    assert _cli(GRAPH, "--rank", "1", "--save-baseline", base)[0] == 0
    assert list(json.loads(base.read_text())["ranks"]) == ["1"]
    code, out = _cli(GRAPH, "--baseline", base, "--regress", "launch_calls_per_step=0%",
                     "--max", "recaptures=0")
    assert code == 0
    assert out.splitlines()[1:] == [
        "PASS  rank 0  max_recaptures                          0  <= 0",
        "SKIP  rank 0  regress_launch_calls_per_step           1  <= n/a (baseline n/a +0%)"
        "  (rank 0 is not in the baseline (ranks: 1))",
        "PASS  rank 1  max_recaptures                          0  <= 0",
        "PASS  rank 1  regress_launch_calls_per_step           1  <= 1 (baseline 1 +0%)",
        "passed: 2 rules x 2 ranks, 3 passed, 0 failed, 1 skipped"]


def test_single_rank_baseline_against_every_rank(rank_figures):
    code, out = _cli(GRAPH, "--baseline", SINGLE, "--regress", "launch_calls_per_step=0%")
    assert code == 0
    assert out.splitlines()[:2] == [
        f"cgprof check {GRAPH} (ranks 0, 1) against {SINGLE}",
        "note: the baseline holds one rank: every rank is compared with it"]
    assert [ln.split()[:3] for ln in out.splitlines()[2:4]] == [
        ["PASS", "rank", "0"], ["PASS", "rank", "1"]]


def test_baseline_from_multi_rank_analyze_json(tmp_path, rank_figures):
    doc = tmp_path / "graph.json"
    res = CliRunner().invoke(main, ["analyze", str(GRAPH), "--json", str(doc)])
    assert res.exit_code == 0, res.output
    assert C.load_run(doc).ranks == rank_figures[GRAPH]
    code, out = _cli(EAGER, "--baseline", doc)
    code2, out2 = _cli(EAGER, "--baseline", GRAPH)
    assert code == code2 == 1
    assert out.replace(str(doc), "B") == out2.replace(str(GRAPH), "B")
    # A document of several traces without rank objects is still refused.
    bad = json.loads(doc.read_text())
    del bad["traces"][1]["rank"]
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    code, out = _cli(EAGER, "--baseline", tmp_path / "bad.json")
    assert code == 2
    assert _error(out) == f"{tmp_path / 'bad.json'}: holds 2 traces; give the JSON of one trace"


@pytest.mark.parametrize(("ranks", "message"), [
    ('[1, 2]', "'ranks' must map rank ids (\"0\", \"1\", ...) to figures"),
    ('{"a": {}}', "'ranks' must map rank ids (\"0\", \"1\", ...) to figures"),
    ('{}', "'ranks' must map rank ids (\"0\", \"1\", ...) to figures"),
])
def test_malformed_rank_baseline_exits_2(tmp_path, ranks, message):
    base = tmp_path / "b.json"
    base.write_text('{"schema_version": 2, "kind": "cgprof-check-baseline", "ranks": '
                    f'{ranks}}}')
    code, out = _cli(GRAPH, "--baseline", base)
    assert code == 2 and _error(out) == f"{base}: {message}"


def test_history_one_row_per_rank_old_database_migrated(tmp_path):
    db = tmp_path / "runs.db"
    assert _cli(SINGLE, "--max", "launch_calls_per_step=2", "--history", db,
                "--commit", "a" * 40)[0] == 0
    conn = sqlite3.connect(db)
    assert "rank" not in [c[1] for c in conn.execute("PRAGMA table_info(runs)")]
    conn.close()  # a database as an older cgprof left it
    code, out = _cli(EAGER, "--max", "launch_calls_per_step=2", "--history", db,
                     "--commit", "b" * 40)
    assert code == 1 and out.endswith(f"appended runs 2-3 (ranks 0, 1) to {db}\n")
    code, out = _cli(GRAPH, "--max", "launch_calls_per_step=2", "--rank", "1",
                     "--history", db, "--commit", "c" * 40)
    assert code == 0 and out.endswith(f"appended run 4 (rank 1) to {db}\n")
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT id, rank, passed, rules_failed, launch_calls_per_step "
                        "FROM runs ORDER BY id").fetchall() == [
        (1, None, 1, 0, 1.0), (2, 0, 0, 1, 50.0), (3, 1, 0, 1, 50.0), (4, 1, 1, 0, 1.0)]
    assert conn.execute("SELECT run_id, rule, status FROM rules ORDER BY run_id").fetchall() == [
        (1, "max_launch_calls_per_step", "pass"), (2, "max_launch_calls_per_step", "fail"),
        (3, "max_launch_calls_per_step", "fail"), (4, "max_launch_calls_per_step", "pass")]
    conn.close()

    html = tmp_path / "trend.html"
    res = CliRunner().invoke(main, ["history", str(db), "--html", str(html)])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    heads = [ln for ln in lines if ln.endswith(" runs") and ":" in ln and "/" not in ln]
    assert heads == ["single-rank runs: 1 runs", "rank 0: 1 runs", "rank 1: 2 runs"]
    r1 = lines[lines.index("rank 1: 2 runs") + 2:]
    launch = next(ln for ln in r1 if ln.startswith("launch_calls_per_step"))
    assert launch.split() == ["launch_calls_per_step", "50", "50", "1", "-98.0%", "-98.0%"]
    # three checks wrote four rows; the eager one failed on both of its ranks
    assert lines[0].startswith(f"{db}: 3 runs (4 rows, one per rank of a multi-rank run), ")
    assert lines[-2:] == [f"runs that failed a rule: 1 (last: #3 {'b' * 8})", f"wrote {html}"]
    page = html.read_text()
    assert '"name":"rank1"' in page.replace(" ", "")  # one line per rank
