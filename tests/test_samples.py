"""What `cgprof analyze` finds on the real nsys 2025.3 sample exports (8-layer MLP, H200)."""

from __future__ import annotations

import pandas as pd
import pytest
from click.testing import CliRunner

import cgprof
from cgprof.cli import main
from cgprof.report import text as text_report


def test_trace_facts(node, graph):
    assert node.info["nsys_version"] == "2025.3.2.0"
    assert node.info["schema_version"] == "3.20.3"
    assert node.info["graph_trace_mode"] == "node"
    assert graph.info["graph_trace_mode"] == "graph"
    assert node.info["gpus"] == [{"device_id": 0, "name": "NVIDIA H200"}]


def test_node_mode_replays(node):
    r = node.replays.replays
    assert len(r) == 20
    assert r["nodes"].tolist() == [16] * 20
    assert node.replays.node_level
    # Every replay's span is its first kernel start to its last kernel end.
    k = node.trace.kernels
    k = k[k["graph_node_id"].notna()]
    span = k.groupby("corr_id").agg(s=("start_ns", "min"), e=("end_ns", "max"))
    for row in r.itertuples():
        assert row.span_ns == span.loc[row.corr_id, "e"] - span.loc[row.corr_id, "s"]
        assert 0.9 <= row.compactness <= 1.0
        assert row.busy_ns + row.gaps_ns == row.span_ns
    assert node.replays.summary["median_gap_ns"]["p50"] == pytest.approx(288, abs=40)


def test_compactness_hints_name_short_nodes_and_memset_waits(node, traces_dir):
    # The 8-layer sample's replays are 0.93 compact: no hint there.
    assert node.replays.summary["compactness"]["p50"] >= 0.9
    assert "  under 0.9" not in text_report.render(node)
    path = traces_dir / "mlp_train_graph.sqlite"
    r = cgprof.analyze(path)
    rep = r.replays.replays
    # Each replay's mean node is its busy time over its node count; in these 41-layer MLP
    # training replays the longest wait always follows the one memset node (cuBLAS split-K).
    assert (rep["mean_node_ns"] == rep["busy_ns"] / rep["nodes"]).all()
    assert set(rep["longest_gap_after"]) == {"memset"}
    assert r.replays.summary["compactness"]["p50"] < 0.9
    out = CliRunner().invoke(main, ["analyze", str(path)]).output
    d = r.replays.summary["mean_node_ns"]["p50"] / 1000
    g = r.replays.summary["median_gap_ns"]["p50"] / 1000
    assert f"  under 0.9: nodes average {d:.2f} us, median gap {g:.2f} us; " in out
    assert f"0.9 at that gap needs {9 * g:.2f} us per node" in out
    assert f"follows a memset node in {len(rep)} of {len(rep)} replays" in out
    assert len([ln for ln in out.splitlines() if ln.startswith("  mean node us")]) == 1


def test_graph_mode_replays_have_no_node_figures(graph):
    r = graph.replays.replays
    assert len(r) == 20
    assert not graph.replays.node_level
    assert r["nodes"].isna().all()
    assert r["compactness"].isna().all()
    # Span from the whole-graph rows, joined on the launch's correlation id.
    gt = graph.trace.graph_trace.set_index("corr_id")
    for row in r.itertuples():
        assert row.span_ns == gt.loc[row.corr_id, "dur_ns"]


def test_steps_and_launch_collapse(node):
    st = node.steps.steps
    assert node.steps.name == "cgprof:step"
    assert node.steps.source == "default"
    assert len(st) == 40
    eager, graphed = st[st["mode"] == "eager"], st[st["mode"] == "graph"]
    assert len(eager) == 20 and len(graphed) == 20
    assert (eager["group"] == "eager").all() and (graphed["group"] == "graph").all()
    assert (eager["kernel_launches"] == 16).all() and (eager["graph_launches"] == 0).all()
    assert (graphed["kernel_launches"] == 0).all() and (graphed["graph_launches"] == 1).all()
    assert (eager["kernels"] == 16).all() and (graphed["kernels"] == 16).all()
    assert eager["launch_bound"].all()
    assert node.verdict.kind == "launch-bound"
    assert node.verdict.eager_launches_per_step == 16
    assert node.verdict.graph_launches_per_step == 1


def test_gpu_busy_in_graph_mode_counts_replays(graph):
    # The replayed kernels are not in the kernel table: busy time must include replay rows,
    # or a busy GPU looks idle during replays.
    st = graph.steps.steps
    graphed = st[st["mode"] == "graph"]
    rows = graph.trace.graph_trace.sort_values("start_ns")
    assert graphed["gpu_busy_ns"].tolist() == rows["dur_ns"].tolist()
    assert graphed["kernels"].isna().all()


def test_gaps_are_classified(node):
    g = node.gaps
    kinds = set(g.by_kind["kind"])
    assert {"in_replay", "launch_bound"} <= kinds
    dev = g.devices.iloc[0]
    assert dev["busy_ns"] + dev["idle_ns"] == dev["window_ns"]
    assert int(g.gaps["gap_ns"].sum()) == dev["idle_ns"]
    inside = g.gaps[g.gaps["kind"] == "in_replay"]
    assert (inside["gap_ns"] < 1000).all()


def test_cli_summary_text(samples_dir):
    res = CliRunner().invoke(main, ["analyze", str(samples_dir / "mlp8_node.sqlite")])
    assert res.exit_code == 0, res.output
    out = res.output
    assert "--cuda-graph-trace=node (metadata)" in out
    assert "steps: 40 instances of NVTX range 'cgprof:step' (default)" in out
    assert "eager steps: launch-bound (20 of 20 steps)" in out
    assert "launch calls per step 16 -> 1" in out
    assert "Graph replays launched in window steps: 20" in out


def test_skip_and_step_options(samples_dir):
    r = cgprof.analyze(samples_dir / "mlp8_node.sqlite", skip=5)
    assert len(r.steps.steps) == 35
    assert r.steps.steps["index"].iloc[0] == 5
    r = cgprof.analyze(samples_dir / "mlp8_node.sqlite", step="eager@cgprof")
    assert len(r.steps.steps) == 1
    assert int(r.steps.steps["kernel_launches"].iloc[0]) == 320


def test_unknown_step_range_is_one_line(samples_dir):
    res = CliRunner().invoke(main, ["analyze", str(samples_dir / "mlp8_node.sqlite"),
                                    "--step", "nope"])
    assert res.exit_code == 1
    assert res.output == (
        f"Error: {samples_dir / 'mlp8_node.sqlite'}: no NVTX range 'nope' (ranges in this "
        "trace: capture@cgprof, eager@cgprof, graph@cgprof, step@cgprof)\n")


def test_json_is_valid_and_sorted(samples_dir, tmp_path):
    out = tmp_path / "a.json"
    res = CliRunner().invoke(main, ["analyze", str(samples_dir / "mlp8_graph.sqlite"),
                                    "--json", str(out)])
    assert res.exit_code == 0
    text = out.read_text()
    import json

    doc = json.loads(text)
    # whether the trace is complete comes first, then the keys in order
    assert list(doc) == ["completeness"] + sorted(k for k in doc if k != "completeness")
    assert doc["completeness"]["complete"] is True
    assert doc["replays"]["node_level"] is False
    assert doc["steps"]["steps"][25]["kernels"] is None
    assert len(pd.DataFrame(doc["steps"]["steps"])) == 40
