"""The analysis window, graph coverage per step, re-capture/fallback, and the what-if estimate.

Code-built traces with hand-checkable nanosecond values, and the project's real traces for
the window agreement and the estimate's accuracy against measured eager/graphed pairs.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from nsysdb import K, N, R, make_nsys_db

import cgprof
from cgprof.report import json_report, text

TRACES = Path(__file__).resolve().parents[1] / "traces"
LK = "cudaLaunchKernel_v7000"
GL = "cudaGraphLaunch_v10000"
STEP = 10_000  # step i runs on the host from i * STEP to i * STEP + 9_000


def _graph_step(b: int, corr: int, capture: bool = False) -> tuple[list, list]:
    """A partially graphed step at ``b``: one graph launch (2 nodes) + one eager launch."""
    rt, k = [], []
    if capture:  # a graph tree re-records: capture, instantiate, in steady state
        rt += [R(b + 10, b + 20, "cudaStreamBeginCapture_v10000", corr=corr + 5),
               R(b + 30, b + 40, LK, corr=corr + 6),
               R(b + 50, b + 60, "cudaStreamEndCapture_v10000", corr=corr + 7),
               R(b + 70, b + 90, "cudaGraphInstantiate_v12000", corr=corr + 8)]
    rt += [R(b + 100, b + 200, GL, corr=corr), R(b + 3000, b + 3500, LK, corr=corr + 1)]
    k += [K(b + 1000, b + 2000, "g1", corr=corr, graph_node=1),
          K(b + 2100, b + 3000, "g2", corr=corr, graph_node=2),
          K(b + 4000, b + 4500, "adam", corr=corr + 1)]
    return rt, k


@pytest.fixture(scope="module")
def partial(tmp_path_factory):
    """Step 0 captures; 1-2 replay a graph + launch one eager kernel (partial graph); 3
    re-captures and replays; 4 falls back to eager (no graph launch)."""
    rt = [R(100, 200, "cudaStreamBeginCapture_v10000", corr=1), R(300, 400, LK, corr=2),
          R(500, 600, "cudaStreamEndCapture_v10000", corr=3),
          R(700, 800, "cudaGraphInstantiate_v12000", corr=4)]
    kernels: list = []
    for i, capture in ((1, False), (2, False), (3, True)):
        r, k = _graph_step(i * STEP, 100 * i, capture)
        rt += r
        kernels += k
    b = 4 * STEP
    rt += [R(b + 100, b + 600, LK, corr=400), R(b + 3000, b + 3500, LK, corr=401)]
    kernels += [K(b + 1000, b + 2000, "g1", corr=400), K(b + 4000, b + 4500, "adam", corr=401)]
    nvtx = [N(i * STEP, i * STEP + 9_000, "step", domain="cgprof") for i in range(5)]
    path = make_nsys_db(tmp_path_factory.mktemp("cov") / "partial.sqlite", kernels=kernels,
                        runtime=rt, nvtx=nvtx, graph_trace_mode="node")
    return cgprof.analyze(path)


def test_step_columns_coverage_recapture_fallback(partial):
    st = partial.steps.steps
    assert st["mode"].tolist() == ["capture", "graph", "graph", "graph", "eager"]
    assert st["in_window"].tolist() == [False, True, True, True, True]
    assert st["recapture"].tolist() == [False, False, False, True, False]
    assert st["fallback"].tolist() == [False, False, False, False, True]
    assert st["graph_kernels"].tolist() == [0, 2, 2, 2, 0]
    assert st["eager_kernels"].tolist() == [0, 1, 1, 1, 2]
    assert st["graph_gpu_ns"].tolist() == [0, 1900, 1900, 1900, 0]
    assert st["eager_gpu_ns"].tolist() == [0, 500, 500, 500, 1500]
    # the launch inside the re-capture launches nothing: not counted
    assert st["kernel_launches"].tolist() == [0, 1, 1, 1, 2]
    assert str(st["graph_kernels"].dtype) == "Int64"


def test_coverage_summary_contract(partial):
    c = partial.coverage
    assert c.summary == {
        "steps": 4, "graph_kernel_share": 6 / 11, "graph_gpu_share": 5700 / 8700,
        "launch_calls_per_step_p50": 2.0, "kernel_launches_per_step_p50": 1.0,
        "graph_launches_per_step_p50": 1.0, "sync_calls_per_step_p50": 0.0,
        "memcpy_calls_per_step_p50": 0.0, "recaptures": 1, "fallbacks": 1, "partial_steps": 3,
    }
    assert c.recapture_steps == [3]
    assert c.fallback_steps == [4]
    top = c.eager_top
    assert top["name"].tolist() == ["adam", "g1"]
    assert top["kernels"].tolist() == [1.0, 0.25]
    assert top["gpu_ns"].tolist() == [500.0, 250.0]
    assert top["launch_api"].tolist() == ["cudaLaunchKernel", "cudaLaunchKernel"]
    assert top["launch_host_ns"].tolist() == [500.0, 125.0]
    # what partially graphed steps (1-3) still run eagerly, per step
    assert c.eager_per_step == {"kernel_launches": 1.0, "gpu_ns": 500.0,
                                "launch_host_ns": 500.0}


def test_verdict_says_partial_recapture_fallback(partial):
    lines = partial.verdict.lines
    assert ("graphed steps still launch 1 kernel eagerly per step (3 of 3 steps): 0.5 us of GPU "
            "outside replays, 0.5 us of host launch time: top: adam (1x, 0.5 us), g1 (0.25x, "
            "0.2 us)") in lines
    assert ("1 step re-captured a graph in steady state (steps 3); 1 step fell back to eager "
            "after graphs had replayed (steps 4)") in lines


def test_window_covers_steady_steps_only(partial):
    info = partial.info
    assert (info["window_start_ns"], info["window_end_ns"]) == (STEP, 4 * STEP + 9_000)
    assert info["window_steps"] == [1, 2, 3, 4]
    assert info["window_reason"] == "4 steady-state steps (left out: 1 capture)"
    dev = partial.gaps.devices.iloc[0]
    assert int(dev["window_ns"]) == 39_000
    assert int(dev["busy_ns"]) == 3 * 2400 + 1500
    launches = partial.launches.set_index("family")
    # step 0's capture calls and the re-capture's launch are not in the window's table
    assert int(launches.loc["kernel_launch", "calls"]) == 5
    assert int(launches.loc["graph_launch", "calls"]) == 3
    assert len(partial.replays.replays) == 3
    # the nsys-stats mirrors stay whole-trace
    assert int(partial.kernel_summary["instances"].sum()) == 11
    assert int(partial.api_summary["calls"].sum()) == 16


def test_json_carries_coverage(partial):
    doc = json_report.result_to_dict(partial)
    assert doc["coverage"]["summary"]["recaptures"] == 1
    assert doc["coverage"]["fallback_steps"] == [4]
    assert doc["coverage"]["eager_top"][0]["name"] == "adam"
    assert doc["summaries_scope"] == "whole trace, as nsys stats"
    assert doc["trace"]["window_steps"] == [1, 2, 3, 4]
    rendered = json_report.render([partial])
    assert '"graph_kernel_share"' in rendered


@pytest.fixture(scope="module")
def mlp_graph():
    return cgprof.analyze(TRACES / "mlp_train_graph.sqlite")


def test_verdict_and_gap_table_agree_on_real_graphed_trace(mlp_graph):
    """One window: the verdict's GPU busy and the gap table's idle describe the same steps."""
    busy = mlp_graph.verdict.graph_busy_pct_p50
    idle = float(mlp_graph.gaps.devices["idle_pct"].iloc[0])
    assert abs((100.0 - idle) - busy) < 5.0, (busy, idle)
    by_kind = mlp_graph.gaps.by_kind.set_index("kind")["share_pct"]
    assert by_kind["launch_bound"] < 50.0  # a graphed run does not look launch-bound
    # window steps: the 20 graphed ones; warm-up and capture are listed but not in it
    st = mlp_graph.steps.steps
    assert int(st["in_window"].sum()) == 20
    assert set(st.loc[~st["in_window"], "mode"]) == {"warmup", "capture"}
    launches = mlp_graph.launches.set_index("family")
    assert "kernel_launch" not in launches.index  # warm-up launches are outside the window
    assert int(launches.loc["graph_launch", "calls"]) == 20
    assert len(mlp_graph.replays.replays) == 20
    assert mlp_graph.coverage.summary["graph_kernel_share"] == 1.0
    # the nsys-stats mirror still counts every kernel of the trace
    assert int(mlp_graph.kernel_summary["instances"].sum()) == mlp_graph.info["kernels"]
    out = text.render(mlp_graph)
    assert "whole trace, as nsys stats" in out
    assert "20 steady-state steps (left out: 4 warmup, 1 capture)" in out


PAIRS = [("mlp_train_eager", "mlp_train_graph"), ("mlp_infer_eager", "mlp_infer_graph"),
         ("resnet18_train_eager", "resnet18_train_graph"),
         ("resnet18_infer_eager", "resnet18_infer_graph"),
         ("transformer_train_eager", "transformer_train_graph"),
         ("user_train", "user_train_graph")]  # every eager/graphed pair in traces/


@pytest.mark.parametrize(("eager", "graph"), PAIRS)
def test_estimate_within_25_percent_of_measured(eager, graph):
    e = cgprof.analyze(TRACES / f"{eager}.sqlite")
    g = cgprof.analyze(TRACES / f"{graph}.sqlite")
    measured = e.verdict.eager_step_p50_ns / g.verdict.graph_step_p50_ns
    est = e.verdict.estimated_speedup
    assert est is not None
    assert 0.75 * measured <= est <= 1.25 * measured, (eager, est, measured)


def test_estimate_prints_its_assumptions():
    r = cgprof.analyze(TRACES / "mlp_train_eager.sqlite")
    a = r.verdict.assumptions
    h = a["host_launch_ns"]
    assert 3_000 < h < 20_000  # measured from this trace's own cudaLaunchKernel calls
    assert a["graph_launch_per_node_ns"] == pytest.approx(0.18 * h)
    line = next(x for x in r.verdict.lines if x.strip().startswith("assumes:"))
    assert f"this host launches a kernel in {h / 1000:.1f} us (p50, window steps)" in line
    assert "nodes run back to back 0.42 us apart" in line
    assert "host work before each step's first launch stays" in line
    assert line in text.render(r)


def test_html_says_window_and_coverage(partial, mlp_graph):
    from cgprof.diff import view
    from cgprof.report import html

    page = html.render_single(partial)
    assert "Idle time by cause (analysis window: 4 steady-state steps (left out: 1 capture)):" \
        in page
    assert ('Graph coverage of the 4 window steps: kernels inside replays 54.5%, GPU time '
            'inside replays 65.5%; re-captures 1, fallbacks 1.') in page
    assert "Still eager in partially graphed steps" in page
    # the "GPU idle" tile and the gap table describe the same steady-state steps
    tile = view(mlp_graph).headline["gpu_idle_pct"]
    table_idle = float(mlp_graph.gaps.devices["idle_pct"].iloc[0])
    assert abs(tile - table_idle) < 5.0, (tile, table_idle)


def test_graph_granularity_trace_hides_replay_kernels():
    r = cgprof.analyze(TRACES / "mlp_train_graph_graphtrace.sqlite")
    win = r.steps.steps[r.steps.steps["in_window"]]
    assert win["graph_kernels"].isna().all()
    assert (win["eager_kernels"] == 0).all()
    assert (win["graph_gpu_ns"] > 0).all()  # busy time from the whole-replay rows
    assert r.coverage.summary["graph_kernel_share"] is None
    assert r.coverage.summary["graph_gpu_share"] > 0.9


def test_whole_trace_is_one_window_step(tmp_path):
    path = make_nsys_db(tmp_path / "w.sqlite",
                        kernels=[K(1000, 2000, "a", corr=1), K(3000, 3500, "b", corr=2)],
                        runtime=[R(100, 600, LK, corr=1), R(2000, 2400, LK, corr=2)])
    r = cgprof.analyze(path)
    assert r.info["window_reason"] == "the whole trace (no steps)"
    assert r.coverage.summary["steps"] == 1
    assert r.coverage.summary["graph_kernel_share"] == 0.0
    assert r.coverage.eager_top["name"].tolist() == ["a", "b"]
    assert r.coverage.eager_top["launch_host_ns"].tolist() == [500.0, 400.0]
    # the step is the whole trace: nothing to collapse into a replay, so no estimate
    assert "kept_host_ns_p50" not in r.verdict.assumptions
    assert "whole trace" in r.verdict.estimate_unavailable


def test_step_gaps_keep_warmup_gaps_for_views_of_every_step(mlp_graph):
    w0 = mlp_graph.info["window_start_ns"]
    assert (mlp_graph.gaps.gaps["start_ns"] >= w0).all()
    before = mlp_graph.step_gaps[mlp_graph.step_gaps["start_ns"] < w0]
    assert len(before) > 0
    from cgprof.diff import view

    warm = view(mlp_graph, mode="warmup")
    assert len(warm.gaps) > 0


def test_gpu_bound_step_estimate_is_no_speedup(tmp_path):
    """Two 1 ms kernels launched 5 us apart: the GPU is the bottleneck; graphs buy nothing."""
    path = make_nsys_db(
        tmp_path / "gpu_bound.sqlite",
        kernels=[K(10_000, 1_010_000, "big", corr=1), K(1_010_500, 2_010_500, "big", corr=2)],
        runtime=[R(1_000, 6_000, LK, corr=1), R(8_000, 13_000, LK, corr=2)],
        nvtx=[N(0, 2_011_000, "step", domain="cgprof")])
    r = cgprof.analyze(path)
    assert r.verdict.kind == "not launch-bound"
    # The step does not sync, so its graphed cost is the replay's GPU span: the two kernels
    # plus 420 ns per node (the model's gap per node), 2_000_840 ns, against its host range
    # of 2_011_000 ns (the GPU starts 10 us after it): within half a percent of no gain.
    assert 1.0 <= r.verdict.estimated_speedup < 1.006
    assert r.verdict.estimated_graph_step_ns == pytest.approx(2_000_000 + 2 * 420, abs=1)
    assert r.verdict.assumptions["host_launch_ns"] == 5_000.0
    assert r.verdict.assumptions["kept_host_ns_p50"] == 1_000.0
