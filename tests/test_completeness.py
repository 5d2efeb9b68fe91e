"""An incomplete trace (GPU records missing) is reported so, never analysed as an idle GPU.

Damaged copies of the shipped traces come from ``scripts/damage_trace.py`` (seeded): rows of
the kernel or graph-replay table deleted as a buffer overflow, at random, one replay, 2 of
every 3 replays, the tail. What each copy must be reported as is worked out from the
script's manifest (what it deleted), not by the code under test. No shipped trace, nor any
shared sample, may be reported incomplete.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections import Counter
from pathlib import Path

import pytest
from conftest import REPO, SAMPLES, cgprof_in_process, load_script
from nsysdb import write_changed_copy

import cgprof.check as C
from cgprof import metrics
from cgprof.io import loader as T
from cgprof.metrics.completeness import completeness, graph_check_mode
from cgprof.metrics.launches import api_calls
from cgprof.metrics.verdict import verdict

D = load_script("damage_trace")
TRACES = REPO / "traces"
NODE = TRACES / "mlp_train_graph.sqlite"
GRAPH = TRACES / "mlp_train_graph_graphtrace.sqlite"
EAGER = TRACES / "mlp_train_eager.sqlite"


def _completeness(path: Path):
    t = T.load(path)
    mode = graph_check_mode(t.meta.graph_trace_mode, t.meta.graph_trace_mode_source,
                            len(t.graph_trace))
    return completeness(api_calls(t, derived=False), t.stored("kernels"), t.memcpy, t.memset,
                        t.graph_trace, mode, t.meta.diagnostics)


_REAL = sorted(TRACES.glob("*.sqlite")) + sorted(SAMPLES.glob("*.sqlite")) + [
    TRACES / "columnar" / "mlp_infer_graph.parquetdir"]


@pytest.mark.parametrize("path", _REAL, ids=lambda p: p.name)
def test_no_real_trace_is_reported_incomplete(path):
    c = _completeness(path)
    assert c.complete, c.missing
    assert c.kernel_launches > 0 and c.kernel_launches_unrecorded == 0


def test_the_shared_samples_are_checked_when_present():
    if not SAMPLES.is_dir():
        pytest.skip(f"no shared samples at {SAMPLES}")
    assert {p.name for p in _REAL} >= {"mlp8_graph.sqlite", "mlp8_node.sqlite"}


# --- damaged copies: (trace, table, how, seed) ------------------------------------------------

DAMAGES = [
    (GRAPH, "graph_trace", "block", 1), (GRAPH, "graph_trace", "random", 2),
    (GRAPH, "graph_trace", "replay", 3), (GRAPH, "graph_trace", "replays", 0),
    (GRAPH, "graph_trace", "tail", 0),
    (NODE, "kernel", "block", 4), (NODE, "kernel", "random", 5), (NODE, "kernel", "replay", 6),
    (NODE, "kernel", "replays", 0), (NODE, "kernel", "tail", 0),
    (EAGER, "kernel", "block", 7), (EAGER, "kernel", "random", 8), (EAGER, "kernel", "tail", 0),
]


def _expected(d, graph_level: bool) -> dict[str, int | None]:
    """What the completeness check must find, from the manifest: replays that lost every
    row are unrecorded; of the others, those under the most common remaining count (ties:
    the larger) are short; each of these traces holds one graph per process."""
    pairs = list(d.replays.values())
    out: dict[str, int | None] = {
        "kernel_launches_unrecorded": d.eager_launches,
        "graph_launches_unrecorded": sum(1 for _, after in pairs if after == 0)}
    if graph_level:
        return out | {"replays_short": 0, "replay_nodes_missing": None}
    kept = [after for _, after in pairs if after > 0]
    counts = Counter(kept)
    usual = max(v for v, c in counts.items() if c == max(counts.values())) if kept else 0
    short = [a for a in kept if a < usual]
    unrecorded = out["graph_launches_unrecorded"]
    whole = pairs[0][0]  # an untouched replay's nodes: the usual one of the unrecorded
    usual_gone = usual if kept else whole
    return out | {"replays_short": len(short),
                  "replay_nodes_missing": sum(usual - a for a in short)
                  + usual_gone * (unrecorded or 0) if kept else None}


class _Damaged(dict):
    """Each damaged copy, made and analysed when first asked for (once per worker): its
    manifest, its analysis and its check without and with --allow-incomplete."""

    def __init__(self, folder: Path) -> None:
        super().__init__()
        self.folder = folder

    def __missing__(self, key: str):
        src, table, how, seed = next(x for x in DAMAGES if _key(*x) == key)
        dst = self.folder / f"{key}.sqlite"
        d = D.damage(src, dst, table, how, seed, fraction=0.1)
        r = metrics.analyze(dst)
        run = C._run_of({0: r}, False, [0])
        rules = [C.parse_rule("max", "launch_calls_per_step=1000")]
        self[key] = (d, r, C.evaluate_run(rules, run),
                     C.evaluate_run(rules, run, allow_incomplete=True))
        return self[key]


def _key(src: Path, table: str, how: str, seed: int) -> str:
    return f"{src.stem}-{table}-{how}-{seed}"


@pytest.fixture(scope="module")
def damaged(tmp_path_factory):
    return _Damaged(tmp_path_factory.mktemp("damaged"))


@pytest.mark.parametrize("src, table, how, seed", DAMAGES,
                         ids=[f"{s.stem}-{t}-{h}" for s, t, h, _ in DAMAGES])
def test_damaged_copy_is_reported_incomplete_with_its_counts(damaged, src, table, how, seed):
    d, r, checked, allowed = damaged[_key(src, table, how, seed)]
    c = r.completeness
    assert d.rows > 0 and not c.complete and c.missing
    got = {k: getattr(c, k) for k in ("kernel_launches_unrecorded", "graph_launches_unrecorded",
                                      "replays_short", "replay_nodes_missing")}
    if src == EAGER:
        got.pop("replay_nodes_missing")
        assert got == {"kernel_launches_unrecorded": d.eager_launches,
                       "graph_launches_unrecorded": 0, "replays_short": 0}
    else:
        assert got == _expected(d, src == GRAPH)
    # the GPU figures are out of the verdict and the estimate; the check fails, or with
    # --allow-incomplete judges the host side
    assert r.verdict.kind == "incomplete" and r.verdict.gpu_unavailable == c.reason
    assert r.verdict.estimated_speedup is None and r.verdict.eager_busy_pct_p50 is None
    assert not checked.passed and allowed.passed
    assert r.info["incomplete"] == c.missing


def test_the_damage_never_writes_its_input(tmp_path):
    before = NODE.read_bytes()
    D.damage(NODE, tmp_path / "d.sqlite", "kernel", "random", 1)
    assert NODE.read_bytes() == before
    with pytest.raises(FileExistsError):
        D.damage(NODE, tmp_path / "d.sqlite", "kernel", "random", 1)


# --- the two examples, through the CLI -----------------------------------------------

@pytest.fixture(scope="module")
def graph_every_third(tmp_path_factory):
    """mlp_train_graph_graphtrace with the GRAPH_TRACE rows of rowid % 3 != 0 deleted (once
    'GPU busy 0%' with check --min graph_gpu_share=0.9 passing)."""
    return write_changed_copy(GRAPH, tmp_path_factory.mktemp("issue") / "g.sqlite",
                              "DELETE FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE WHERE rowid % 3 != 0")


def test_graph_level_example_says_so_first_and_fails_check(graph_every_third):
    p = str(graph_every_third)
    res = cgprof_in_process(["analyze", p, "--no-cache", "--json", "-", "-q"])
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith('{\n "completeness": {\n  "complete": false,')
    doc = json.loads(res.stdout)
    c = doc["completeness"]
    assert c["missing"] == ["15 of 22 graph launches (cudaGraphLaunch) have no "
                            "CUPTI_ACTIVITY_KIND_GRAPH_TRACE row (--cuda-graph-trace=graph)"]
    assert (c["graph_launches"], c["graph_launches_unrecorded"]) == (22, 15)
    assert doc["gpu"] is None and doc["unavailable"]["gpu"] == c["reason"]
    assert c["reason"].startswith("unavailable: not recorded: the trace is incomplete")
    assert doc["coverage"]["summary"]["graph_gpu_share"] is None
    assert all(s["gpu_busy_ns"] is None for s in doc["steps"]["steps"])
    assert doc["launches"][0]["family"] == "graph_launch"  # the host side is there
    rule = ["--min", "graph_gpu_share=0.9", "--max", "launch_calls_per_step=2"]
    res = cgprof_in_process(["check", p, "--no-cache", "-q", *rule])
    assert res.returncode == 1
    assert res.stdout.splitlines()[1] == ("INCOMPLETE TRACE: GPU records are missing; the "
                                          "check fails (--allow-incomplete judges what it "
                                          "recorded)")
    res = cgprof_in_process(["check", p, "--no-cache", "-q", "--allow-incomplete", *rule])
    assert res.returncode == 0, res.stdout
    assert "SKIP  min_graph_gpu_share" in res.stdout
    assert "PASS  max_launch_calls_per_step" in res.stdout


def test_node_level_example_text_html_and_diff(damaged, tmp_path):
    d, r, _, _ = damaged["mlp_train_graph-kernel-replays-0"]
    p = str(r.info["path"])
    res = cgprof_in_process(["analyze", p, "--no-cache", "-q", "--html", str(tmp_path / "r.html")])
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[1:4] == [
        "INCOMPLETE TRACE: GPU records are missing, so its GPU figures (busy, idle, replay "
        "compactness, graph coverage, the estimate) are unavailable: not recorded; the host "
        "side is shown as recorded",
        "  missing: 14 of 22 graph launches (cudaGraphLaunch) have no replayed kernel or memset "
        "(--cuda-graph-trace=node)",
        "  missing: about 4158 replayed kernels + memsets are missing"]
    assert ("GPU busy and idle (analysis window): unavailable: not recorded (the trace is "
            "incomplete)") in lines
    assert res.stdout.split("Verdict\n")[1].splitlines()[0] == (
        "  graphed steps: 20: step p50 1.31 ms, 1 launch call per step; GPU busy and replay "
        "compactness: unavailable: not recorded (the trace is incomplete)")
    html = (tmp_path / "r.html").read_text()
    assert '<div id="cgprof-incomplete" class="banner">' in html
    from cgprof.diff import diff
    from cgprof.report import diff_text

    dr = diff(metrics.analyze(NODE), r)
    doc = json.loads(diff_text.render_json(dr))
    assert doc["schema_version"] == 2 and list(doc["incomplete"]) == ["candidate"]
    assert doc["candidate"]["headline"]["replay_compactness_p50"] is None
    assert diff_text.render(dr).splitlines()[2].startswith("INCOMPLETE TRACE (candidate):")


def test_chunked_analysis_finds_the_same(damaged):
    from cgprof.metrics.chunked import analyze_path
    from cgprof.report.json_report import completeness_dict
    from cgprof.settings import Settings, using

    _, whole, _, _ = damaged["mlp_train_graph-kernel-random-5"]
    with using(Settings(cache=False)):
        chunked = analyze_path(whole.info["path"], chunk_steps=10)
    assert chunked is not None
    assert completeness_dict(chunked.completeness) == completeness_dict(whole.completeness)
    assert chunked.verdict == whole.verdict


# --- times that cannot be, and what the export says it dropped ----------------------------------

def test_impossible_times_and_dropped_records(tmp_path):
    p = tmp_path / "t.sqlite"
    shutil.copyfile(NODE, p)
    p.chmod(0o644)
    with sqlite3.connect(p) as conn:
        # (once refused: '2 of 7406 kernels in CUPTI_ACTIVITY_KIND_KERNEL end before ...')
        conn.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = start - 1000 "
                     "WHERE rowid IN (5, 6)")
        conn.execute("UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET start = 0 WHERE rowid = 3")
        last = conn.execute("SELECT max(end) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
        conn.execute("CREATE TABLE DIAGNOSTIC_EVENT (timestamp INTEGER, timestampType INTEGER,"
                     " source INTEGER, severity INTEGER, text TEXT, globalPid INTEGER)")
        conn.executemany("INSERT INTO DIAGNOSTIC_EVENT VALUES (?, 1, 3, ?, ?, 0)", [
            (0, 1, "Profiling has started."),
            (5, 2, "CUPTI dropped 120 records: the activity buffer was full."),
            (last - 10, 1, "Profiling has stopped.")])  # the last kernels end after it
    conn.close()
    c = _completeness(p)
    assert c.recording == (0, last - 10)
    assert [m["text"] for m in c.dropped] == [
        "CUPTI dropped 120 records: the activity buffer was full."]
    times = c.impossible_times.set_index("table")
    kern, copies = times.loc["CUPTI_ACTIVITY_KIND_KERNEL"], times.loc["CUPTI_ACTIVITY_KIND_MEMCPY"]
    assert (kern["end_before_start"], kern["start_not_positive"]) == (2, 0)
    assert kern["outside_recording"] >= 1
    assert (copies["start_not_positive"], copies["before_launch"]) == (1, 1)
    assert "2 of 7406 kernels in CUPTI_ACTIVITY_KIND_KERNEL end before they start" in c.missing
    res = cgprof_in_process(["analyze", str(p), "--no-cache", "-q"])
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[1].startswith("INCOMPLETE TRACE")


# --- no estimate without its evidence ----------------------------------------------------------

_LAUNCHES = ("DELETE FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE nameId IN (SELECT id FROM "
             "StringIds WHERE value LIKE 'cudaLaunch%' OR value LIKE 'cuLaunch%')")


@pytest.mark.parametrize("case, sql, reason", [
    ("copies, no launch", ("DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL", _LAUNCHES),
     "the steps launch no kernel: nothing for a graph to collapse"),
    ("NVTX only", ("DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL", "DROP TABLE CUPTI_ACTIVITY_KIND_MEMCPY",
                   "DROP TABLE CUPTI_ACTIVITY_KIND_MEMSET",
                   "DROP TABLE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
                   "DROP TABLE CUPTI_ACTIVITY_KIND_RUNTIME"),
     "the steps launch no kernel: nothing for a graph to collapse"),
])
def test_no_estimate_without_launches_or_gpu_work(tmp_path, case, sql, reason):
    r = metrics.analyze(write_changed_copy(EAGER, tmp_path / "t.sqlite", *sql))
    assert r.completeness.complete, r.completeness.missing
    assert r.verdict.eager_steps > 0
    assert (r.verdict.estimated_speedup, r.verdict.estimate_unavailable) == (None, reason)
    assert f"if graphed (estimate): none: {reason}" in r.verdict.lines


def test_no_estimate_for_a_whole_trace_step():
    r = metrics.analyze(EAGER)
    assert r.verdict.estimated_speedup is not None  # the steps' own: there is one
    v = verdict(r.steps.window_steps(), r.replays, r.coverage, step_source="whole-trace")
    assert v.estimated_speedup is None and v.estimated_graph_step_ns is None
    assert v.estimate_unavailable.startswith("the step is the whole trace")
