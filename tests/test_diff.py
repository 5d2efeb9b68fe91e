"""cgprof.diff and `cgprof diff`: real sample traces (exact cells) and code-built traces."""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from nsysdb import K, N, R

import cgprof
from cgprof.cli import main
from cgprof.diff import GAP_BIN_EDGES_US, DiffResult, view
from cgprof.diff_options import parse_labels, parse_modes, parse_steps
from cgprof.errors import AnalysisError, CgprofError

TRACES = Path(__file__).resolve().parents[1] / "traces"
ALL_TRACES = sorted(TRACES.glob("*.sqlite"))
PROBLEMS = {"missing", "extra", "fewer", "more", "slower"}


@pytest.fixture(scope="module")
def eager_vs_graph(node):
    return cgprof.diff(node, node, labels=("eager", "graph"), modes=("eager", "graph"))


# --- one trace, eager steps vs graphed steps (mlp8_node) -------------------------------------


def test_headline_launch_collapse_16_to_1(eager_vs_graph, node):
    d = eager_vs_graph
    ha, hb = d.headline["baseline"], d.headline["candidate"]
    assert (ha["steps"], hb["steps"]) == (20, 20)
    assert (ha["first_step"], ha["last_step"], hb["first_step"], hb["last_step"]) == (0, 19, 20, 39)
    assert (ha["mode"], hb["mode"]) == ("eager", "graph")
    assert ha["launch_calls_per_step"] == 16.0
    assert hb["launch_calls_per_step"] == 1.0
    assert ha["api_calls_per_step"] == 24.0
    assert hb["api_calls_per_step"] == 2.0
    assert ha["step_p50_ns"] == 410116.5
    assert hb["step_p50_ns"] == 61856.0
    # The same numbers as the single-trace verdict, which measures eager vs graphed steps too.
    assert ha["step_p50_ns"] == node.verdict.eager_step_p50_ns
    assert hb["step_p50_ns"] == node.verdict.graph_step_p50_ns
    assert d.headline["speedup"] == pytest.approx(node.verdict.measured_speedup, rel=1e-12)
    assert d.headline["speedup"] == pytest.approx(410116.5 / 61856.0, rel=1e-12)
    assert (ha["replays"], hb["replays"]) == (0, 20)
    assert ha["replay_compactness_p50"] is None
    comp = node.replays.replays["compactness"].astype(float)
    assert hb["replay_compactness_p50"] == pytest.approx(float(np.median(comp)), rel=1e-12)
    assert (ha["kernels_per_step"], hb["kernels_per_step"]) == (16.0, 16.0)
    assert (ha["hidden_steps"], hb["hidden_steps"]) == (0, 0)


def test_gpu_idle_pct_is_step_time_minus_busy(eager_vs_graph, node):
    st = node.steps.steps
    for h, mode in ((eager_vs_graph.headline["baseline"], "eager"),
                    (eager_vs_graph.headline["candidate"], "graph")):
        s = st[st["mode"] == mode]
        eff, busy = int(s["effective_ns"].sum()), int(s["gpu_busy_ns"].sum())
        assert h["gpu_idle_pct"] == pytest.approx(100.0 * (eff - busy) / eff, rel=1e-12)


def test_verdict_lines(eager_vs_graph):
    assert eager_vs_graph.lines == [
        "graph is 6.63x faster per step than eager: 410.1 us -> 61.9 us (p50)",
        "launch calls per step 16 -> 1; GPU idle 87.5% -> 11.1% of step time; replay "
        "compactness p50 no replays -> 0.932",
        "work check: same kernels per step in both (2 kernel names)",
    ]


def test_aligned_steps_table(eager_vs_graph, node):
    s = eager_vs_graph.steps
    assert list(s["i"]) == list(range(20))
    assert list(s["base_step"]) == list(range(20))
    assert list(s["cand_step"]) == list(range(20, 40))
    assert set(s["base_mode"]) == {"eager"} and set(s["cand_mode"]) == {"graph"}
    st = node.steps.steps
    assert list(s["base_effective_ns"]) == list(st["effective_ns"][:20])
    assert list(s["cand_effective_ns"]) == list(st["effective_ns"][20:])
    assert list(s["delta_ns"]) == list(s["cand_effective_ns"] - s["base_effective_ns"])
    assert s.loc[0, "base_effective_ns"] == 664141
    assert s.loc[1, "cand_effective_ns"] == 61888
    assert s.loc[1, "speedup"] == pytest.approx(405791 / 61888)
    assert set(s["base_launch_calls"]) == {16} and set(s["cand_launch_calls"]) == {1}
    assert set(s["base_kernels"]) == {16} and set(s["cand_kernels"]) == {16}


def test_families_side_by_side(eager_vs_graph):
    f = eager_vs_graph.families.set_index("family")
    assert list(f.index) == ["kernel_launch", "graph_launch", "other"]
    assert (f.at["kernel_launch", "base_calls"], f.at["kernel_launch", "cand_calls"]) == (320, 0)
    assert (f.at["graph_launch", "base_calls"], f.at["graph_launch", "cand_calls"]) == (0, 20)
    assert f.at["kernel_launch", "base_per_step"] == 16.0
    assert f.at["graph_launch", "cand_per_step"] == 1.0
    # Host time of the 20 cudaGraphLaunch calls: every one of the trace's graph launches.
    assert f.at["graph_launch", "cand_host_ns"] == 561165


def test_work_check_same_kernels(eager_vs_graph):
    w = eager_vs_graph.work
    assert list(w["status"]) == ["same", "same"]
    assert list(w["base_per_step"]) == [8.0, 8.0]
    assert list(w["cand_per_step"]) == [8.0, 8.0]
    assert list(w["base_instances"]) == [160, 160]
    assert w.loc[0, "name"].startswith("void cutlass::Kernel2<")


def test_gap_histogram_counts_window_gaps(eager_vs_graph, node):
    h = eager_vs_graph.gap_hist
    assert list(h["bin_lo_us"]) == list(GAP_BIN_EDGES_US[:-1])
    assert GAP_BIN_EDGES_US[0] == 0.01 and GAP_BIN_EDGES_US[-1] == 1e6
    gaps = node.gaps.gaps
    inner = gaps[gaps["kind"].astype(str) != "window_edge"]
    # Both windows together cover the analysed window: every inner gap is counted once.
    assert int(h["base_count"].sum() + h["cand_count"].sum()) == len(inner)
    a = eager_vs_graph.baseline.gaps
    assert int(h["base_count"].sum()) == int((a["kind"].astype(str) != "window_edge").sum())


# --- node vs graph granularity -----------------------------------------------------------------


def test_graph_granularity_kernels_are_unknown_not_missing(node, graph):
    d = cgprof.diff(node, graph, labels=("eager", "graph"), modes=("eager", "graph"))
    assert set(d.work["status"]) == {"unknown"}
    assert d.work["cand_per_step"].isna().all()
    assert d.headline["candidate"]["hidden_steps"] == 20
    assert d.headline["candidate"]["kernels_per_step"] is None
    assert d.headline["candidate"]["replay_compactness_p50"] is None
    assert d.headline["candidate"]["replays"] == 20
    assert d.headline["candidate"]["launch_calls_per_step"] == 1.0
    assert d.lines[2] == ("work check: 2 unknown (replayed kernels not in the graph trace: "
                          "graph-granularity) of 2 kernel names")
    assert "replay compactness p50 no replays -> unknown (graph-granularity trace)" in d.lines[1]


def test_graph_granularity_baseline_is_unknown_not_extra(node, graph):
    d = cgprof.diff(graph, node, modes=("graph", "graph"))
    assert set(d.work["status"]) == {"unknown"}
    assert d.work["base_per_step"].isna().all()


def test_node_vs_graph_eager_steps_same_work(node, graph):
    d = cgprof.diff(node, graph, modes=("eager", "eager"))
    assert list(d.work["status"]) == ["same", "same"]
    assert d.headline["baseline"]["launch_calls_per_step"] == 16.0
    assert d.headline["candidate"]["launch_calls_per_step"] == 16.0


def test_mixed_window_gets_a_note(node, graph):
    d = cgprof.diff(node, graph)
    assert d.headline["baseline"]["mode"] == "mixed"
    assert d.lines[-1] == ("note: the candidate window mixes eager and graphed steps; compare like "
                           "with like with --mode eager,graph or --steps A:B,C:D")


# --- windows ----------------------------------------------------------------------------------


def test_steps_slice_both_and_per_run(node):
    d = cgprof.diff(node, node, steps=slice(2, 5))
    assert list(d.steps["base_step"]) == [2, 3, 4]
    assert list(d.steps["cand_step"]) == [2, 3, 4]
    assert d.headline["speedup"] == 1.0
    assert d.lines[0].startswith("candidate takes the same time per step as baseline")
    d = cgprof.diff(node, node, steps=(slice(0, 3), slice(20, 25)))
    assert len(d.steps) == 5
    assert list(d.steps["base_step"].astype(object).fillna(-1)) == [0, 1, 2, -1, -1]
    assert list(d.steps["cand_step"]) == [20, 21, 22, 23, 24]
    assert d.steps["delta_ns"].isna().sum() == 2


def test_mode_then_slice(node):
    v = view(node, "g", steps=slice(1, 3), mode="graph")
    assert list(v.steps["step"]) == [21, 22]
    assert (v.first, v.stop, v.total_steps) == (1, 3, 20)
    assert v.describe() == "steps 21-22 (2 of 40, graph steps only)"


def test_empty_window_errors(node):
    with pytest.raises(AnalysisError) as e:
        cgprof.diff(node, node, steps=slice(50, 60))
    assert str(e.value) == (f"baseline ({node.info['path']}): --steps 50:60 selects no steps; "
                            f"it has 40 steps (positions 0-39)")
    with pytest.raises(CgprofError) as e:
        cgprof.diff(node, node, labels=("x", "x"))
    assert str(e.value) == "labels must differ (both are 'x')"


def test_parse_options():
    assert parse_steps(None) == (None, None)
    assert parse_steps("2:5") == (slice(2, 5), slice(2, 5))
    assert parse_steps(":5,20:") == (slice(None, 5), slice(20, None))
    assert parse_labels("eager, graph") == ("eager", "graph")
    assert parse_modes("eager,graph") == ("eager", "graph")
    assert parse_modes("graph") == ("graph", "graph")
    assert parse_modes("all,graph") == ("all", "graph")
    assert parse_modes("warmup,capture") == ("warmup", "capture")
    for text, msg in (
        ("5-9", "--steps '5-9': expected A:B (0-based step positions, B exclusive), e.g. "
                "--steps 0:10, or A:B,C:D for baseline and candidate"),
        ("3:1", "--steps '3:1': B must be greater than A (B is exclusive)"),
        ("-1:4", "--steps '-1:4': positions must be 0 or more"),
        ("1:2,3:4,5:6", "--steps '1:2,3:4,5:6': give one window A:B, or two: A:B,C:D"),
    ):
        with pytest.raises(CgprofError) as e:
            parse_steps(text)
        assert str(e.value) == msg
    with pytest.raises(CgprofError, match=r"^--labels 'a': expected two names"):
        parse_labels("a")
    with pytest.raises(CgprofError, match=r"^--mode 'foo': expected eager, graph, warmup, capture "
                                          r"or all"):
        parse_modes("foo")


def test_cgprof_diff_stays_callable_after_module_import(node):
    import cgprof.diff as mod

    assert isinstance(cgprof.diff(node, node, steps=slice(0, 1)), DiffResult)
    assert isinstance(mod.diff(node, node, steps=slice(0, 1)), DiffResult)


def test_to_dict_is_json(eager_vs_graph):
    doc = eager_vs_graph.to_dict()
    text = json.dumps(doc, sort_keys=True, allow_nan=False)
    back = json.loads(text)
    assert back["schema_version"] == 2
    assert back["kind"] == "cgprof.diff"
    assert back["labels"] == ["eager", "graph"]
    assert back["baseline"]["headline"]["launch_calls_per_step"] == 16.0
    assert back["candidate"]["headline"]["launch_calls_per_step"] == 1.0
    assert len(back["steps"]) == 20
    assert back["steps"][0]["base_effective_ns"] == 664141
    assert back["work"][0]["status"] == "same"


# --- code-built traces: missing, extra, more, slower -----------------------------------------


def _trace(make_db, kernels: list[tuple[str, int]], steps: int = 3, period: int = 100_000):
    """`steps` cgprof:step ranges, each launching `kernels` (name, duration ns) in order."""
    ks, rs, ns = [], [], []
    corr = 1
    for s in range(steps):
        t = 1_000_000 + s * period
        ns.append(N(t, t + period - 1000, "step", domain="cgprof"))
        host, gpu = t + 1000, t + 5000
        for name, dur in kernels:
            rs.append(R(host, host + 2000, "cudaLaunchKernel_v7000", corr=corr))
            ks.append(K(gpu, gpu + dur, name, corr=corr))
            host += 3000
            gpu = max(gpu + dur + 500, host + 1000)
            corr += 1
    return make_db(kernels=ks, runtime=rs, nvtx=ns, gpus=[(0, "Test GPU")],
                   graph_trace_mode="node")


def test_work_check_statuses(make_db):
    a = cgprof.analyze(_trace(make_db, [("gemm<float>", 4000), ("relu", 1000), ("bias", 500),
                                        ("copy", 800)]))
    b = cgprof.analyze(_trace(make_db, [("gemm<float>", 9000), ("relu", 1000), ("relu", 1000),
                                        ("copy", 300), ("softmax", 700)]))
    d = cgprof.diff(a, b, labels=("before", "after"))
    got = {r.name: (r.status, r.base_per_step, r.cand_per_step) for r in d.work.itertuples()}
    assert got == {
        "bias": ("missing", 1.0, 0.0),
        "softmax": ("extra", 0.0, 1.0),
        "relu": ("more", 1.0, 2.0),
        "gemm<float>": ("slower", 1.0, 1.0),
        "copy": ("faster", 1.0, 1.0),
    }
    assert list(d.work["status"]) == ["missing", "extra", "more", "slower", "faster"]
    g = d.work.set_index("name").loc["gemm<float>"]
    assert (g["base_avg_ns"], g["cand_avg_ns"], g["avg_ratio"]) == (4000.0, 9000.0, 2.25)
    assert d.lines[2] == "work check: 1 missing, 1 extra, 1 more, 1 slower of 5 kernel names"
    assert d.headline["baseline"]["kernels_per_step"] == 4.0
    assert d.headline["candidate"]["kernels_per_step"] == 5.0
    assert d.headline["baseline"]["launch_calls_per_step"] == 4.0


# --- every trace in traces/ ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def analysed():
    cache: dict[Path, object] = {}

    def get(path: Path):
        if path not in cache:
            cache[path] = cgprof.analyze(path)
        return cache[path]

    return get


@pytest.mark.parametrize("path", ALL_TRACES, ids=[p.name for p in ALL_TRACES])
def test_identity_diff_on_every_trace(path, analysed):
    r = analysed(path)
    d = cgprof.diff(r, r)
    assert d.headline["speedup"] == 1.0
    assert not (set(d.work["status"]) & PROBLEMS)
    assert d.headline["baseline"] == d.headline["candidate"]
    assert (d.steps["delta_ns"] == 0).all()
    # By default the steady-state steps, as the verdict; per-step numbers straight from them.
    st = r.steps.steps
    steady = st[st["mode"].isin(["eager", "graph"])]
    steady = steady if len(steady) else st
    assert d.baseline.left_out == len(st) - len(steady)
    assert list(d.steps["base_step"]) == list(steady["step"])
    assert list(d.steps["base_effective_ns"]) == list(steady["effective_ns"])
    every = cgprof.diff(r, r, modes=("all", "all"))
    assert list(every.steps["base_step"]) == list(st["step"])


@pytest.mark.parametrize("path", ALL_TRACES, ids=[p.name for p in ALL_TRACES])
def test_window_gaps_made_when_read(path, analysed):
    """A view's gaps are made only when read (a report reads only their histogram): the
    same rows as selecting them at once, and the same histogram as binning those rows."""
    r = analysed(path)
    for mode in (None, "all"):
        v = view(r, mode=mode)
        assert "gaps" not in v.__dict__  # not made yet: the view and its histogram did not
        g = r.step_gaps
        ext = np.maximum.accumulate(v.steps["extent_end_ns"].to_numpy(np.int64))
        t = g["start_ns"].to_numpy(np.int64)
        j = np.searchsorted(v.steps["start_ns"].to_numpy(np.int64), t, "right") - 1
        inside = (j >= 0) & (t < ext[np.maximum(j, 0)])
        want = g[inside].assign(step=v.steps["step"].to_numpy()[j[inside]]).reset_index(
            drop=True)
        pd.testing.assert_frame_equal(v.gaps, want)
        assert v.gaps is v.gaps  # made once
        inner = want[want["kind"].astype(str) != "window_edge"]["gap_ns"].to_numpy(np.float64)
        edges = np.array(GAP_BIN_EDGES_US)
        b = np.clip(np.searchsorted(edges, inner / 1000.0, "right") - 1, 0, len(edges) - 2)
        assert list(v.gap_hist["count"]) == list(np.bincount(b, minlength=len(edges) - 1))
        total = np.bincount(b, weights=inner, minlength=len(edges) - 1).astype(np.int64)
        assert list(v.gap_hist["total_ns"]) == list(total)


#: Eager traces recorded with cudnn.benchmark on (make_traces.sh): their graphed twin may use
#: other convolution kernels.
#: Eager runs that free their gradients each step, where the graphed twin keeps them.
KEPT_GRADS = {"plain_train_eager"}
AUTOTUNED = {"resnet18_infer_eager"}
#: Eager traces whose graphed twin captured RNG ops (dropout).
RNG_GRAPHS = {"transformer_train_eager"}


def _pairs() -> list[tuple[Path, Path]]:
    """(eager, graph) trace pairs named alike, e.g. resnet_eager.sqlite / resnet_graph.sqlite."""
    out = []
    for p in ALL_TRACES:
        if "eager" in p.stem:
            for other in ("graph", "graphed", "cudagraph"):
                q = p.with_name(p.name.replace("eager", other))
                if q.exists() and q != p:
                    out.append((p, q))
                    break
    return out


@pytest.mark.parametrize("pair", _pairs(), ids=[f"{a.stem}-vs-{b.stem}" for a, b in _pairs()])
def test_eager_vs_graphed_pairs(pair, analysed):
    a, b = analysed(pair[0]), analysed(pair[1])
    d = cgprof.diff(a, b, labels=("eager", "graph"))
    ha, hb = d.headline["baseline"], d.headline["candidate"]
    assert hb["launch_calls_per_step"] <= ha["launch_calls_per_step"]
    assert d.headline["speedup"] == pytest.approx(ha["step_p50_ns"] / hb["step_p50_ns"])
    assert (ha["mode"], hb["mode"]) == ("eager", "graph")
    assert len(d.steps) == max(len(d.baseline.steps), len(d.candidate.steps))
    # Steady-state steps run the same kernels, eager or replayed (node-granularity traces).
    # Exception: traces recorded with cuDNN autotuning on (resnet18_infer, the benchmark's
    # settings) ran in separate processes whose autotuner may pick other convolution tiles;
    # the diff must then name only convolution kernels, and as many of them in all.
    changed = d.work[d.work["status"].isin(["missing", "extra", "fewer", "more"])]
    if pair[0].stem in RNG_GRAPHS:
        # CUDAGraph.replay() of a graph that captured RNG ops (the Transformer's dropout)
        # first fills the graph's philox seed and offset: two int64 fill kernels per replay,
        # launched outside the graph, which the eager run never needs.
        fills = changed["name"].str.contains("FillFunctor<long>", regex=False)
        assert fills.all(), list(changed["name"])
        assert list(changed["status"]) == ["extra"]
        assert changed["cand_per_step"].tolist() == [2.0]
        changed = changed[~fills]
    if pair[0].stem in KEPT_GRADS:
        # A captured step keeps its gradient buffers (zero_grad(set_to_none=False)): each
        # replay zeroes them and backward adds into them, where eager frees them instead.
        kept = changed["name"].str.contains("FillFunctor<float>|CUDAFunctor_add<float>")
        assert kept.all(), list(changed["name"])
        assert set(changed["status"]) <= {"extra", "more"}
        changed = changed[~kept]
    if pair[0].stem in AUTOTUNED:
        assert changed["name"].str.contains("fprop|conv", case=False).all(), list(changed["name"])
        assert changed["base_instances"].sum() == changed["cand_instances"].sum()
    else:
        assert changed.empty, list(changed["name"])


# --- the command --------------------------------------------------------------------------------


def _run(*args: str):
    return CliRunner().invoke(main, ["diff", *args])


EAGER = TRACES / "mlp_train_eager.sqlite"
GRAPHED = TRACES / "mlp_train_graph.sqlite"
GRAPHTRACE = TRACES / "mlp_train_graph_graphtrace.sqlite"


def test_cli_table_and_outputs(tmp_path):
    a, b = str(EAGER), str(GRAPHED)
    js, page = tmp_path / "d.json", tmp_path / "d.html"
    res = _run(a, b, "--labels", "eager,graph", "--json", str(js), "-o", str(page))
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[0] == f"== eager: {a}, steps 5-24 (20 of 25, 5 warm-up/capture steps left out)"
    assert lines[1] == f"== graph: {b}, steps 5-24 (20 of 25, 5 warm-up/capture steps left out)"
    assert lines[3] == "graph is 8.90x faster per step than eager: 11660.8 us -> 1310.3 us (p50)"
    assert re.search(r"^  launch calls per step +296 +1$", res.output, re.M)
    assert re.search(r"^  step time p50 us +11660\.8 +1310\.3 +8\.90x faster$", res.output, re.M)
    assert lines[-2:] == [f"wrote {js}", f"wrote {page}"]
    doc = json.loads(js.read_text())
    assert doc["candidate"]["headline"]["launch_calls_per_step"] == 1.0
    base, cand = doc["baseline"]["headline"], doc["candidate"]["headline"]
    assert doc["speedup"] == pytest.approx(base["step_p50_ns"] / cand["step_p50_ns"])
    assert page.read_text().startswith("<!DOCTYPE html>")
    # No --force: refuse before doing any work.
    res = _run(a, b, "-o", str(page))
    assert res.exit_code == 1
    assert res.output == f"Error: {page} exists; will not overwrite without --force\n"
    assert _run(a, b, "-o", str(page), "--force").exit_code == 0


def test_cli_json_stdout():
    res = _run(str(EAGER), str(GRAPHTRACE), "--json", "-", "--steps", "0:2")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["labels"] == ["baseline", "candidate"]
    assert [s["i"] for s in doc["steps"]] == [0, 1]


@pytest.mark.parametrize("args, message", [
    (["--steps", "5-9"], "Error: --steps '5-9': expected A:B (0-based step positions, B "
                         "exclusive), e.g. --steps 0:10, or A:B,C:D for baseline and candidate"),
    (["--steps", "50:60"], "Error: baseline ({a}): --steps 50:60 selects no steps; it has 20 "
                           "steady-state steps (positions 0-19)"),
    (["--labels", "a"], "Error: --labels 'a': expected two names, e.g. --labels eager,graph"),
    (["--labels", "a,a"], "Error: --labels 'a,a': the two labels must differ"),
    (["--mode", "foo"], "Error: --mode 'foo': expected eager, graph, warmup, capture or all, once "
                        "or as BASE,CAND (e.g. --mode eager,graph)"),
    (["--step", "nope"], "Error: {a}: no NVTX range 'nope' (ranges in this trace: "
                         "backward@cgprof, eager@cgprof, forward@cgprof, optimizer@cgprof, "
                         "step@cgprof, warmup@cgprof)"),
])
def test_cli_errors_are_one_line(args, message):
    a, b = str(EAGER), str(GRAPHTRACE)
    res = _run(a, b, *args)
    assert res.exit_code == 1
    assert res.output == message.format(a=a) + "\n"


def test_cli_missing_trace(tmp_path):
    res = _run(str(tmp_path / "nope.sqlite"), str(GRAPHTRACE))
    assert res.exit_code == 1
    assert res.output == f"Error: {tmp_path / 'nope.sqlite'}: no such file\n"


#: The pairs of one process each (the DDP pairs are compared rank by rank: test_ranks).
_ONE_PROCESS = [(a, b) for a, b in _pairs() if not a.stem.startswith("ddp_")]


@pytest.mark.parametrize("pair", _ONE_PROCESS, ids=[f"{a.stem}-vs-{b.stem}"
                                                      for a, b in _ONE_PROCESS])
@pytest.mark.parametrize("opts", [(), ("--steps", "2:7,0:4"), ("--mode", "all,graph")])
def test_cli_diff_is_the_library_diff(pair, opts, analysed):
    """Without -o the command makes the baseline's view before it analyses the candidate
    and keeps no events of it (RunView.without_events): its table and JSON are still those
    of cgprof.diff on the two whole analyses."""
    from cgprof.diff_options import parse_modes, parse_steps
    from cgprof.report import diff_text

    a, b = (str(p) for p in pair)
    kw = dict(zip(opts[::2], opts[1::2], strict=True))
    d = cgprof.diff(analysed(pair[0]), analysed(pair[1]),
                    steps=parse_steps(kw.get("--steps")), modes=parse_modes(kw.get("--mode")))
    if kw.get("--mode"):  # the command labels the runs by their modes
        d = cgprof.diff(analysed(pair[0]), analysed(pair[1]), labels=("all", "graph"),
                        steps=parse_steps(kw.get("--steps")),
                        modes=parse_modes(kw.get("--mode")))
    res = _run(a, b, *opts, "--json", "-")
    assert res.exit_code == 0, res.output
    assert res.output == diff_text.render_json(d)
    res = _run(a, b, *opts)
    assert res.exit_code == 0, res.output
    assert res.output == diff_text.render(d)


@pytest.mark.parametrize("pair", _ONE_PROCESS, ids=[f"{a.stem}-vs-{b.stem}"
                                                      for a, b in _ONE_PROCESS])
@pytest.mark.parametrize("opts", [("--steps", "2:7,0:4", "--max-events", "300"),
                                  ("--mode", "all,graph"), ("--max-events", "100")])
def test_cli_diff_page_is_the_library_page(pair, opts, analysed, tmp_path):
    """-o: the page of views that keep only the events their timelines can draw
    (figures.timeline_apart) is the page of cgprof.diff on the two whole analyses, drawn
    windows cut short by small --max-events included."""
    from cgprof.diff_options import parse_modes, parse_steps
    from cgprof.report import html
    from cgprof.report.figures import DEFAULT_MAX_EVENTS

    kw = dict(zip(opts[::2], opts[1::2], strict=True))
    labels = ("all", "graph") if kw.get("--mode") else ("baseline", "candidate")
    d = cgprof.diff(analysed(pair[0]), analysed(pair[1]), labels=labels,
                    steps=parse_steps(kw.get("--steps")), modes=parse_modes(kw.get("--mode")))
    page = tmp_path / "d.html"
    res = _run(str(pair[0]), str(pair[1]), *opts, "-o", str(page))
    assert res.exit_code == 0, res.output
    want = html.render_diff(d, int(kw.get("--max-events", DEFAULT_MAX_EVENTS)))
    assert page.read_text() == want


def test_timeline_apart_keeps_a_cut(analysed):
    """The cut holds the drawn steps' events only, and falls back to the whole view when
    its table of call counts per thread and step would be too big."""
    from cgprof.report import figures as F

    r = analysed(EAGER)
    v = view(r)
    cut = F.timeline_apart(v, 200)
    assert cut.timeline is not None and not hasattr(cut.result, "trace")
    assert 0 < len(cut.events_trace.stored("kernels")) < len(r.trace.stored("kernels"))
    assert 0 < len(cut.events_gaps) < len(r.step_gaps)
    t1 = int(cut.events_trace.stored("runtime")["start_ns"].max())
    assert t1 < int(v.steps["extent_end_ns"].max())
    old = F._APART_MAX_CELLS
    try:
        F._APART_MAX_CELLS = 1
        assert F.timeline_apart(v, 200) is v
    finally:
        F._APART_MAX_CELLS = old


def test_cli_diff_holds_one_analysis_at_a_time(monkeypatch):
    """The baseline's analysis is let go before the candidate's starts, and the candidate's
    before the tables or the page are rendered (spies on the command's analyses and
    rendering: the real ones run)."""
    import gc
    import weakref

    import cgprof.commands.diff as C

    real, seen, alive_at_second = C._run, [], []

    def spy(*args, **kwargs):
        if seen:
            gc.collect()
            alive_at_second.append(seen[0]() is not None)
        out = real(*args, **kwargs)
        seen.append(weakref.ref(out))
        return out

    from cgprof.report import diff_text

    real_render, alive_at_render = diff_text.render_json, []

    def render_spy(d):
        gc.collect()
        alive_at_render.append([r() is not None for r in seen])
        return real_render(d)

    monkeypatch.setattr(C, "_run", spy)
    monkeypatch.setattr(diff_text, "render_json", render_spy)
    assert _run(str(EAGER), str(GRAPHED), "--json", "-").exit_code == 0
    assert alive_at_second == [False]
    assert alive_at_render == [[False, False]]  # the candidate's too, before rendering
    # -o: the same, the views keeping the events their timelines draw (timeline_apart)
    from cgprof.report import html

    real_page, alive_at_page = html.render_diff, []

    def page_spy(d, max_events):
        gc.collect()
        alive_at_page.append([r() is not None for r in seen])
        assert all(v.timeline is not None for v in d.views)
        return real_page(d, max_events)

    monkeypatch.setattr(html, "render_diff", page_spy)
    seen.clear(), alive_at_second.clear()
    page = Path(tempfile.mkdtemp()) / "d.html"
    assert _run(str(EAGER), str(GRAPHED), "-o", str(page)).exit_code == 0
    assert alive_at_second == [False]
    assert alive_at_page == [[False, False]]


def test_cli_view_error_after_both_analyses(tmp_path):
    """A baseline whose window is empty is reported as before: after the candidate's
    analysis, so that a broken candidate is named first."""
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(b"not a database")
    res = _run(str(EAGER), str(GRAPHED), "--mode", "capture,graph")
    assert res.output == (f"Error: capture ({EAGER}): no capture steps (step modes here: "
                          "eager, warmup)\n")
    assert res.exit_code == 1
    res = _run(str(EAGER), str(bad), "--mode", "capture,graph")
    assert res.exit_code == 1 and res.output.startswith(f"Error: {bad}"), res.output


def test_view_without_events_keeps_no_gaps(eager_vs_graph):
    v = eager_vs_graph.baseline.without_events()
    assert v.headline == eager_vs_graph.baseline.headline
    with pytest.raises(CgprofError, match="without its events"):
        v.gaps  # noqa: B018


def test_view_columns_documented(eager_vs_graph):
    from cgprof.diff import STEP_VIEW_COLUMNS

    v = eager_vs_graph.baseline
    assert list(v.steps.columns) == STEP_VIEW_COLUMNS
    assert list(v.families.columns) == ["family", "calls", "calls_per_step", "host_ns"]
    assert list(v.kernels.columns) == ["name", "instances", "per_step", "total_ns", "avg_ns"]
    assert isinstance(v.replays, pd.DataFrame)


def test_default_window_leaves_out_warmup_steps(make_db):
    ks, rs, ns = [], [], []
    for s in range(4):
        t = 1_000_000 + s * 100_000
        ns.append(N(t, t + 99_000, "step", domain="cgprof"))
        rs.append(R(t + 1000, t + 3000, "cudaLaunchKernel_v7000", corr=s + 1))
        ks.append(K(t + 5000, t + 9000, "gemm", corr=s + 1))
    ns.append(N(999_000, 1_199_500, "warmup", domain="cgprof"))  # encloses steps 0 and 1
    r = cgprof.analyze(make_db(kernels=ks, runtime=rs, nvtx=ns, graph_trace_mode="node"))
    assert list(r.steps.steps["mode"]) == ["warmup", "warmup", "eager", "eager"]
    d = cgprof.diff(r, r)
    assert list(d.steps["base_step"]) == [2, 3]
    assert d.baseline.left_out == 2
    assert d.baseline.describe() == "steps 2-3 (2 of 4, 2 warm-up/capture steps left out)"
    cand = cgprof.diff(r, r, modes=("all", "warmup")).steps["cand_step"]
    assert list(cand.astype(object).fillna(-1)) == [0, 1, -1, -1]
    with pytest.raises(AnalysisError, match=r"it has 2 steady-state steps \(positions 0-1\)$"):
        cgprof.diff(r, r, steps=slice(5, 6))
