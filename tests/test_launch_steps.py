"""Steps found in the launch stream when no NVTX range marks one (cgprof.metrics.launchsteps).

Real exports only: the shipped no-NVTX loops (``traces/plain_*``, with the scripts' own
clocks in traces/README.md) and the shipped eager/graphed pairs with every NVTX row deleted,
whose NVTX steps are the answer.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import REPO, cgprof_in_process, load_script
from nsysdb import write_changed_copy

pytestmark = pytest.mark.timeout(300)

TRACES = REPO / "traces"
#: Shipped eager/graphed pairs of the project's runners and of a user's script.
PAIRS = [("mlp_train_eager", "mlp_train_graph"), ("mlp_infer_eager", "mlp_infer_graph"),
         ("resnet18_train_eager", "resnet18_train_graph"),
         ("resnet18_infer_eager", "resnet18_infer_graph"),
         ("transformer_train_eager", "transformer_train_graph"),
         ("user_train", "user_train_graph")]


def _analyze(path: Path, *args: str, **fields: object) -> dict:
    res = cgprof_in_process(["analyze", str(path), "--json", "-", *args], cache=False, **fields)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def _speedup(base: Path, cand: Path) -> float:
    res = cgprof_in_process(["diff", str(base), str(cand), "--json", "-"], cache=False)
    assert res.returncode == 0, res.stderr
    return float(json.loads(res.stdout)["speedup"])


def _window(doc: dict) -> list[dict]:
    return [s for s in doc["steps"]["steps"] if s["in_window"]]


@pytest.fixture(scope="module")
def without_nvtx(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Copies of the paired traces with every NVTX row deleted (the inputs stay untouched)."""
    folder = tmp_path_factory.mktemp("no_nvtx")
    out = {}
    for name in {n for pair in PAIRS for n in pair}:
        out[name] = write_changed_copy(TRACES / f"{name}.sqlite", folder / f"{name}.sqlite",
                                       "DELETE FROM NVTX_EVENTS")
    return out


@pytest.mark.parametrize("task", ["train", "infer"])
def test_plain_loops_cut_into_their_iterations(task: str) -> None:
    # 3 untimed + 20 timed iterations; graphed: the 20 timed ones replay (warm-up and
    # capture before them form one step out of the window).
    eager = _analyze(TRACES / f"plain_{task}_eager.sqlite")
    assert eager["steps"]["source"] == "launches"
    assert eager["steps"]["range"] == "auto:kernel"
    assert len(eager["steps"]["steps"]) == 23
    graph = _analyze(TRACES / f"plain_{task}_graph.sqlite")
    assert graph["steps"]["range"] == "auto:graph"
    assert [s["mode"] for s in _window(graph)] == ["graph"] * 20
    assert {s["mode"] for s in graph["steps"]["steps"] if not s["in_window"]} == {"capture"}
    compiled = _analyze(TRACES / f"plain_{task}_compile.sqlite")
    assert compiled["steps"]["range"] == "auto:graph"
    assert 18 <= len(_window(compiled)) <= 20
    assert {s["mode"] for s in _window(compiled)} == {"graph"}


@pytest.mark.parametrize("task, clock", [("train", 7.480 / 1.071), ("infer", 1.141 / 0.219)])
def test_plain_loop_diff_matches_the_scripts_clock(task: str, clock: float) -> None:
    # the scripts' own clocks under the profiler (traces/README.md)
    got = _speedup(TRACES / f"plain_{task}_eager.sqlite", TRACES / f"plain_{task}_graph.sqlite")
    assert got == pytest.approx(clock, rel=0.10)
    text = cgprof_in_process(["diff", str(TRACES / f"plain_{task}_eager.sqlite"),
                              str(TRACES / f"plain_{task}_graph.sqlite")], cache=False).stdout
    assert "compared iteration by iteration" in text and "different NVTX ranges" not in text
    # the what-if estimate read off the eager trace alone (the model is not fitted to these)
    estimate = _analyze(TRACES / f"plain_{task}_eager.sqlite")["verdict"]["estimated_speedup"]
    assert estimate == pytest.approx(clock, rel=0.25)


@pytest.mark.parametrize("eager, graphed", PAIRS, ids=[p[0] for p in PAIRS])
def test_pairs_without_nvtx_keep_their_steps_and_diff(
        eager: str, graphed: str, without_nvtx: dict[str, Path]) -> None:
    for name in (eager, graphed):
        marked = _analyze(TRACES / f"{name}.sqlite")
        found = _analyze(without_nvtx[name])
        assert found["steps"]["source"] == "launches"
        # warm-up apart: every iteration is a step; a graphed run's replaying iterations
        # (some the runner marks warm-up) are its window, one more when the capture step
        # also replayed once
        if name == graphed:
            n = sum(s["graph_launches"] > 0 and s["mode"] != "capture"
                    for s in marked["steps"]["steps"])
            assert len(_window(found)) in (n, n + 1)
            assert {s["mode"] for s in _window(found)} == {"graph"}
        else:
            assert abs(len(found["steps"]["steps"]) - len(marked["steps"]["steps"])) <= 1
    marked_x = _speedup(TRACES / f"{eager}.sqlite", TRACES / f"{graphed}.sqlite")
    found_x = _speedup(without_nvtx[eager], without_nvtx[graphed])
    assert found_x == pytest.approx(marked_x, rel=0.10)


def test_step_auto_rule_picks_an_alternative() -> None:
    path = TRACES / "plain_train_compile.sqlite"
    doc = _analyze(path, "--step", "auto:kernel")
    assert doc["steps"]["range"] == "auto:kernel"
    assert doc["steps"]["rule"].startswith("option: --step auto:kernel")
    best = _analyze(path)
    kinds = [(c["name"], c["kind"]) for c in best["steps"]["candidates"]]
    assert kinds[:2] == [("auto:graph", "launches"), ("auto:kernel", "launches")]
    for bad, says in (("auto:copy", "no launch that recurs once per iteration for rule copy"),
                      ("auto:often", "the rules are auto:graph")):
        res = cgprof_in_process(["analyze", str(path), "--step", bad], cache=False)
        assert res.returncode != 0
        assert says in res.stderr and "Traceback" not in res.stderr


def test_rules_name_the_launch_families() -> None:
    from cgprof.metrics import launches, launchsteps

    assert set(launchsteps._RULE_OF_FAMILY) <= set(launches.FAMILIES)
    assert set(launchsteps._RULE_OF_FAMILY.values()) == set(launchsteps.RULES)


def test_launch_steps_read_in_chunks_equal_read_whole() -> None:
    path = TRACES / "plain_train_graph.sqlite"
    whole = cgprof_in_process(["analyze", str(path), "--json", "-"], cache=False)
    chunks = cgprof_in_process(["analyze", str(path), "--json", "-"], cache=False,
                               memory_limit="40MB", chunk_steps=3)
    assert "chunk of steps at a time" in chunks.stderr
    assert chunks.stdout == whole.stdout


def test_compare_iters_prints_cgprof_steps(capsys: pytest.CaptureFixture[str]) -> None:
    compare = load_script("compare_iters")
    assert compare.main([str(TRACES / "plain_infer_graph.sqlite")]) == 0
    row = capsys.readouterr().out.splitlines()[1].split()
    assert row[:4] == ["plain_infer_graph.sqlite", "21", "20", "auto:graph"]
