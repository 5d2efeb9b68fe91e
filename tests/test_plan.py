"""The plan: how each input is read, decided once for every command and the public API."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import cgprof
from cgprof.cli import main
from cgprof.plan import CHUNKS, FOLDER, RANK_BY_RANK, WHOLE, plan_input
from cgprof.report.json_report import render_chunks
from cgprof.settings import Settings, using

REPO = Path(__file__).resolve().parents[1]
TRACES = REPO / "traces"
ONE = TRACES / "mlp_train_graph.sqlite"
DDP = TRACES / "ddp_mlp_train_eager.sqlite"
#: below every whole analysis's estimate (cgprof.io.estimate.WHOLE_BYTES_BASE is 200 MB)
SMALL_CAP = "100MB"


def _plan(path: Path, chunks: bool = True, **fields) -> object:
    with using(Settings.from_env().replace(**fields)):
        return plan_input(path, chunks=chunks)


def test_a_trace_within_the_cap_is_read_whole():
    plan = _plan(ONE)
    assert (plan.shape, plan.over_cap, plan.heads) == (WHOLE, False, ())
    assert _plan(DDP).shape == WHOLE  # its ranks are cut from the loaded trace


def test_over_the_cap_one_process_is_read_in_chunks_and_ranks_one_at_a_time():
    plan = _plan(ONE, memory_limit=SMALL_CAP)
    assert (plan.shape, plan.over_cap) == (CHUNKS, True)
    ranks = _plan(DDP, memory_limit=SMALL_CAP)
    assert (ranks.shape, ranks.over_cap) == (RANK_BY_RANK, True)
    assert ranks.rank_ids == [0, 1]
    assert [h.rank_id for h in ranks.heads] == ranks.rank_ids


def test_a_caller_that_cannot_take_chunks_reads_whole_over_the_cap():
    plan = _plan(ONE, chunks=False, memory_limit=SMALL_CAP)
    assert (plan.shape, plan.over_cap) == (WHOLE, True)
    # ranks are read one at a time whatever the caller takes
    assert _plan(DDP, chunks=False, memory_limit=SMALL_CAP).shape == RANK_BY_RANK


def test_ranks_apart_forces_or_forbids_rank_by_rank():
    assert _plan(DDP, ranks_apart=True).shape == RANK_BY_RANK
    assert _plan(DDP, ranks_apart=False, memory_limit=SMALL_CAP).shape == WHOLE
    assert _plan(ONE, ranks_apart=True).shape == WHOLE  # one rank: nothing to read apart
    assert _plan(ONE, ranks_apart=False, memory_limit=SMALL_CAP).shape == WHOLE


def test_a_folder_of_traces_and_an_exported_folder(tmp_path):
    assert _plan(tmp_path).shape == FOLDER
    parquet = TRACES / "columnar" / "mlp_infer_eager.parquetdir"
    assert _plan(parquet).shape == WHOLE


def test_the_public_api_follows_the_plan_and_gives_the_cli_json(tmp_path, monkeypatch):
    """cgprof.analyze(path, settings=...) reads a trace over the cap in chunks, as the CLI
    does: its JSON document is the CLI's, byte for byte."""
    monkeypatch.setenv("CGPROF_CACHE", str(tmp_path / "cache"))
    settings = Settings.from_env().replace(memory_limit=SMALL_CAP, chunk_steps=3)
    result = cgprof.analyze(ONE, settings=settings)
    assert result.trace is None  # read in chunks: no trace kept
    with using(settings):
        cli = CliRunner().invoke(main, ["analyze", str(ONE), "--json", "-", "--quiet"])
    assert cli.exit_code == 0, cli.output
    assert "".join(render_chunks([result])) == cli.stdout
    whole = cgprof.analyze(ONE)
    assert whole.trace is not None
    assert "".join(render_chunks([whole.light(1000)])) == cli.stdout


def test_a_multi_rank_baseline_against_a_one_process_candidate_over_the_cap(tmp_path):
    """The candidate is compared as a run of one rank, which needs its trace: over the cap
    it is read whole for that (it was read in chunks, and the diff failed with a traceback)."""
    args = [sys.executable, "-m", "cgprof", "diff", str(DDP), str(ONE), "--quiet"]
    env = {**os.environ, "CGPROF_CACHE": str(tmp_path / "cache")}
    whole = subprocess.run(args, capture_output=True, text=True, timeout=240, env=env)
    capped = subprocess.run([*args, "--memory-limit", SMALL_CAP], capture_output=True,
                            text=True, timeout=240, env=env)
    assert whole.returncode == 0, whole.stderr
    assert capped.returncode == 0, capped.stderr
    assert "Traceback" not in capped.stderr
    assert capped.stdout == whole.stdout
    assert "faster than baseline per step" in whole.stdout


@pytest.mark.parametrize("bad", [{"memory_limit": "lots"}, {"threads": 0},
                                 {"reader": "fork"}, {"chunk_steps": 0}])
def test_settings_are_checked_when_made(bad):
    with pytest.raises(cgprof.errors.CgprofError):
        Settings(**bad)


def test_settings_from_the_environment_then_the_flags():
    env = {"CGPROF_MEMORY_LIMIT": "2GB", "CGPROF_NO_CACHE": "1", "CGPROF_CACHE": "/c",
           "CGPROF_THREADS": "3", "CGPROF_READER": "thread", "CGPROF_ENGINE": "sqlite3"}
    s = Settings.from_env(env)
    assert (s.memory_limit, s.cache, s.cache_dir, s.threads, s.reader, s.engine) == (
        "2GB", False, Path("/c"), 3, "thread", "sqlite3")
    assert Settings.from_env(env, memory_limit="1GB", cache=None).memory_limit == "1GB"
    assert Settings.from_env(env, cache=None).cache is False  # a None flag keeps the env's
    assert Settings.from_env({}).memory_limit == "4GB"
    with pytest.raises(cgprof.errors.CgprofError, match=r"CGPROF_THREADS='x'"):
        Settings.from_env({"CGPROF_THREADS": "x"})


def test_threads_the_library_starts_run_under_the_callers_settings():
    from cgprof.io.threads import InThread
    from cgprof.settings import current

    with using(Settings(memory_limit="123MB")):
        seen = InThread(lambda: current().memory_limit, name="t").result()
    assert seen == "123MB"


@pytest.mark.parametrize("args", [["analyze", str(DDP)], ["diff", str(DDP), str(DDP)],
                                  ["check", str(DDP), "--min", "steps=1"]],
                         ids=["analyze", "diff", "check"])
def test_every_command_says_it_reads_a_trace_rank_by_rank(args, tmp_path, monkeypatch):
    monkeypatch.setenv("CGPROF_CACHE", str(tmp_path / "cache"))
    res = CliRunner().invoke(main, [*args, "--memory-limit", SMALL_CAP, "--quiet"])
    assert res.exit_code == 0, res.output
    notes = [line for line in res.stderr.splitlines() if "read rank by rank" in line]
    assert notes and all(n.startswith(f"cgprof: note: {DDP}: read rank by rank (2 ranks, "
                                      f"one at a time)") for n in notes)
