"""Step times without the profiler: the bootstrap's untraced clock in a real Python process,
``cgprof record --untraced`` against the fake nsys, and what analyze, diff and check make of
an untraced run recorded beside a real export (cgprof/untraced.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO, cgprof_in_process
from test_record import Fake, fake, record  # noqa: F401  (the fixture)

import cgprof
from cgprof import untraced as U
from cgprof.record import program_env, runs_cgprof

pytestmark = pytest.mark.timeout(300)

PROGRAM = """
import time, nvtx
from cgprof import mark
for i in range(4):
    with mark.step(i):
        with nvtx.annotate("fwd", domain="mine"):
            time.sleep(0.001)
        nvtx.push_range("opt")
        nvtx.pop_range()
@nvtx.annotate("decorated")
def f():
    pass
for _ in range(3):
    f()
handle = nvtx.start_range("loose")
nvtx.end_range(handle)
print("done")
"""


def _clock_run(tmp_path: Path, program: str) -> tuple[str, list[dict]]:
    folder = tmp_path / "times"
    folder.mkdir()
    env = program_env({**os.environ, "PYTHONPATH": str(REPO)}, mark_steps=False,
                      untraced_dir=folder)
    res = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return res.stdout, U.read_processes(folder)


def test_the_untraced_clock_pairs_every_kind_of_range(tmp_path: Path) -> None:
    out, procs = _clock_run(tmp_path, PROGRAM)
    assert out == "done\n"  # the program runs as it would
    (proc,) = procs
    names = proc["names"]
    by_name = {n: [r for r in proc["ranges"] if names[r[0]] == n] for n in names}
    assert {n: len(v) for n, v in by_name.items()} == {
        "cgprof:step": 4, "mine:fwd": 4, "opt": 4, "decorated": 3, "loose": 1}
    for step, fwd in zip(by_name["cgprof:step"], by_name["mine:fwd"], strict=True):
        assert step[2] < fwd[2] < fwd[3] < step[3]  # nested ranges close inside their step
        assert fwd[3] - fwd[2] >= 1_000_000  # the 1 ms sleep
    assert proc["events"] == 2 * 16 and proc["replays"] == []
    assert 0 < proc["event_cost_ns"] < 100_000


def test_a_process_that_marks_nothing_writes_nothing(tmp_path: Path) -> None:
    out, procs = _clock_run(tmp_path, "print('quiet')")
    assert out == "quiet\n" and procs == []


def test_the_untraced_run_is_on_for_cgprof_run_only() -> None:
    assert runs_cgprof(["cgprof", "run", "mlp"])
    assert runs_cgprof([sys.executable, "-m", "cgprof", "run", "mlp", "--mode", "graph"])
    assert not runs_cgprof([sys.executable, "train.py"])
    assert not runs_cgprof(["torchrun", "train.py", "cgprof", "run"])


MARKED = """\
import nvtx
for i in range(6):
    nvtx.push_range("step")
    nvtx.pop_range()
"""


def test_record_untraced_writes_times_bound_to_the_export(fake: Fake) -> None:  # noqa: F811
    (fake.work / "loop.py").write_text(MARKED)
    res = record("--untraced", "loop.py")
    assert res.exit_code == 0, res.output
    sidecar = fake.work / "loop.untraced.json"
    assert f"cgprof: wrote the untraced run's step times to {sidecar.name}" in res.stdout
    doc = json.loads(sidecar.read_text())
    assert doc["exports"] == {"loop.sqlite": U.fingerprint(fake.work / "loop.sqlite"),
                              "loop.nsys-rep": U.fingerprint(fake.work / "loop.nsys-rep")}
    (proc,) = doc["processes"]
    assert proc["names"] == ["step"] and len(proc["ranges"]) == 6
    assert doc["untraced_run_s"] > 0 and doc["traced_run_s"] > 0
    assert len(fake.argvs("profile")) == 1  # the second run is not profiled
    # refused before anything runs, then replaced with --force
    again = record("--untraced", "loop.py")
    assert again.exit_code == 1 and "loop.sqlite exists" in again.output
    assert record("--untraced", "--force", "loop.py").exit_code == 0
    # a script's second run is opt-in: without --untraced there is none, and --force
    # removes the earlier run's times, which no longer belong to the new export
    assert record("--force", "loop.py").exit_code == 0
    assert not sidecar.exists()


def test_a_failed_untraced_run_leaves_no_times(fake: Fake) -> None:  # noqa: F811
    (fake.work / "flaky.py").write_text(
        "import os, sys, nvtx\nnvtx.push_range('step'); nvtx.pop_range()\n"
        "sys.exit(3 if os.environ.get('CGPROF_UNTRACED_DIR') else 0)\n")
    res = record("--untraced", "flaky.py")
    assert res.exit_code == 0
    assert "the untraced run exited with code 3; no untraced times" in res.stderr
    assert not (fake.work / "flaky.untraced.json").exists()


def _copy(tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.sqlite"
    shutil.copyfile(REPO / "traces" / f"{name}.sqlite", path)
    return path


def _untraced_like(path: Path, scale: float, kind: str = "ranges") -> None:
    """A sidecar for ``path`` whose step marks are the trace's own steps, every time since
    the first step scaled by ``scale`` (an untraced run ``1 / scale`` times as fast)."""
    st = cgprof.analyze(path).steps
    t = st.steps
    t0 = int(t["start_ns"].min())
    start = (t0 + (t["start_ns"] - t0) * scale).astype(np.int64).tolist()
    end = (t0 + (t["end_ns"] - t0) * scale).astype(np.int64).tolist()
    if kind == "ranges":
        proc = {"names": [st.name], "ranges": [[0, 7, a, b] for a, b in
                                                        zip(start, end, strict=True)],
                "replays": []}
    else:  # one replay per graphed step
        graph = t["mode"].to_numpy() == "graph"
        proc = {"names": [], "ranges": [],
                "replays": [[0, 7, a] for a, g in zip(start, graph, strict=True) if g]}
    proc.update(pid=1, rank=None, argv=[], main_thread=7, events=2 * len(start),
                event_cost_ns=500.0, run_ns=1)
    U.write(U.sidecar_for(path), [path], [proc],
            {"command": ["x"], "exit_code": 0, "untraced_run_s": 2.0, "traced_run_s": 4.0})


def test_analyze_diff_and_check_lead_with_the_untraced_times(tmp_path: Path) -> None:
    eager, graph = _copy(tmp_path, "mlp_train_eager"), _copy(tmp_path, "mlp_train_graph")
    _untraced_like(eager, 0.5)
    _untraced_like(graph, 0.8)
    doc = json.loads(cgprof_in_process(["analyze", str(eager), "--json", "-"]).stdout)
    u = doc["untraced"]
    assert u["available"] and u["steps"] == 19 and u["host_paced"]  # the last has no next
    assert u["inflation"] == pytest.approx(2.0, rel=1e-6)
    assert u["mean_ns"] == pytest.approx(u["traced_mean_ns"] / 2, rel=1e-6)
    assert u["hook_ns_per_step"] == pytest.approx(2 * 500.0)
    text = cgprof_in_process(["analyze", str(eager)]).stdout
    verdict = text.split("Verdict\n", 1)[1].splitlines()
    assert verdict[0].startswith("  without the profiler: ") and "adds +100%" in verdict[0]
    v = doc["verdict"]  # the second estimate: the same model, the profiler's cost taken out
    assert v["estimated_untraced_speedup"] == pytest.approx(
        u["mean_ns"] / v["estimated_untraced_graph_step_ns"])
    assert v["estimated_untraced_graph_step_ns"] < v["estimated_graph_step_ns"]
    said = [line.split(" (estimate)")[0] for line in verdict if "(estimate)" in line]
    assert said == ["  if graphed, without the profiler", "  if graphed, under the profiler"]
    d = json.loads(cgprof_in_process(["diff", str(eager), str(graph), "--json", "-"]).stdout)
    hb, hc = d["baseline"]["headline"], d["candidate"]["headline"]
    assert d["untraced_speedup"] == pytest.approx(
        hb["untraced_step_mean_ns"] / hc["untraced_step_mean_ns"])
    assert d["untraced_speedup"] == pytest.approx(
        hb["traced_step_mean_ns"] / hc["traced_step_mean_ns"] * 0.5 / 0.8, rel=1e-6)
    assert d["lines"][0].startswith(
        f"candidate is {d['untraced_speedup']:.2f}x faster per step than baseline without "
        "the profiler")
    assert d["lines"][1].startswith(f"under the profiler: candidate is {d['speedup']:.2f}x")
    res = cgprof_in_process(["check", str(eager), "--max", "profiler_inflation=1.5"])
    assert res.returncode == 1 and "max_profiler_inflation" in res.stdout


def test_times_of_another_recording_are_not_used(tmp_path: Path) -> None:
    eager = _copy(tmp_path, "mlp_train_eager")
    _untraced_like(eager, 0.5)
    with eager.open("ab") as fh:  # the trace recorded again under the same name
        fh.write(b"\0" * 4096)
    text = cgprof_in_process(["analyze", str(eager)]).stdout
    assert (f"without the profiler: not measured: {tmp_path / 'mlp_train_eager.untraced.json'}"
            " was made with another recording of mlp_train_eager.sqlite") in text


def test_graphed_steps_from_the_launch_stream_match_the_untraced_replays(
        tmp_path: Path) -> None:
    graph = _copy(tmp_path, "plain_train_graph")
    _untraced_like(graph, 0.25, kind="replays")
    u = cgprof.analyze(graph).untraced
    assert u is not None and u.available and u.basis == "graph replays"
    assert u.inflation == pytest.approx(4.0, rel=1e-3)


def test_steps_cut_at_kernel_launches_cannot_be_timed_untraced(tmp_path: Path) -> None:
    eager = _copy(tmp_path, "plain_train_eager")
    U.write(U.sidecar_for(eager), [eager], [{"names": [], "ranges": [], "replays": []}], {})
    u = cgprof.analyze(eager).untraced
    assert u is not None and not u.available
    assert u.reason == ("these steps were found in the launch stream by their kernel "
                        "launches, which the untraced run does not see")


def test_the_decode_example_runs_on_cpu() -> None:
    pytest.importorskip("torch")
    res = subprocess.run([sys.executable, str(REPO / "scripts" / "examples" / "decode_loop.py"),
                          "--device", "cpu", "--no-nvtx", "--layers", "1", "--width", "32",
                          "--heads", "2", "--vocab", "64", "--cache", "16", "--steps", "4"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("decode_loop.py: --mode eager: mean step ")
