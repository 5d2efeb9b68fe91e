"""`cgprof check` and `cgprof history`: rules on the shipped traces and on code-built ones,
regression against a baseline, configuration and baseline errors (exit 2, one line), the
JUnit / JSON / GitHub outputs, the SQLite history and its chart."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
from click.testing import CliRunner
from nsysdb import K, N, R

import cgprof
from cgprof import check as C
from cgprof.cli import main
from cgprof.report.json_report import result_to_dict

REPO = Path(__file__).resolve().parents[1]
EAGER = REPO / "traces" / "mlp_train_eager.sqlite"
GRAPH = REPO / "traces" / "mlp_train_graph.sqlite"


@pytest.fixture(autouse=True)
def _no_project_config(tmp_path, monkeypatch):
    """Run every test from an empty folder: no pyproject.toml above it is picked up."""
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)


@pytest.fixture(scope="module")
def eager():
    return cgprof.analyze(EAGER)


@pytest.fixture(scope="module")
def graph():
    return cgprof.analyze(GRAPH)


def _cli(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(main, ["check", *map(str, args)])
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    return res.exit_code, res.output


def _error(out: str) -> str:
    """The one line of an error, without click's 'Error: ' prefix."""
    assert out.endswith("\n") and out.count("\n") == 1 and out.startswith("Error: "), out
    return out[len("Error: "):-1]


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --- figures -------------------------------------------------------------------------------


def test_figures_of_the_shipped_pair(eager, graph):
    fe, fg = C.figures(eager), C.figures(graph)
    assert list(fe) == list(C.FIGURES)
    st = eager.steps.steps
    steady = st[st["mode"] == "eager"]
    assert fe["steps"] == len(steady) == eager.coverage.summary["steps"] == 20
    assert fe["step_p50_ns"] == float(steady["effective_ns"].median())
    assert fe["step_p99_ns"] == float(steady["effective_ns"].astype(float).quantile(0.99))
    assert fe["launch_calls_per_step"] == 296
    assert fe["graph_kernel_share"] == 0.0 and fe["graph_gpu_share"] == 0.0
    assert fe["compactness_p50"] is None  # no replays
    assert fe["gpu_idle_pct"] == float(eager.gaps.devices["idle_pct"].max())
    assert (fe["recaptures"], fe["fallbacks"], fe["sync_calls_per_step"]) == (0, 0, 1)

    assert fg["steps"] == 20
    assert fg["launch_calls_per_step"] == 1
    assert fg["graph_kernel_share"] == 1.0  # every kernel of a steady step is replayed
    # Input copies outside the graph: a little GPU time stays eager.
    assert fg["graph_gpu_share"] == graph.coverage.summary["graph_gpu_share"]
    assert 0.99 < fg["graph_gpu_share"] < 1.0
    assert fg["compactness_p50"] == graph.replays.summary["compactness"]["p50"]
    assert fg["step_p50_ns"] == graph.verdict.graph_step_p50_ns
    assert (fg["recaptures"], fg["fallbacks"], fg["sync_calls_per_step"]) == (0, 0, 1)


def test_figures_agree_from_analyze_json_and_saved_baseline(graph, tmp_path):
    doc = json.loads(json.dumps(result_to_dict(graph)))
    assert C.figures(doc) == C.figures(graph)
    base = C.baseline_document(C.figures(graph), str(GRAPH))
    assert C.figures(json.loads(json.dumps(base))) == C.figures(graph)


def test_figures_read_the_coverage_section_and_window(graph):
    """With the analysis window's ``coverage`` summary and ``in_window`` column, the coverage
    figures come from the summary and step times from the window steps only."""
    doc = json.loads(json.dumps(result_to_dict(graph)))
    doc["coverage"] = {"summary": {
        "steps": 3, "graph_kernel_share": 0.5, "graph_gpu_share": 0.25,
        "launch_calls_per_step_p50": 7.0, "recaptures": 2, "fallbacks": 1,
        "sync_calls_per_step_p50": 3.0}}
    for i, row in enumerate(doc["steps"]["steps"]):
        row["in_window"] = i in (5, 6, 7)
        row["effective_ns"] = 1000 * (i + 1)
    figs = C.figures(doc)
    assert {k: figs[k] for k in ("steps", "graph_kernel_share", "graph_gpu_share",
                                 "launch_calls_per_step", "recaptures", "fallbacks",
                                 "sync_calls_per_step", "step_p50_ns")} == {
        "steps": 3, "graph_kernel_share": 0.5, "graph_gpu_share": 0.25,
        "launch_calls_per_step": 7.0, "recaptures": 2, "fallbacks": 1,
        "sync_calls_per_step": 3.0, "step_p50_ns": 7000.0}
    assert figs["step_p99_ns"] == pytest.approx(7000 + 0.98 * 1000)


@pytest.mark.parametrize("figure", [f for f in C.FIGURES])
def test_every_figure_rule_passes_at_its_value_and_fails_past_it(figure, eager, graph):
    for figs in (C.figures(eager), C.figures(graph)):
        v = figs[figure]
        if v is None:
            res = C.evaluate([C.Rule(figure, "max", limit=0.0)], figs)
            assert res.results[0].status == "fail"
            assert res.results[0].message == f"{figure} is not measured in this run"
            continue
        ok = C.evaluate([C.Rule(figure, "max", limit=v), C.Rule(figure, "min", limit=v)], figs)
        assert [r.status for r in ok.results] == ["pass", "pass"]
        step = max(abs(v) * 0.01, 0.01)
        bad = C.evaluate([C.Rule(figure, "max", limit=v - step),
                          C.Rule(figure, "min", limit=v + step)], figs)
        assert [r.status for r in bad.results] == ["fail", "fail"]
        assert not bad.passed and ok.passed


# The absolute rules of the issue: the graphed MLP passes each, the eager one fails it.
ABSOLUTE = [
    ("max", "launch_calls_per_step=2"),
    ("min", "graph_kernel_share=0.95"),
    ("min", "graph_gpu_share=0.95"),
    ("min", "compactness_p50=0.8"),
    ("max", "gpu_idle_pct=50"),
    ("max", "step_p50_ns=5000000"),
]


@pytest.mark.parametrize(("op", "text"), ABSOLUTE)
def test_absolute_rules_graph_passes_eager_fails(op, text, eager, graph):
    rule = C.parse_rule(op, text)
    assert C.evaluate([rule], C.figures(graph)).passed
    assert not C.evaluate([rule], C.figures(eager)).passed


def test_steady_state_rules_pass_on_both_shipped_traces(eager, graph):
    rules = [C.parse_rule("max", "recaptures=0"), C.parse_rule("max", "fallbacks=0"),
             C.parse_rule("max", "sync_calls_per_step=1")]
    assert C.evaluate(rules, C.figures(graph)).passed
    assert C.evaluate(rules, C.figures(eager)).passed
    strict = [C.parse_rule("max", "sync_calls_per_step=0")]
    assert not C.evaluate(strict, C.figures(graph)).passed


# --- the command on the shipped traces (real subprocesses) ----------------------------------


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "cgprof", "check", *map(str, args)],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=60)


def test_cli_eager_fails_max_two_launch_calls(tmp_path):
    p = _run(EAGER, "--max", "launch_calls_per_step=2", cwd=tmp_path)
    assert p.returncode == 1, p.stderr
    assert p.stdout == (
        f"cgprof check {EAGER}\n"
        "FAIL  max_launch_calls_per_step         296  <= 2\n"
        "FAILED: 1 rules, 0 passed, 1 failed, 0 skipped\n")
    assert p.stderr == ""


def test_cli_graph_passes_max_two_launch_calls(tmp_path):
    p = _run(GRAPH, "--max", "launch_calls_per_step=2", "--max", "recaptures=0",
             cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert p.stdout == (
        f"cgprof check {GRAPH}\n"
        "PASS  max_launch_calls_per_step           1  <= 2\n"
        "PASS  max_recaptures                      0  <= 0\n"
        "passed: 2 rules, 2 passed, 0 failed, 0 skipped\n")


def test_cli_regression_graph_against_eager_baseline_passes(tmp_path, graph, eager):
    p = _run(GRAPH, "--baseline", EAGER, cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    lines = p.stdout.splitlines()
    assert lines[0] == f"cgprof check {GRAPH} against {EAGER}"
    assert [ln.split()[:2] for ln in lines[1:-1]] == [
        ["PASS", "regress_step_p50_ns"], ["PASS", "regress_step_p99_ns"],
        ["PASS", "regress_launch_calls_per_step"], ["SKIP", "regress_compactness_p50"]]
    assert lines[-1] == "passed: 4 rules, 3 passed, 0 failed, 1 skipped"


def test_cli_regression_eager_against_graph_baseline_fails(tmp_path, graph):
    base = tmp_path / "base.json"
    p = _run(GRAPH, "--save-baseline", base, cwd=tmp_path)
    assert p.returncode == 0 and p.stdout == f"wrote {base}\n", p.stderr
    p = _run(EAGER, "--baseline", base, "--json", "-", cwd=tmp_path)
    assert p.returncode == 1, p.stderr
    doc = json.loads(p.stdout)  # stdout holds only the JSON
    assert doc["passed"] is False and doc["counts"] == {"pass": 0, "fail": 4, "skip": 0}
    rules = {r["name"]: r for r in doc["rules"]}
    fg = C.figures(graph)
    assert rules["regress_launch_calls_per_step"]["baseline"] == 1
    assert rules["regress_launch_calls_per_step"]["limit"] == pytest.approx(1.05)
    assert rules["regress_step_p50_ns"]["limit"] == pytest.approx(fg["step_p50_ns"] * 1.05)
    assert rules["regress_compactness_p50"]["message"] == (
        f"compactness_p50 is not measured in this run but the baseline has "
        f"{C.fmt(fg['compactness_p50'])}")


def test_regression_tolerance_edges(graph):
    fg = C.figures(graph)
    base = dict(fg, step_p50_ns=fg["step_p50_ns"] / 1.05, compactness_p50=0.9)
    res = C.evaluate([C.parse_rule("regress", "step_p50_ns=5%"),
                      C.parse_rule("regress", "step_p50_ns=4%"),
                      C.parse_rule("regress", "compactness_p50=0.5%")], fg, base)
    assert [r.status for r in res.results] == ["pass", "fail", "fail"]
    assert res.results[2].limit == pytest.approx(0.9 * 0.995)


# --- re-capture and fallback on code-built traces --------------------------------------------


def _steps_trace(make_db, modes: str):
    """One cgprof step per letter, 10 us apart: C captures a graph and replays it, G replays
    it (two 1 us graph kernels), E runs the two kernels eagerly."""
    kernels, runtime, nvtx = [], [], []
    corr = 0
    for i, m in enumerate(modes):
        s = 100_000 + i * 10_000
        nvtx.append(N(s, s + 8_000, "step", domain="cgprof"))
        if m == "C":
            for off, name in ((100, "cudaStreamBeginCapture_v10000"),
                              (300, "cudaLaunchKernel_v7000"),
                              (500, "cudaStreamEndCapture_v10000"),
                              (700, "cudaGraphInstantiate_v12000")):
                corr += 1
                runtime.append(R(s + off, s + off + 100, name, corr=corr))
            s += 800
        if m in "CG":
            corr += 1
            runtime.append(R(s + 100, s + 200, "cudaGraphLaunch_v10000", corr=corr))
            kernels += [K(s + 300, s + 1300, "gemm", corr=corr, graph_node=1),
                        K(s + 1400, s + 2400, "relu", corr=corr, graph_node=2)]
        else:
            for off, name in ((100, "gemm"), (1400, "relu")):
                corr += 1
                runtime.append(R(s + off, s + off + 100, "cudaLaunchKernel_v7000", corr=corr))
                kernels.append(K(s + off + 200, s + off + 1200, name, corr=corr))
    return make_db(kernels=kernels, runtime=runtime, nvtx=nvtx, graph_trace_mode="node")


def test_recapture_figures_and_rule(make_db):
    db = _steps_trace(make_db, "CGGCGG")
    figs = C.figures(cgprof.analyze(db))
    assert figs["recaptures"] == 1 and figs["fallbacks"] == 0
    assert figs["launch_calls_per_step"] == 1 and figs["graph_kernel_share"] == 1.0
    code, out = _cli(db, "--max", "recaptures=0", "--max", "fallbacks=0")
    assert code == 1
    assert out.splitlines()[1:] == [
        "FAIL  max_recaptures           1  <= 0",
        "PASS  max_fallbacks            0  <= 0",
        "FAILED: 2 rules, 1 passed, 1 failed, 0 skipped"]
    assert _cli(db, "--max", "recaptures=1")[0] == 0


def test_fallback_figures_and_rule(make_db):
    db = _steps_trace(make_db, "CGGEGG")
    figs = C.figures(cgprof.analyze(db))
    assert figs["recaptures"] == 0 and figs["fallbacks"] == 1
    assert figs["graph_kernel_share"] == pytest.approx(0.8)
    assert figs["graph_gpu_share"] == pytest.approx(0.8)
    assert figs["launch_calls_per_step"] == 1
    code, out = _cli(db, "--max", "recaptures=0", "--max", "fallbacks=0",
                     "--min", "graph_kernel_share=0.9")
    assert code == 1
    assert out.splitlines()[1:] == [
        "PASS  max_recaptures                   0  <= 0",
        "FAIL  max_fallbacks                    1  <= 0",
        "FAIL  min_graph_kernel_share         0.8  >= 0.9",
        "FAILED: 3 rules, 1 passed, 2 failed, 0 skipped"]


# --- configuration ----------------------------------------------------------------------------


def test_pyproject_table_found_upward_and_flags_override(tmp_path, monkeypatch):
    proj = tmp_path / "proj"
    (proj / "sub" / "deeper").mkdir(parents=True)
    (proj / "pyproject.toml").write_text(
        '[project]\nname = "x"\n\n[tool.cgprof.check]\nmax_launch_calls_per_step = 2\n'
        'min_graph_kernel_share = 0.95\nbaseline = "base.json"\n\n'
        '[tool.cgprof.check.regress]\nlaunch_calls_per_step = "0%"\n')
    (proj / "sub" / "pyproject.toml").write_text('[project]\nname = "inner, no table"\n')
    monkeypatch.chdir(proj / "sub" / "deeper")
    cfg = C.load_config()
    assert cfg.path == proj / "pyproject.toml"
    assert cfg.baseline == proj / "base.json"
    assert cfg.rules == [C.Rule("launch_calls_per_step", "max", limit=2.0),
                         C.Rule("graph_kernel_share", "min", limit=0.95),
                         C.Rule("launch_calls_per_step", "regress", tolerance=0.0)]
    code, out = _cli(GRAPH, "--max", "launch_calls_per_step=0")
    assert code == 2  # the configured baseline does not exist yet
    assert _error(out) == f"{proj / 'base.json'}: no such file"
    # Refreshing the configured baseline: its regression rules are left out.
    assert _run(GRAPH, "--save-baseline", proj / "base.json", "--force",
                cwd=proj / "sub" / "deeper").returncode == 0
    code, out = _cli(GRAPH, "--max", "launch_calls_per_step=0")
    assert code == 1
    assert out.splitlines()[1:] == [
        "FAIL  max_launch_calls_per_step               1  <= 0",
        "PASS  min_graph_kernel_share                  1  >= 0.95",
        "PASS  regress_launch_calls_per_step           1  <= 1 (baseline 1 +0%)",
        "FAILED: 3 rules, 2 passed, 1 failed, 0 skipped"]


def test_config_file_top_level_keys(tmp_path):
    cfg_file = tmp_path / "gate.toml"
    cfg_file.write_text('max_launch_calls_per_step = 2\nskip = 3\nstep = "step@cgprof"\n')
    cfg = C.load_config(cfg_file)
    assert (cfg.rules, cfg.skip, cfg.step) == (
        [C.Rule("launch_calls_per_step", "max", limit=2.0)], 3, "step@cgprof")
    code, out = _cli(EAGER, "--config", cfg_file)
    assert code == 1 and out.splitlines()[1].startswith("FAIL  max_launch_calls_per_step")


@pytest.mark.parametrize(("text", "message"), [
    ("max_launch_calls_per_step = \n", "not valid TOML (Invalid value (at line 1, column 29))"),
    ("max_launches = 2\n", "unknown key 'max_launches' (known: "),
    ("max_recaptures = \"none\"\n", "max_recaptures: limit 'none' is not a number"),
    ("[regress]\nstep_p50_ns = 0.05\n",
     "regress.step_p50_ns: tolerance 0.05 must be a percentage like '5%'"),
    ("[regress]\nstep_time = \"5%\"\n", "regress: unknown figure 'step_time' (known: steps, "),
    ("skip = -1\n", "skip must be a whole number >= 0"),
])
def test_malformed_config_file_exits_2_with_one_line(tmp_path, text, message):
    cfg_file = tmp_path / "gate.toml"
    cfg_file.write_text(text)
    code, out = _cli(GRAPH, "--config", cfg_file)
    assert code == 2
    line = _error(out)
    assert line.startswith(f"{cfg_file}:") and message in line, line


def test_malformed_pyproject_exits_2(tmp_path, monkeypatch):
    (tmp_path / "cwd" / "pyproject.toml").write_text("[tool.cgprof.check\n")
    code, out = _cli(GRAPH, "--max", "recaptures=0")
    assert code == 2
    assert _error(out) == (f"{tmp_path / 'cwd' / 'pyproject.toml'}: not valid TOML "
                           "(Expected ']' at the end of a table declaration (at line 1, "
                           "column 19))")


@pytest.mark.parametrize(("args", "message"), [
    (["--max", "launches=2"], "--max launches=2: unknown figure 'launches' (known: steps, "
                              "step_p50_ns, step_p99_ns, launch_calls_per_step, "
                              "graph_kernel_share, graph_gpu_share, compactness_p50, "
                              "gpu_idle_pct, recaptures, fallbacks, sync_calls_per_step, "
                                  "untraced_step_mean_ns, untraced_step_p50_ns, "
                                  "profiler_inflation)"),
    (["--min", "compactness_p50"], "--min compactness_p50: expected FIGURE=VALUE"),
    (["--max", "recaptures=zero"], "--max recaptures=zero: limit 'zero' is not a number"),
    (["--regress", "step_p50_ns=5%"], "regression rules need a baseline: give --baseline BASE"),
    (["--baseline", str(EAGER), "--regress", "step_p50_ns=5"],
     "--regress step_p50_ns=5: tolerance '5' must be a percentage like '5%'"),
    ([], "no rules: give --max/--min FIGURE=LIMIT, --baseline BASE, or a [tool.cgprof.check] "
         "table in pyproject.toml"),
    (["--config", "missing.toml"], "missing.toml: config file not found"),
])
def test_bad_flags_exit_2(args, message):
    code, out = _cli(GRAPH, *args)
    assert code == 2
    assert _error(out) == message


def test_missing_trace_exits_2(tmp_path):
    code, out = _cli(tmp_path / "nope.sqlite", "--max", "recaptures=0")
    assert code == 2
    assert _error(out) == f"{tmp_path / 'nope.sqlite'}: no such file"


# --- baselines ---------------------------------------------------------------------------------


def test_baseline_from_analyze_json(tmp_path, eager):
    doc = tmp_path / "eager.json"
    res = CliRunner().invoke(main, ["analyze", str(EAGER), "--json", str(doc)])
    assert res.exit_code == 0, res.output
    code, out = _cli(GRAPH, "--baseline", doc)
    assert code == 0
    code2, out2 = _cli(GRAPH, "--baseline", EAGER)
    assert out.replace(str(doc), "B") == out2.replace(str(EAGER), "B")


@pytest.mark.parametrize(("content", "message"), [
    ('{"schema_version": 99, "kind": "cgprof-check-baseline", "figures": {}}',
     "written with JSON schema_version 99; this cgprof reads 2 (re-create it with this "
     "cgprof)"),
    ('{"schema_version": 2, "steps": [', "not valid JSON (line 1: Expecting value)"),
    ('{"figures": {}}', "not a cgprof JSON document (no schema_version)"),
    ('{"schema_version": 2, "traces": [{}, {}]}', "holds 2 traces; give the JSON of one trace"),
    ('{"schema_version": 2, "hello": 1}',
     "not a cgprof analyze or baseline document (no steps)"),
    ('{"schema_version": 2, "steps": {"steps": []}}',
     "written by a cgprof without the analysis window's coverage figures; re-run "
     "`cgprof analyze --json` on its trace"),
])
def test_malformed_baseline_exits_2(tmp_path, content, message):
    base = tmp_path / "base.json"
    base.write_text(content)
    code, out = _cli(GRAPH, "--baseline", base)
    assert code == 2
    assert _error(out) == f"{base}: {message}"


def test_baseline_that_is_not_a_trace_exits_2(tmp_path):
    base = tmp_path / "base.sqlite"
    base.write_text("hello")
    code, out = _cli(GRAPH, "--baseline", base)
    assert code == 2
    assert _error(out).startswith(f"{base}: ")


# --- outputs -------------------------------------------------------------------------------


def test_junit_file_parses(tmp_path):
    xml = tmp_path / "check.xml"
    code, out = _cli(EAGER, "--baseline", GRAPH, "--max", "recaptures=0", "--junit", xml)
    assert code == 1 and out.endswith(f"wrote {xml}\n")
    root = ET.parse(xml).getroot()
    assert root.tag == "testsuites"
    (suite,) = list(root)
    assert suite.tag == "testsuite"
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("5", "4", "0")
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert list(cases) == ["max_recaptures", "regress_step_p50_ns", "regress_step_p99_ns",
                           "regress_launch_calls_per_step", "regress_compactness_p50"]
    assert cases["max_recaptures"].find("failure") is None
    fail = cases["regress_launch_calls_per_step"].find("failure")
    assert fail.get("message") == ("launch_calls_per_step 296 vs baseline 1 (+29500.0%, "
                                   "tolerance 5%)")
    assert fail.text == "value 296, limit <= 1.05 (baseline 1 +5%)"


def test_junit_skipped(tmp_path):
    xml = tmp_path / "check.xml"
    assert _cli(GRAPH, "--baseline", EAGER, "--junit", xml)[0] == 0
    suite = ET.parse(xml).getroot().find("testsuite")
    assert suite.get("skipped") == "1" and suite.get("failures") == "0"
    skipped = [c.get("name") for c in suite.iter("testcase") if c.find("skipped") is not None]
    assert skipped == ["regress_compactness_p50"]


def test_github_annotations(make_db):
    db = _steps_trace(make_db, "CGGEGG")
    code, out = _cli(db, "--max", "fallbacks=0", "--max", "recaptures=0", "--github")
    assert code == 1
    lines = out.splitlines()
    assert lines[-2:] == [
        f"::error file={db},title=cgprof check max_fallbacks::fallbacks 1 is above 0 "
        "(limit <= 0)",
        "::error title=cgprof check::1 passed, 1 failed, 0 skipped"]
    code, out = _cli(db, "--max", "fallbacks=1", "--github")
    assert code == 0 and out.splitlines()[-1] == (
        "::notice title=cgprof check::1 passed, 0 failed, 0 skipped")
    assert _error(_cli(db, "--max", "fallbacks=1", "--github", "--json", "-")[1]) == (
        "--github prints to stdout; it cannot share it with --json -")


def test_github_escapes():
    from cgprof.report.check_report import render_github

    res = C.evaluate([C.Rule("gpu_idle_pct", "max", limit=5.0)], {"gpu_idle_pct": 50.0},
                     source="a,b:c%.sqlite")
    assert render_github(res).splitlines()[0] == (
        "::error file=a%2Cb%3Ac%25.sqlite,title=cgprof check max_gpu_idle_pct::"
        "gpu_idle_pct 50 is above 5 (limit <= 5)")


def test_outputs_never_overwritten_without_force(tmp_path):
    for opt in ("--junit", "--json", "--save-baseline"):
        out_file = tmp_path / f"out{opt}"
        out_file.write_text("keep me")
        code, out = _cli(GRAPH, "--max", "recaptures=0", opt, out_file)
        assert code == 2
        assert _error(out) == f"{out_file} exists; will not overwrite without --force"
        assert out_file.read_text() == "keep me"
        code, out = _cli(GRAPH, "--max", "recaptures=0", opt, out_file, "--force")
        assert code == 0 and out_file.read_text() != "keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "cwd", "out--json", "out--junit", "out--save-baseline"]  # no temporary files left


def test_failed_run_writes_nothing(tmp_path):
    xml = tmp_path / "check.xml"
    code, _ = _cli(tmp_path / "missing.sqlite", "--max", "recaptures=0", "--junit", xml)
    assert code == 2 and not xml.exists()


# --- history -------------------------------------------------------------------------------


def test_history_append_trend_and_chart(tmp_path, make_db):
    db = tmp_path / "runs.db"
    good = _steps_trace(make_db, "CGGGGG")
    bad = _steps_trace(make_db, "CGGEGG")
    assert _cli(good, "--max", "fallbacks=0", "--history", db, "--commit", "a" * 40)[0] == 0
    code, out = _cli(bad, "--max", "fallbacks=0", "--history", db, "--commit", "b" * 40)
    assert code == 1 and out.endswith(f"appended run 2 to {db}\n")
    conn = sqlite3.connect(db)
    runs = conn.execute("SELECT id, [commit], passed, rules_failed, fallbacks, "
                        "launch_calls_per_step, graph_kernel_share FROM runs").fetchall()
    assert runs == [(1, "a" * 40, 1, 0, 0.0, 1.0, 1.0), (2, "b" * 40, 0, 1, 1.0, 1.0, 0.8)]
    rules = conn.execute("SELECT run_id, rule, status, value, [limit] FROM rules").fetchall()
    assert rules == [(1, "max_fallbacks", "pass", 0.0, 0.0), (2, "max_fallbacks", "fail", 1.0,
                                                               0.0)]
    conn.close()

    html = tmp_path / "trend.html"
    res = CliRunner().invoke(main, ["history", str(db), "--html", str(html)])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[0].startswith(f"{db}: 2 runs, ")
    assert lines[1].split() == ["figure", "first", "previous", "last", "vs", "first", "vs",
                                "prev"]
    trend = {ln.split()[0]: ln.split()[1:] for ln in lines[2:-2]}
    assert trend["fallbacks"] == ["0", "0", "1", "n/a", "n/a"]
    assert trend["graph_kernel_share"] == ["1", "1", "0.8", "-20.0%", "-20.0%"]
    assert lines[-2:] == [f"runs that failed a rule: 1 (last: #2 {'b' * 8})", f"wrote {html}"]
    page = html.read_text()
    assert 'id="cgprof-history"' in page and "<script src=" not in page
    assert "plotly" in page and len(page) > 1_000_000  # plotly.js inlined, offline
    # The chart is not overwritten without --force.
    res = CliRunner().invoke(main, ["history", str(db), "--html", str(html)])
    assert res.exit_code == 1
    assert _error(res.output) == f"{html} exists; will not overwrite without --force"


def test_history_commit_from_git(tmp_path, make_db):
    repo = tmp_path / "repo"
    repo.mkdir()
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@x", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@x")
    for cmd in (["init", "-q"], ["commit", "-q", "--allow-empty", "-m", "x"]):
        subprocess.run(["git", *cmd], cwd=repo, env=env, check=True, timeout=30)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True,
                          text=True, check=True).stdout.strip()
    db = tmp_path / "runs.db"
    p = _run(_steps_trace(make_db, "CGG"), "--max", "fallbacks=0", "--history", db, cwd=repo)
    assert p.returncode == 0, p.stderr
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT [commit] FROM runs").fetchall() == [(head,)]
    conn.close()


def test_history_refuses_a_trace_and_leaves_it_untouched(tmp_path):
    trace_copy = tmp_path / "copy.sqlite"
    trace_copy.write_bytes(GRAPH.read_bytes())
    before = _digest(trace_copy)
    code, out = _cli(GRAPH, "--max", "recaptures=0", "--history", trace_copy)
    assert code == 2
    assert _error(out) == (f"{trace_copy}: not a cgprof history database (no 'runs' table); "
                           "give a new file")
    assert _digest(trace_copy) == before
    res = CliRunner().invoke(main, ["history", str(trace_copy)])
    assert res.exit_code == 1
    assert _error(res.output) == f"{trace_copy}: not a cgprof history database (no 'runs' table)"
    assert _digest(trace_copy) == before
    res = CliRunner().invoke(main, ["history", str(tmp_path / "none.db")])
    assert _error(res.output) == f"{tmp_path / 'none.db'}: history database not found"


def test_check_does_not_import_torch(tmp_path):
    code = ("import sys; from click.testing import CliRunner; from cgprof.cli import main; "
            f"r = CliRunner().invoke(main, ['check', {str(GRAPH)!r}, '--max', 'recaptures=0']); "
            "assert r.exit_code == 0, r.output; assert 'torch' not in sys.modules")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=60, cwd=tmp_path)
