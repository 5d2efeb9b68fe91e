"""Step choice on traces nobody wrote for cgprof: library ranges, per-op ranges, cycles."""

from __future__ import annotations

import json
import math

import pytest
from click.testing import CliRunner
from nsysdb import K, N, R, make_nsys_db

import cgprof
from cgprof.cli import main
from cgprof.metrics.stepchoice import (
    EPOCH_NAME_FACTOR,
    STEP_NAME_FACTOR,
    library_of,
    name_factor,
)
from cgprof.report.json_report import result_to_dict
from cgprof.report.text import render

LK = "cudaLaunchKernel_v7000"
GL = "cudaGraphLaunch_v10000"
STEP_NS = 10_000  # every built step i spans i*STEP_NS .. i*STEP_NS + 9_000


@pytest.fixture
def db(tmp_path):
    n = iter(range(1000))

    def make(**tables):
        return make_nsys_db(tmp_path / f"t{next(n)}.sqlite", **tables)

    return make


class Work:
    """Launch calls (and their kernels) with fresh correlation ids."""

    def __init__(self) -> None:
        self.runtime: list[R] = []
        self.kernels: list[K] = []

    def launch(self, t: int, pid: int = 100, tid: int | None = None, name: str = LK) -> None:
        corr = len(self.runtime) + 1
        self.runtime.append(R(t, t + 10, name, corr=corr, pid=pid, tid=tid))
        self.kernels.append(K(t + 50, t + 60, "k", corr=corr, pid=pid))


# --- library ranges outnumber the user's step ------------------------------------------------



def _nvtx(candidates):
    """The NVTX candidates (not the launch-stream rules, listed first when they chose)."""
    return candidates[candidates["kind"] != "launches"].reset_index(drop=True)

def test_cub_ranges_inside_a_compiled_step_lose_to_train_step(db):
    # torch.compile(step, mode="reduce-overhead"): 30 top-level train_step ranges, each with a
    # graph launch and 5 CUB reductions (one kernel launch each); 2 more CUB calls at start-up.
    w, nvtx = Work(), []
    nvtx += [N(100, 900, "cub::DeviceReduce::Sum", domain="CCCL"),
             N(1000, 1900, "cub::DeviceReduce::Sum", domain="CCCL")]
    w.launch(200)
    w.launch(1100)
    for i in range(1, 31):
        t = i * STEP_NS
        nvtx.append(N(t, t + 9000, "train_step"))
        w.launch(t + 100, name=GL)
        for j in range(5):
            s = t + 1000 + j * 1000
            nvtx.append(N(s, s + 500, "cub::DeviceReduce::Sum", domain="CCCL"))
            w.launch(s + 100)
    r = cgprof.analyze(db(nvtx=nvtx, runtime=w.runtime, kernels=w.kernels))
    st = r.steps
    assert (st.source, st.name, len(st.steps)) == ("scored", "train_step", 30)
    assert st.steps["graph_launches"].tolist() == [1] * 30
    assert st.steps["kernel_launches"].tolist() == [5] * 30
    # The two warm-up launches before the first step do not count against it.
    assert st.rule == ("scored: top-level on thread 100, 30 instances, covers 100% of launch "
                       "calls, name looks like a step")
    c = st.candidates.set_index("name")
    assert c.index.tolist() == ["train_step", "CCCL:cub::DeviceReduce::Sum"]
    cub = c.loc["CCCL:cub::DeviceReduce::Sum"]
    assert (cub["count"], cub["library"], cub["qualified"], cub["score"]) == (152, "CCCL", False,
                                                                             0.0)
    assert cub["top_level"] == round(2 / 152, 4)
    assert cub["reasons"] == "library range (CCCL); 99% nested in other ranges"
    ts = c.loc["train_step"]
    assert ts["coverage"] == 1.0  # 180 of the 180 launches from its first start to its last end
    assert ts["score"] == STEP_NAME_FACTOR


def test_emit_nvtx_per_op_ranges_are_never_steps(db):
    # torch.autograd.profiler.emit_nvtx: every op is a range; the same op name repeats.
    w, nvtx = Work(), []
    for i in range(40):
        t = i * STEP_NS
        nvtx.append(N(t, t + 4000, "aten::mm"))
        nvtx.append(N(t + 100, t + 3000, f"aten::_to_copy, op_id = {317173 + i}"))
        nvtx.append(N(t + 5000, t + 9000, "aten::add_, seq = 7"))
        w.launch(t + 200)
        w.launch(t + 5100)
    r = cgprof.analyze(db(nvtx=nvtx, runtime=w.runtime, kernels=w.kernels))
    # no NVTX step: the steps come from the launch stream (the per-op ranges never do)
    assert r.steps.source == "launches" and r.steps.name.startswith("auto:")
    assert r.steps.rule.startswith("launches: no NVTX range marks a step; ")
    c = _nvtx(r.steps.candidates).set_index("name")
    # op_id makes every _to_copy name unique: not a candidate at all.
    assert sorted(c.index) == ["aten::add_, seq = 7", "aten::mm"]
    assert set(c["library"]) == {"PyTorch per-op (emit_nvtx)"}
    assert not c["qualified"].any()


def test_nccl_and_mpi_ranges_lose_to_batch_in_two_processes(db):
    # Two ranks, each: 10 top-level 'batch' ranges on the main thread, 30 ncclRecv ranges on
    # a communication thread, MPI_Send ranges (nsys's MPI domain) inside the batches.
    w, nvtx = Work(), []
    for pid in (100, 200):
        for i in range(10):
            t = i * STEP_NS
            nvtx.append(N(t, t + 9000, "batch", pid=pid))
            nvtx.append(N(t + 6000, t + 6500, "MPI_Send", domain="MPI", pid=pid))
            w.launch(t + 100, pid=pid)
            w.launch(t + 200, pid=pid, tid=pid + 1)  # autograd thread, no ranges
            for j in range(3):
                s = t + 1000 + j * 1500
                nvtx.append(N(s, s + 1000, "ncclRecv", pid=pid, tid=pid + 5))
                w.launch(s + 10, pid=pid, tid=pid + 5)
    r = cgprof.analyze(db(nvtx=nvtx, runtime=w.runtime, kernels=w.kernels))
    st = r.steps
    assert (st.source, st.name, len(st.steps)) == ("scored", "batch", 20)
    assert st.steps["kernel_launches"].tolist() == [5] * 20
    assert st.rule == ("scored: top-level on 2 threads in 2 processes, 20 instances, "
                       "covers 100% of launch calls, name looks like a step")
    c = st.candidates.set_index("name")
    assert c.loc["ncclRecv", "library"] == "NCCL" and c.loc["ncclRecv", "count"] == 60
    assert c.loc["ncclRecv", "top_level"] == 1.0  # top-level on its own thread
    assert c.loc["MPI:MPI_Send", "library"] == "MPI"
    assert c.loc["MPI:MPI_Send", "top_level"] == 0.0


def test_dlprof_and_nvfuser_ranges_are_library(db):
    w, nvtx = Work(), []
    marker = "{'traceMarker': 'GraphExec', 'funcStack': 'train.py:42'}"
    for i in range(12):
        t = i * STEP_NS
        nvtx.append(N(t, t + 9000, "iteration"))
        nvtx.append(N(t + 10, t + 8000, marker))
        nvtx.append(N(t + 20, t + 500, "getTerminatingOutputs"))
        w.launch(t + 1000)
    r = cgprof.analyze(db(nvtx=nvtx, runtime=w.runtime, kernels=w.kernels))
    assert (r.steps.source, r.steps.name) == ("scored", "iteration")
    c = r.steps.candidates.set_index("name")
    assert c.loc[marker, "library"] == "profiler"
    assert c.loc["getTerminatingOutputs", "library"] == "nvFuser"


@pytest.mark.parametrize(("text", "domain", "library"), [
    ("ncclAllReduce", "", "NCCL"),
    ("AllReduce", "NCCL", "NCCL"),
    ("cub::DeviceReduce::Sum", "CCCL", "CCCL"),
    ("cub::DeviceScan::InclusiveSum", "", "CUB/CCCL"),
    ("cudnnConvolutionForward", "", "cuDNN"),
    ("cublasSgemm_v2", "", "cuBLAS"),
    ("MPI_Send", "MPI", "MPI"),
    ("MPI_Allreduce", "", "MPI"),
    ("myelin-exec:{ForeignNode[onnx::MatMul]}", "", "TensorRT"),
    ("aten::_to_copy, op_id = 317173", "", "PyTorch per-op (emit_nvtx)"),
    ("aten::linear", "", "PyTorch per-op (emit_nvtx)"),
    ("addmm, seq = 12", "", "PyTorch per-op (emit_nvtx)"),
    ("ProfilerStep#3", "", "profiler"),
    ("{'traceMarker': 'x'}", "", "profiler"),
    ("getTerminatingOutputs", "", "nvFuser"),
    ("FusionExecutor::runFusion", "", "nvFuser"),
    ("train_step", "", None),
    ("step", "cgprof", None),
    ("reader", "", None),
    ("forward", "", None),
])
def test_library_of(text, domain, library):
    assert library_of(text, domain) == library


@pytest.mark.parametrize(("text", "factor"), [
    ("step", STEP_NAME_FACTOR), ("train_step", STEP_NAME_FACTOR),
    ("Iteration 3", STEP_NAME_FACTOR), ("batch", STEP_NAME_FACTOR),
    ("training", STEP_NAME_FACTOR), ("epoch", EPOCH_NAME_FACTOR),
    ("epoch_3", EPOCH_NAME_FACTOR), ("stepping", 1.0), ("forward", 1.0), ("reader", 1.0),
])
def test_name_factor(text, factor):
    assert name_factor(text) == factor


def test_epoch_is_too_coarse_and_wrappers_do_not_nest(db):
    # main (once) > epoch (3) > step (10 per epoch): the step wins although nested.
    w, nvtx = Work(), [N(0, 31 * STEP_NS, "main")]
    for e in range(3):
        nvtx.append(N(e * 10 * STEP_NS, (e + 1) * 10 * STEP_NS, "epoch"))
        for i in range(10):
            t = (e * 10 + i) * STEP_NS
            nvtx.append(N(t + 10, t + 9000, "step"))
            w.launch(t + 100)
    r = cgprof.analyze(db(nvtx=nvtx, runtime=w.runtime, kernels=w.kernels))
    assert (r.steps.source, r.steps.name, len(r.steps.steps)) == ("scored", "step", 30)
    c = r.steps.candidates.set_index("name")
    assert c.index.tolist() == ["step", "epoch"]
    assert c.loc["step", "top_level"] == 0.0 and c.loc["epoch", "top_level"] == 1.0
    assert c.loc["step", "score"] == 0.5 * STEP_NAME_FACTOR
    assert c.loc["epoch", "score"] == 0.3 * EPOCH_NAME_FACTOR
    assert r.steps.rule == ("scored: nested in other ranges on thread 100, 30 instances, covers "
                            "100% of launch calls, name looks like a step")


def test_overlapping_ranges_do_not_qualify(db):
    w, nvtx = Work(), []
    for i in range(10):  # start/end ranges, each overlapping the next
        t = i * STEP_NS
        nvtx.append(N(t, t + 15_000, "request", event_type=60))
        w.launch(t + 100)
    r = cgprof.analyze(db(nvtx=nvtx, runtime=w.runtime, kernels=w.kernels))
    assert r.steps.source != "scored"  # (the steps come from the launches instead)
    c = _nvtx(r.steps.candidates).iloc[0]
    assert (c["name"], c["overlap"], c["qualified"]) == ("request", 0.9, False)
    assert c["reasons"] == "90% of instances overlap"


def test_a_range_each_thread_opens_once_is_no_loop(db):
    # Four worker threads, each one long 'worker_loop' range over all the launches.
    w = Work()
    nvtx = [N(0, 100_000, "worker_loop", tid=101 + t) for t in range(4)]
    for i in range(8):
        w.launch(i * STEP_NS + 100, tid=101 + i % 4)
    r = cgprof.analyze(db(nvtx=nvtx, runtime=w.runtime, kernels=w.kernels))
    assert r.steps.source != "scored"  # (the steps come from the launches instead)
    c = _nvtx(r.steps.candidates).iloc[0]
    assert (c["name"], c["count"], c["coverage"]) == ("worker_loop", 4, 1.0)
    assert c["reasons"] == "does not repeat on any one thread"


def test_candidates_kept_are_the_best_few(db):
    w, nvtx = Work(), []
    for i in range(20):
        t = i * STEP_NS
        nvtx.append(N(t, t + 9000, "step"))
        nvtx += [N(t + 10 * j, t + 10 * j + 5, f"cudnnOp{j}") for j in range(12)]
        w.launch(t + 500)
    p = db(nvtx=nvtx, runtime=w.runtime, kernels=w.kernels)
    r = cgprof.analyze(p)
    assert (r.steps.source, r.steps.name) == ("scored", "step")
    assert r.steps.candidates["name"].tolist() == ["step"] + [f"cudnnOp{j}" for j in
                                                              (0, 1, 10, 11, 2, 3, 4, 5, 6)]
    assert len(cgprof.analyze(p, step="step").steps.candidates) == 0


# --- a fixed cycle of pipeline stages ----------------------------------------------------------

STAGES = ["reader", "3D_backbone", "neck", "head", "nms", "post_processing"]


def _pipeline(cycles: int, trailing: int = 0, launches: dict[str, int] | None = None):
    """Stages back to back on thread 100, 1000 ns apart, each 800 ns long."""
    w, nvtx = Work(), []
    seq = [s for _ in range(cycles) for s in STAGES] + STAGES[:trailing]
    for n, stage in enumerate(seq):
        t = 1000 + n * 1000
        nvtx.append(N(t, t + 800, stage))
        for j in range((launches or {}).get(stage, 1)):
            w.launch(t + 100 + j * 20)
    return w, nvtx


def test_fixed_cycle_is_one_step_per_cycle(db):
    w, nvtx = _pipeline(12, trailing=2)
    r = cgprof.analyze(db(nvtx=nvtx, runtime=w.runtime, kernels=w.kernels))
    st = r.steps
    name = "cycle reader .. post_processing (6 ranges)"
    assert (st.source, st.name, len(st.steps)) == ("cycle", name, 12)
    assert st.steps["start_ns"].tolist() == [1000 + 6000 * i for i in range(12)]
    assert st.steps["end_ns"].tolist() == [1000 + 6000 * i + 5800 for i in range(12)]
    assert st.steps["kernel_launches"].tolist() == [6] * 12
    assert st.rule == ("cycle: a fixed cycle of top-level ranges on thread 100, one step per "
                       "cycle, 12 cycles, covers 100% of launch calls")
    c = st.candidates.set_index("name")
    assert c.loc["reader", "count"] == 13 and c.loc["reader", "coverage"] == round(13 / 73, 4)
    assert c.loc["reader", "reasons"] == "covers only 18% of launch calls"
    assert not c.drop(index=name)["qualified"].any()


def test_cycle_beats_its_biggest_stage(db):
    # The backbone launches 8 of 13 kernels per cycle: from the first backbone's start to the
    # last one's end (125 launches: not the first reader's, nor the last cycle's 4 after the
    # backbone) it covers 80, 64%: it qualifies but the cycle, covering everything, scores
    # higher.
    w, nvtx = _pipeline(10, launches={"3D_backbone": 8})
    r = cgprof.analyze(db(nvtx=nvtx, runtime=w.runtime, kernels=w.kernels))
    assert (r.steps.source, len(r.steps.steps)) == ("cycle", 10)
    c = r.steps.candidates
    assert c["name"].tolist()[:2] == ["cycle reader .. post_processing (6 ranges)",
                                      "3D_backbone"]
    assert c["score"].tolist()[:2] == [1.0, round(80 / 125, 4)]


def test_the_same_cycle_in_two_processes_is_one_candidate(db):
    w1, nv1 = _pipeline(5)
    w2, nv2 = _pipeline(5)
    n = len(w1.runtime)
    nvtx = nv1 + [N(x.start + 100, x.end + 100, x.text, pid=200) for x in nv2]
    runtime = w1.runtime + [R(x.start + 100, x.end + 100, x.name, corr=x.corr + n, pid=200)
                            for x in w2.runtime]
    kernels = w1.kernels + [K(x.start + 100, x.end + 100, x.name, corr=x.corr + n, pid=200)
                            for x in w2.kernels]
    r = cgprof.analyze(db(nvtx=nvtx, runtime=runtime, kernels=kernels))
    assert (r.steps.source, len(r.steps.steps)) == ("cycle", 10)
    assert r.steps.steps["pid"].tolist() == [100, 200] * 5
    assert r.steps.steps["kernel_launches"].tolist() == [6] * 10
    assert r.steps.rule == ("cycle: a fixed cycle of top-level ranges on 2 threads in 2 "
                            "processes, one step per cycle, 10 cycles, covers 100% of launch "
                            "calls")


def test_broken_cycle_is_no_cycle(db):
    w, nvtx = _pipeline(4)
    nvtx[7] = N(nvtx[7].start, nvtx[7].end, "neck")  # reader, 3D_backbone, neck, head, ...
    nvtx[8] = N(nvtx[8].start, nvtx[8].end, "3D_backbone")  # ... 3D_backbone out of order
    r = cgprof.analyze(db(nvtx=nvtx, runtime=w.runtime, kernels=w.kernels))
    assert r.steps.source != "cycle"  # (the steps come from the launches instead)
    assert (_nvtx(r.steps.candidates)["kind"] == "scored").all()


# --- fallbacks and the user's word ------------------------------------------------------------


def test_whole_trace_when_ranges_cover_little(db):
    # "log" repeats every step, but 9 of the 11 launches made while it repeats (from its
    # first start to its last end) lie outside it.
    w, nvtx = Work(), []
    for i in range(10):
        t = i * STEP_NS
        nvtx.append(N(t, t + 500, "log"))
        if i < 2:
            w.launch(t + 100)
        w.launch(t + 1000)
    r = cgprof.analyze(db(nvtx=nvtx, runtime=w.runtime, kernels=w.kernels))
    assert (r.steps.source, r.steps.name) == ("launches", "auto:kernel")  # no NVTX step
    c = _nvtx(r.steps.candidates).iloc[0]
    assert (c["name"], c["count"], c["coverage"], c["score"]) == ("log", 10, round(2 / 11, 4),
                                                                   0.0)


def test_whole_trace_rule_says_why(db):
    r = cgprof.analyze(db(runtime=[R(0, 10, LK, corr=1)], kernels=[K(20, 30, "a", corr=1)]))
    assert r.steps.rule == "whole-trace: no NVTX ranges" and r.steps.candidates.empty
    r = cgprof.analyze(db(nvtx=[N(0, 100, "a"), N(200, 300, "b")],
                          runtime=[R(10, 20, LK, corr=1)], kernels=[K(20, 30, "a", corr=1)]))
    assert r.steps.rule == "whole-trace: no NVTX range repeats" and r.steps.candidates.empty
    assert "  chosen by whole-trace: no NVTX range repeats\n" in render(r)


def test_no_launches_keeps_other_evidence(db):
    r = cgprof.analyze(db(nvtx=[N(0, 100, "a"), N(200, 300, "a")],
                          runtime=[R(10, 20, "cudaMalloc_v3020")]))
    assert (r.steps.source, r.steps.name) == ("scored", "a")
    assert r.steps.rule == ("scored: top-level on thread 100, 2 instances, "
                            "no launch calls to cover")
    assert math.isnan(r.steps.candidates.iloc[0]["coverage"])


def test_step_option_still_wins(db):
    w, nvtx = _pipeline(3)
    nvtx += [N(0, 10, "step", domain="cgprof")]
    p = db(nvtx=nvtx, runtime=w.runtime, kernels=w.kernels)
    r = cgprof.analyze(p, step="neck")
    assert (r.steps.source, r.steps.name, len(r.steps.steps)) == ("option", "neck", 3)
    assert r.steps.rule == "option: --step neck" and r.steps.candidates.empty
    r = cgprof.analyze(p)
    assert (r.steps.source, r.steps.rule) == (
        "default", "default: cgprof's own step range (cgprof.mark.step)")


# --- what the user sees -------------------------------------------------------------------------


def test_text_and_json_name_the_rule_and_candidates(db, tmp_path):
    w, nvtx = _pipeline(10, launches={"3D_backbone": 8})
    for i in range(10):  # library ranges inside the backbone
        nvtx.append(N(2000 + 6000 * i + 10, 2000 + 6000 * i + 20, "AllReduce", domain="NCCL"))
    p = db(nvtx=nvtx, runtime=w.runtime, kernels=w.kernels)
    r = cgprof.analyze(p)
    text = render(r)
    assert (
        "steps: 10 instances of NVTX range 'cycle reader .. post_processing (6 ranges)' (cycle)\n"
        "  chosen by cycle: a fixed cycle of top-level ranges on thread 100, one step per cycle,"
        " 10 cycles, covers 100% of launch calls\n"
        "  other candidates:\n"
        "    3D_backbone: 10 instances, score 0.64 (--step '3D_backbone')\n"
        "    NCCL:AllReduce: 10 instances, score 0.00; library range (NCCL); covers only 0% of "
        "launch calls; 100% nested in other ranges (--step 'AllReduce@NCCL')\n"
        "    head: 10 instances, score 0.00; covers only 8% of launch calls (--step 'head')\n"
    ) in text
    doc = result_to_dict(r)
    assert doc["trace"]["step_source"] == "cycle"
    assert doc["steps"]["rule"] == r.steps.rule
    cands = doc["steps"]["candidates"]
    assert [c["name"] for c in cands[:3]] == [
        "cycle reader .. post_processing (6 ranges)", "3D_backbone", "NCCL:AllReduce"]
    assert cands[2]["library"] == "NCCL" and cands[2]["qualified"] is False
    # The CLI writes the same into --json - (stdout holds only the JSON).
    res = CliRunner().invoke(main, ["analyze", str(p), "--json", "-"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["steps"]["rule"] == r.steps.rule
    assert [c["score"] for c in out["steps"]["candidates"][:2]] == [1.0, round(80 / 125, 4)]


# --- the shipped real traces ---------------------------------------------------------------------


def test_real_traces_keep_their_steps(traces_dir):
    from cgprof.io.loader import load
    from cgprof.metrics.steps import choose_step_ranges

    seen = {}
    for path in sorted(traces_dir.glob("*.sqlite")):
        choice = choose_step_ranges(load(path), None)
        seen[path.name] = (choice.source, choice.name)
    # Scripts that know nothing of cgprof: plain `step` ranges (eager and graphed by hand),
    # and torch.compile(mode="reduce-overhead") with `train_step` ranges, where CUB's ranges
    # outnumber the steps and compilation launches thousands of kernels before the loop.
    assert seen.pop("user_train.sqlite") == ("scored", "step")
    assert seen.pop("user_train_graph.sqlite") == ("scored", "step")
    assert seen.pop("compile_train_model.sqlite") == ("scored", "train_step")
    assert seen.pop("compile_train_step.sqlite") == ("scored", "train_step")
    # plain loops without NVTX: steps from the launch stream (tests/test_launch_steps.py)
    for task in ("train", "infer"):
        assert seen.pop(f"plain_{task}_eager.sqlite") == ("launches", "auto:kernel")
        for mode in ("graph", "compile"):
            assert seen.pop(f"plain_{task}_{mode}.sqlite") == ("launches", "auto:graph")
    assert seen and set(seen.values()) == {("default", "cgprof:step")}
    choice = choose_step_ranges(load(traces_dir / "user_train.sqlite"), None)
    assert len(choice.ranges) == 20
    assert choice.candidates["name"].tolist() == ["step"]
    assert choice.rule.startswith("scored: top-level on thread ")
    assert choice.rule.endswith(", 20 instances, covers 100% of launch calls, "
                                "name looks like a step")
    choice = choose_step_ranges(load(traces_dir / "compile_train_step.sqlite"), None)
    assert len(choice.ranges) == 20
    cub = choice.candidates.set_index("name").loc["CCCL:cub::DeviceReduce::Sum"]
    assert (cub["count"], cub["library"], cub["qualified"]) == (72, "CCCL", False)


def test_diff_notes_steps_of_different_ranges(db):
    def run(step_name: str):
        w, nvtx = Work(), []
        for i in range(10):
            t = i * STEP_NS
            nvtx.append(N(t, t + 9000, step_name))
            w.launch(t + 100)
        return cgprof.analyze(db(nvtx=nvtx, runtime=w.runtime, kernels=w.kernels))

    a, b = run("train_step"), run("iteration")
    d = cgprof.diff(a, b, labels=("eager", "compiled"))
    assert ("note: the runs' steps are different NVTX ranges (eager: train_step (scored), "
            "compiled: iteration (scored)); per-step figures compare unlike things: pass "
            "--step NAME[@DOMAIN]") in d.lines
    doc = d.to_dict()
    assert doc["candidate"]["step_source"] == "scored"
    assert doc["candidate"]["step_rule"] == b.steps.rule
    same = cgprof.diff(a, run("train_step"))
    assert not any("different NVTX ranges" in line for line in same.lines)
