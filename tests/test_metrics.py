"""Every metric on small code-built traces with hand-checkable nanosecond values."""

from __future__ import annotations

import pytest
from nsysdb import PID, G, K, M, N, R, S, Y, make_nsys_db

import cgprof
from cgprof.metrics.launches import family_of
from cgprof.schema import nsys_api_name, strip_version_suffix

LK = "cudaLaunchKernel_v7000"
GL = "cudaGraphLaunch_v10000"


@pytest.fixture
def db(tmp_path):
    n = iter(range(1000))

    def make(**tables):
        return make_nsys_db(tmp_path / f"t{next(n)}.sqlite", **tables)

    return make


# --- names and families ----------------------------------------------------------------


@pytest.mark.parametrize(("raw", "family"), [
    ("cudaLaunchKernel_v7000", "kernel_launch"),
    ("cudaLaunchKernelExC_v11060", "kernel_launch"),
    ("cuLaunchKernel", "kernel_launch"),
    ("cuLaunchKernelEx", "kernel_launch"),
    ("cudaLaunchCooperativeKernel_v9000", "kernel_launch"),
    ("cudaGraphLaunch_v10000", "graph_launch"),
    ("cuGraphLaunch", "graph_launch"),
    ("cudaGraphLaunch_ptsz_v10000", "graph_launch"),
    ("cudaLaunchHostFunc_v10000", "other"),
    ("cudaMemcpyAsync_v3020", "memcpy"),
    ("cudaMemsetAsync_v3020", "memset"),
    ("cudaStreamSynchronize_v3020", "sync"),
    ("cudaDeviceSynchronize_v3020", "sync"),
    ("cudaStreamBeginCapture_v10000", "graph_setup"),
    ("cudaGraphInstantiateWithFlags_v11040", "graph_setup"),
    ("cuGetProcAddress_v2", "other"),
])
def test_families(raw, family):
    assert family_of(strip_version_suffix(raw)) == family


def test_name_suffixes():
    assert strip_version_suffix("cudaGraphLaunch_v10000") == "cudaGraphLaunch"
    assert nsys_api_name("cudaGraphLaunch_v10000") == "cudaGraphLaunch_v10000"
    assert nsys_api_name("cudaLaunchKernel_v7000") == "cudaLaunchKernel"
    assert strip_version_suffix("cuGetProcAddress_v2") == "cuGetProcAddress"


# --- launches --------------------------------------------------------------------------


def test_launch_counts_skip_backtrace_rows_and_capture(db):
    p = db(runtime=[
        R(100, 110, LK, corr=1),
        R(100, 110, LK, corr=1, event_class=67),  # --cudabacktrace duplicate of the same call
        R(200, 210, "cudaStreamBeginCapture_v10000", corr=2),
        R(220, 230, LK, corr=3),  # captured: launches nothing
        R(240, 250, "cudaStreamEndCapture_v10000", corr=4),
        R(300, 340, GL, corr=5),
        R(400, 410, "cuLaunchKernel", corr=6, event_class=1),
    ], kernels=[K(120, 150, "k", corr=1), K(420, 450, "k", corr=6)])
    r = cgprof.analyze(p)
    fam = r.launches.set_index("family")
    assert fam.loc["kernel_launch", "calls"] == 2
    assert fam.loc["kernel_launch", "captured_calls"] == 1
    assert fam.loc["kernel_launch", "host_ns"] == 20
    assert fam.loc["graph_launch", "calls"] == 1
    assert fam.loc["graph_launch", "host_ns"] == 40
    assert fam.loc["graph_setup", "calls"] == 2
    # nsys's cuda_api_sum counts every RUNTIME row, backtrace duplicates included.
    api = r.api_summary.set_index("name")
    assert api.loc["cudaLaunchKernel", "calls"] == 3


# --- GPU gaps --------------------------------------------------------------------------


def test_overlapping_kernels_on_two_streams(db):
    p = db(kernels=[
        K(1000, 2000, "a", stream=7, corr=1),
        K(1500, 3000, "b", stream=8, corr=2),  # overlaps a
        K(3500, 4000, "c", stream=7, corr=3),  # gap 500 after b
    ], runtime=[R(900, 950, LK, corr=1), R(960, 990, LK, corr=2), R(3200, 3600, LK, corr=3)])
    r = cgprof.analyze(p)
    dev = r.gaps.devices.iloc[0]
    assert (dev["window_ns"], dev["busy_ns"], dev["idle_ns"]) == (3000, 2500, 500)
    assert r.gaps.gaps[["start_ns", "end_ns", "gap_ns"]].values.tolist() == [[3000, 3500, 500]]
    g = r.gaps.gaps.iloc[0]
    # c's launch call (3200..3600) was still running when the GPU went idle at 3000.
    assert g["kind"] == "launch_bound"
    assert (g["prev_stream_id"], g["next_stream_id"], g["next_api"]) == (8, 7, "cudaLaunchKernel")
    streams = r.gaps.streams.set_index("stream_id")
    assert streams.loc[7, "busy_ns"] == 1500 and streams.loc[7, "gaps_ns"] == 1500
    assert streams.loc[8, "busy_ns"] == 1500 and streams.loc[8, "gap_count"] == 0


def test_gaps_at_window_edges(db):
    # The step window is 0..10000; GPU work covers 2000..3000 and 5000..6000.
    p = db(nvtx=[N(0, 10000, "step", domain="cgprof")],
           runtime=[R(100, 200, LK, corr=1), R(4000, 4100, LK, corr=2)],
           kernels=[K(2000, 3000, "a", corr=1), K(5000, 6000, "b", corr=2)])
    r = cgprof.analyze(p)
    gaps = r.gaps.gaps[["start_ns", "end_ns", "kind"]].values.tolist()
    # b's launch call began at 4000, after the GPU went idle at 3000: the GPU waited on it.
    assert gaps == [[0, 2000, "window_edge"], [3000, 5000, "launch_bound"],
                    [6000, 10000, "window_edge"]]
    dev = r.gaps.devices.iloc[0]
    assert (dev["window_ns"], dev["busy_ns"], dev["idle_ns"]) == (10000, 2000, 8000)
    assert dev["idle_pct"] == pytest.approx(80.0)
    assert dev["gap_max_ns"] == 4000


def test_gap_causes(db):
    p = db(runtime=[
        R(0, 50, LK, corr=1),
        R(60, 900, "cudaStreamSynchronize_v3020", corr=2),  # host waits: GPU idles from 400
        R(910, 950, LK, corr=3),                              # -> sync_bound gap 400..1000
        R(960, 970, "cudaMemcpyAsync_v3020", corr=4),
        R(980, 990, GL, corr=5),                              # graph after a copy
        R(995, 999, GL, corr=6),
    ], kernels=[
        K(100, 400, "a", corr=1),
        K(1000, 1100, "b", corr=3),
        K(1300, 1400, "n1", corr=5, graph_node=1),
        K(1450, 1500, "n2", corr=5, graph_node=2),            # in_replay gap 1400..1450
        K(1600, 1700, "n1", corr=6, graph_node=1),            # between_replays 1500..1600
    ], memcpy=[M(1150, 1200, 4096, corr=4)],                  # input_copy gap 1200..1300
        sync=[Y(60, 900, corr=2)])
    r = cgprof.analyze(p)
    got = r.gaps.gaps[["start_ns", "end_ns", "kind"]].values.tolist()
    assert got == [
        [400, 1000, "sync_bound"],
        [1100, 1150, "other"],  # the copy was queued (call 960..970) before the GPU idled
        [1200, 1300, "input_copy"],
        [1400, 1450, "in_replay"],
        [1500, 1600, "between_replays"],
    ]


@pytest.mark.parametrize("first", ["before", "inside"])
def test_sync_bound_whatever_the_order_of_syncs_ending_together(db, first):
    """Two sync calls of the process end at the same ns: one began before the GPU idled,
    one after. The gap waited on a sync either way, whichever row comes first (the tie
    was left to a quicksort's order, which is not portable across CPUs)."""
    before = R(60, 900, "cudaStreamSynchronize_v3020", corr=2)
    inside = R(500, 900, "cudaStreamSynchronize_v3020", corr=7, tid=PID + 1)
    syncs = [before, inside] if first == "before" else [inside, before]
    p = db(runtime=[R(0, 50, LK, corr=1), *syncs, R(910, 950, LK, corr=3)],
           kernels=[K(100, 400, "a", corr=1), K(1000, 1100, "b", corr=3)],
           sync=[Y(60, 900, corr=2), Y(500, 900, corr=7)])
    r = cgprof.analyze(p)
    assert r.gaps.gaps[["start_ns", "end_ns", "kind"]].values.tolist() == [
        [400, 1000, "sync_bound"]]


def test_min_gap_filter_keeps_idle_totals(db):
    p = db(runtime=[R(0, 10, LK, corr=1), R(0, 10, LK, corr=2), R(0, 10, LK, corr=3)],
           kernels=[K(100, 200, "a", corr=1), K(201, 300, "a", corr=2),
                    K(5300, 5400, "a", corr=3)])
    r = cgprof.analyze(p, min_gap_us=2)
    assert r.gaps.gaps["gap_ns"].tolist() == [5000]
    assert r.gaps.devices.iloc[0]["idle_ns"] == 5001


def test_graph_mode_busy_comes_from_replay_rows(db):
    p = db(graph_trace_mode="graph",
           runtime=[R(0, 20, GL, corr=1), R(30, 40, GL, corr=2)],
           graph_trace=[G(100, 400, corr=1), G(450, 800, corr=2)])
    r = cgprof.analyze(p)
    dev = r.gaps.devices.iloc[0]
    assert (dev["busy_ns"], dev["idle_ns"]) == (650, 50)
    rep = r.replays.replays
    assert rep["span_ns"].tolist() == [300, 350]
    assert rep["latency_ns"].tolist() == [100, 420]
    assert rep["nodes"].isna().all() and rep["compactness"].isna().all()


# --- graph replays ---------------------------------------------------------------------


def test_graph_launch_with_zero_kernels_in_trace(db):
    p = db(graph_trace_mode="node",
           runtime=[R(0, 30, GL, corr=1), R(50, 70, GL, corr=2)],
           kernels=[K(100, 200, "n1", corr=1, graph_node=1),
                    K(210, 300, "n2", corr=1, graph_node=2)])
    r = cgprof.analyze(p)
    rep = r.replays.replays
    assert len(rep) == 2
    first = rep.iloc[0]
    assert (first["nodes"], first["span_ns"], first["busy_ns"], first["gaps_ns"]) == (
        2, 200, 190, 10)
    assert first["compactness"] == pytest.approx(0.95)
    assert first["latency_ns"] == 100 and first["api_dur_ns"] == 30
    assert first["max_gap_ns"] == 10 and first["median_gap_ns"] == 10
    # The second launch's work is not in the trace: unknown, not zero.
    assert rep["nodes"].isna().tolist() == [False, True]
    assert rep["span_ns"].isna().tolist() == [False, True]
    assert rep["compactness"].isna().tolist() == [False, True]


def test_replay_mean_node_and_what_precedes_its_longest_gap(db):
    # Replay 1: kernel, memset, then a kernel that waits 4 us for the memset; replay 2: two
    # kernels 50 ns apart. Replay 3's one node has no gap at all.
    p = db(graph_trace_mode="node",
           runtime=[R(0, 10, GL, corr=1), R(20, 30, GL, corr=2), R(40, 50, GL, corr=3)],
           kernels=[K(100, 400, "a", corr=1, graph_node=1),
                    K(5000, 5600, "b", corr=1, graph_node=3),
                    K(6000, 6100, "a", corr=2, graph_node=1),
                    K(6150, 6250, "b", corr=2, graph_node=2),
                    K(7000, 7300, "a", corr=3, graph_node=1)],
           memset=[S(700, 1000, 8, corr=1, graph_node=2)])
    rep = cgprof.analyze(p).replays.replays
    assert rep["nodes"].tolist() == [3, 2, 1]
    assert rep["mean_node_ns"].tolist() == [pytest.approx(1200 / 3), 100.0, 300.0]
    assert rep["max_gap_ns"].tolist() == [4000, 50, 0]
    assert rep["longest_gap_after"].tolist()[:2] == ["memset", "kernel"]
    assert rep["longest_gap_after"].isna().tolist() == [False, False, True]


def test_two_processes_with_the_same_correlation_id(db):
    p = db(graph_trace_mode="node", runtime=[
        R(0, 10, GL, corr=7, pid=100), R(0, 10, GL, corr=7, pid=200)],
        kernels=[K(100, 200, "x", corr=7, pid=100, graph_node=1),
                 K(300, 310, "y", corr=7, pid=200, graph_node=1, device=1),
                 K(320, 330, "y", corr=7, pid=200, graph_node=2, device=1)])
    r = cgprof.analyze(p)
    rep = r.replays.replays.set_index("pid")
    assert rep.loc[100, "nodes"] == 1 and rep.loc[100, "span_ns"] == 100
    assert rep.loc[200, "nodes"] == 2 and rep.loc[200, "span_ns"] == 30
    assert rep.loc[200, "device_id"] == 1
    assert sorted(r.gaps.devices["device_id"].tolist()) == [0, 1]


def test_launch_cost_model(db):
    runtime, kernels = [], []
    for i, (nodes, dur) in enumerate([(1, 11_000), (2, 12_000), (4, 14_000)]):
        t = i * 100_000
        runtime.append(R(t, t + dur, GL, corr=i + 1))
        kernels += [K(t + 20_000 + j * 100, t + 20_000 + j * 100 + 50, "n", corr=i + 1,
                      graph_node=j + 1) for j in range(nodes)]
    r = cgprof.analyze(db(runtime=runtime, kernels=kernels, graph_trace_mode="node"))
    cm = r.replays.cost_model
    assert cm["fixed_ns"] == pytest.approx(10_000)
    assert cm["per_node_ns"] == pytest.approx(1_000)


# --- steps and NVTX ----------------------------------------------------------------------


def test_steps_attribute_work_by_launch_call(db):
    p = db(nvtx=[
        N(0, 1000, "step", domain="cgprof", payload=0),
        N(10, 500, "forward", domain="cgprof"),  # nested, not a step
        N(1000, 2000, "step", domain="cgprof", payload=1),
    ], runtime=[
        R(20, 30, LK, corr=1), R(40, 50, LK, corr=2),     # step 0
        R(1100, 1150, GL, corr=3),                         # step 1
    ], kernels=[
        K(100, 300, "a", corr=1), K(400, 500, "b", corr=2),
        # launched in step 1, runs after its host range ended:
        K(2100, 2200, "n", corr=3, graph_node=1), K(2250, 2300, "n", corr=3, graph_node=2),
    ])
    r = cgprof.analyze(p)
    st = r.steps.steps
    assert r.steps.name == "cgprof:step" and r.steps.source == "default"
    assert st["payload"].tolist() == [0, 1]
    assert st["kernel_launches"].tolist() == [2, 0]
    assert st["graph_launches"].tolist() == [0, 1]
    assert st["kernels"].tolist() == [2, 2]
    assert st["mode"].tolist() == ["eager", "graph"]
    assert st["gpu_span_ns"].tolist() == [400, 200]
    assert st["gpu_busy_ns"].tolist() == [300, 150]
    assert st["effective_ns"].tolist() == [1000, 1000]
    assert st["launch_host_ns"].tolist() == [20, 50]
    assert st["compactness"].tolist() == [pytest.approx(0.75), pytest.approx(0.75)]


def test_steps_only_take_calls_of_their_own_thread(db):
    p = db(nvtx=[N(0, 1000, "step", domain="cgprof", tid=1), N(0, 1000, "step", domain="cgprof",
                                                                tid=2)],
           runtime=[R(10, 20, LK, corr=1, tid=1), R(30, 40, LK, corr=2, tid=2),
                    R(50, 60, LK, corr=3, tid=2), R(70, 80, LK, corr=4, tid=3)],
           kernels=[K(100, 110, "a", corr=1), K(120, 130, "a", corr=2),
                    K(140, 150, "a", corr=3), K(160, 170, "a", corr=4)])
    st = cgprof.analyze(p).steps.steps.sort_values("tid")
    assert st["tid"].tolist() == [1, 2]
    assert st["kernel_launches"].tolist() == [1, 2]


def test_cross_thread_start_end_range_counts_in_nvtx_summary(db):
    p = db(nvtx=[N(0, 500, "io", event_type=60, tid=1, end_tid=2),
                 N(10, 20, "mark", event_type=34)],
           runtime=[R(1, 2, "cudaMalloc_v3020")])
    r = cgprof.analyze(p)
    s = r.nvtx_summary.set_index("name")
    # nsys names default-domain ranges ":text" in nvtx_sum.
    assert s.loc[":io", "style"] == "StartEnd" and s.loc[":io", "total_ns"] == 500
    assert ":mark" not in s.index


def test_scored_range_when_no_cgprof_step(db):
    p = db(nvtx=[N(0, 100, "iter"), N(100, 200, "iter"), N(200, 300, "iter"), N(0, 300, "all")],
           runtime=[R(10, 20, LK, corr=1), R(110, 120, LK, corr=2)],
           kernels=[K(30, 40, "a", corr=1), K(130, 140, "a", corr=2)])
    r = cgprof.analyze(p)
    assert (r.steps.name, r.steps.source) == ("iter", "scored")
    assert r.steps.steps["kernel_launches"].tolist() == [1, 1, 0]
    assert r.steps.steps["group"].tolist() == ["all", "all", "all"]


def test_registered_strings_and_domains(db):
    p = db(nvtx=[N(0, 100, "step", domain="cgprof", registered=True),
                 N(0, 100, "step", domain="other"), N(200, 300, "step")],
           runtime=[R(1, 2, "cudaMalloc_v3020")])
    r = cgprof.analyze(p, step="step@other")
    assert r.steps.name == "other:step" and len(r.steps.steps) == 1
    names = sorted(r.nvtx_summary["name"])
    assert names == [":step", "cgprof:step", "other:step"]
    assert len(cgprof.analyze(p).steps.steps) == 1  # default: step@cgprof


def test_no_nvtx_is_one_whole_trace_step(db):
    p = db(runtime=[R(0, 10, LK, corr=1)], kernels=[K(20, 30, "a", corr=1)])
    r = cgprof.analyze(p)
    assert r.steps.source == "whole-trace" and r.steps.name is None
    assert r.steps.steps["kernel_launches"].tolist() == [1]
    assert r.steps.steps["dur_ns"].tolist() == [30]


def test_no_kernels(db):
    p = db(nvtx=[N(0, 100, "step", domain="cgprof")], runtime=[R(10, 20, "cudaMalloc_v3020")])
    r = cgprof.analyze(p)
    assert r.kernel_summary.empty
    assert r.gaps.devices.empty and r.gaps.gaps.empty
    assert r.steps.steps["gpu_busy_ns"].tolist() == [0]
    assert r.replays.replays.empty


def test_no_runtime_table(db):
    # Kernels ran, but the calls that launched them are gone: no launch verdict can be honest
    # (it once said "if graphed ~104.8x"), so the trace is refused (see cgprof/validate.py).
    from cgprof.errors import TraceError

    p = db(kernels=[K(0, 100, "a", corr=1), K(300, 400, "a", corr=2)])
    with pytest.raises(TraceError) as info:
        cgprof.analyze(p)
    assert str(info.value) == (
        f"{p}: GPU activity (2 rows of CUPTI_ACTIVITY_KIND_KERNEL) but no table "
        "CUPTI_ACTIVITY_KIND_RUNTIME of the CUDA API calls that launched it, so launch overhead "
        "cannot be judged; is the file damaged or cut down? Re-export it with "
        "`nsys export --type sqlite`")


@pytest.mark.parametrize("variant", ["2021", "2022", "2025", "2026"])
def test_older_export_layouts(db, variant):
    p = db(variant=variant, nvtx=[N(0, 1000, "step", domain="cgprof")],
           runtime=[R(10, 20, LK, corr=1)], kernels=[K(100, 200, "a", corr=1)])
    r = cgprof.analyze(p)
    assert r.kernel_summary.iloc[0]["total_ns"] == 100
    assert r.steps.steps["kernel_launches"].tolist() == [1]
    if variant == "2021":
        assert r.info["nsys_version"] is None


def test_skip_too_many(db):
    from cgprof.errors import AnalysisError

    p = db(nvtx=[N(0, 10, "step", domain="cgprof")], runtime=[R(1, 2, LK, corr=1)],
           kernels=[K(3, 5, "a", corr=1)])
    with pytest.raises(AnalysisError, match="--skip 1 leaves no steps"):
        cgprof.analyze(p, skip=1)


def test_calls_on_threads_without_steps_join_the_step_in_time(db):
    # PyTorch's autograd thread (tid 2) launches the backward pass inside the main thread's
    # step; a second process's calls never join this process's steps.
    p = db(nvtx=[N(0, 1000, "step", domain="cgprof", tid=1),
                 N(1000, 2000, "step", domain="cgprof", tid=1)],
           runtime=[R(10, 20, LK, corr=1, tid=1), R(300, 310, LK, corr=2, tid=2),
                    R(1300, 1310, LK, corr=3, tid=2), R(2500, 2510, LK, corr=4, tid=2),
                    R(400, 410, LK, corr=5, pid=200)],
           kernels=[K(100, 110, "fwd", corr=1), K(400, 410, "bwd", corr=2),
                    K(1400, 1410, "bwd", corr=3), K(2600, 2610, "late", corr=4),
                    K(500, 510, "other", corr=5, pid=200)])
    st = cgprof.analyze(p).steps.steps
    assert st["kernel_launches"].tolist() == [2, 1]
    assert st["kernels"].tolist() == [2, 1]
