"""scripts/bench_analyze.py's round-by-round comparison with `nsys stats` (the statistic only:
the benchmark itself is run by hand, on the GPU machine for the side-by-side)."""

from __future__ import annotations

import pytest
from conftest import load_script


@pytest.fixture(scope="module")
def bench():
    return load_script("bench_analyze")


def _runs(*times: float) -> dict:
    return {"runs": len(times), "runs_s": list(times)}


def test_rounds_pair_up_in_order(bench):
    # round 1: 0.8 < 1.0 (faster), round 2: 0.6 > 0.5, round 3: a tie is not faster
    faster, rounds, ratio = bench._paired(_runs(1.0, 0.5, 0.9), _runs(0.8, 0.6, 0.9))
    assert (faster, rounds) == (1, 3)
    assert ratio == pytest.approx(1.0)  # median of 1.25, 0.833, 1.0
    # the best runs alone (0.5 / 0.6) would say 0.83x; round by round it is level
    assert bench._paired(_runs(2.0, 1.0), _runs(1.0, 2.0))[2] == pytest.approx(1.25)


@pytest.mark.parametrize("ref, mine", [
    ({"runs": 3, "runs_s": [1.0, 1.1]}, _runs(0.9, 0.8)),  # a failed run: rounds misalign
    (_runs(1.0, 1.0), _runs(0.9, 0.8, 0.7)),
    (_runs(1.0), _runs(0.9)),  # one round
    (_runs(1.0, 1.0), _runs(0.0, 0.9)),
])
def test_no_pairing_when_rounds_do_not_line_up(bench, ref, mine):
    assert bench._paired(ref, mine) is None


@pytest.mark.timeout(120)
def test_the_host_probe_times_each_figure_in_a_fresh_process(bench, tmp_path):
    """Each probe is a real process of this Python (a failing one raises); the summary keeps
    each figure's best and median over the rounds, and the report prints them."""
    rounds = [bench.machine_probe(tmp_path) for _ in range(2)]
    for probe in rounds:
        assert set(probe) == set(bench.PROBES)
        assert all(v > 0 for v in probe.values())
        # the loop and the imports run in a process that also starts an interpreter
        assert probe["loop_1e7_s"] > probe["python_start_s"]
        assert probe["import_np_pa_pd_s"] > probe["python_start_s"]
    m = bench.machine_summary(rounds)
    assert m["rounds"] == 2 and m["cores"] >= 1
    loops = [p["loop_1e7_s"] for p in rounds]
    assert m["loop_1e7_s"] == {"best": min(loops), "median": sum(loops) / 2}
    text, payload, _ = bench.report({"path": "t.sqlite", "bytes": 1, "kernels": 1, "runtime": 1},
                                    {}, {"import_s": 0.5, "largest": []}, None, m)
    assert f"10^7-add loop {min(loops):.2f} s" in text
    assert payload["machine"] == m
    assert "machine" not in bench.report({"path": "t", "bytes": 1, "kernels": 1, "runtime": 1}, {},
                                         {"import_s": 0.5, "largest": []})[1]
