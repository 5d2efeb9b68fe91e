"""`--dask`: the per-file analyses of the shipped traces on a real dask.distributed
LocalCluster (2 worker processes) give exactly the local run's output."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from cgprof.cli import main

distributed = pytest.importorskip("distributed")

TRACES = Path(__file__).resolve().parents[1] / "traces"


@pytest.fixture(scope="module")
def cluster():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as c:
        yield c


def test_dask_equals_local(cluster, tmp_path):
    """A folder of three traces (a two-rank DDP one among them): the JSON and text of
    `--dask` (flag and CGPROF_DASK_SCHEDULER) are the local run's."""
    run = tmp_path / "run"
    run.mkdir()
    files = [TRACES / n for n in ("ddp_mlp_train_graph.sqlite", "mlp_infer_graph.sqlite",
                                  "user_train.sqlite")]
    for f in files:
        shutil.copy(f, run / f.name)
    local = CliRunner().invoke(main, ["analyze", str(run), "--jobs", "1", "--json", "-"])
    assert local.exit_code == 0, local.output
    remote = CliRunner().invoke(main, ["analyze", str(run), "--dask",
                                       cluster.scheduler_address, "--json", "-"])
    assert remote.exit_code == 0, remote.output
    assert remote.output == local.output
    text_local = CliRunner().invoke(main, ["analyze", str(run), "--jobs", "1"])
    text_env = CliRunner().invoke(main, ["analyze", str(run)],
                                  env={"CGPROF_DASK_SCHEDULER": cluster.scheduler_address})
    assert text_env.exit_code == 0, text_env.output
    assert text_env.output == text_local.output
    procs = 0  # one rank per process that ran kernels (a DDP trace holds two)
    for f in files:
        with sqlite3.connect(f"file:{f}?mode=ro", uri=True) as con:
            procs += con.execute("SELECT COUNT(DISTINCT globalPid) FROM "
                                 "CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    assert procs == 4
    assert f"Ranks: {procs} in {len(files)} files (ids from file order)" in text_env.output


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_dask_jobs_and_in_process_write_the_same_document_for_a_relative_folder(cluster,
                                                                                  tmp_path):
    """The folder given as `rk`: every run names its files `rk/a.sqlite` (the workers
    open the absolute paths) and writes the same bytes, a two-rank trace's other process
    (torchrun's launcher) included."""
    rk = tmp_path / "rk"
    rk.mkdir()
    shutil.copy(TRACES / "ddp_mlp_train_eager.sqlite", rk / "a.sqlite")
    shutil.copy(TRACES / "mlp_infer_graph.sqlite", rk / "b.sqlite")
    before = {f.name: _digest(f) for f in rk.iterdir()}
    env = {**os.environ, "PYTHONPATH": str(TRACES.parent)}
    env.pop("CGPROF_DASK_SCHEDULER", None)
    docs = {}
    for how, extra in [("in-process", ["--jobs", "1"]), ("jobs", ["--jobs", "2"]),
                       ("dask", ["--dask", cluster.scheduler_address])]:
        proc = subprocess.run([sys.executable, "-m", "cgprof", "analyze", "rk", *extra,
                               "--json", f"{how}.json", "--quiet"], capture_output=True,
                              text=True, cwd=tmp_path, env=env, timeout=120)
        assert proc.returncode == 0, proc.stderr
        docs[how] = (tmp_path / f"{how}.json").read_bytes()
    assert docs["jobs"] == docs["in-process"]
    assert docs["dask"] == docs["in-process"]
    doc = json.loads(docs["dask"])
    assert doc["ranks"]["paths"] == ["rk/a.sqlite", "rk/b.sqlite"]
    assert [r["path"] for r in doc["ranks"]["per_rank"]] == [
        "rk/a.sqlite", "rk/a.sqlite", "rk/b.sqlite"]
    assert [t["trace"]["path"] for t in doc["traces"]] == [
        "rk/a.sqlite", "rk/a.sqlite", "rk/b.sqlite"]
    assert [t["rank"]["path"] for t in doc["traces"]] == [
        "rk/a.sqlite", "rk/a.sqlite", "rk/b.sqlite"]
    assert [o["path"] for o in doc["ranks"]["other_processes"]] == ["rk/a.sqlite"]
    assert str(tmp_path).encode() not in docs["dask"]
    assert {f.name: _digest(f) for f in rk.iterdir()} == before


def test_dask_bad_file_names_it(cluster, tmp_path, monkeypatch):
    good = TRACES / "mlp_infer_graph.sqlite"
    (tmp_path / "rank1.sqlite").write_bytes(b"")
    bad = "rank1.sqlite"  # relative: the workers get absolute paths, the user sees theirs
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(main, ["analyze", str(good), bad, "--ranks", "--dask",
                                    cluster.scheduler_address])
    assert res.exit_code == 1
    assert res.output.splitlines() == [
        f"Error: {bad}: is empty (0 bytes), not an nsys SQLite export"]


def test_unreachable_scheduler(monkeypatch):
    monkeypatch.setattr("cgprof.parallel.DASK_CONNECT_TIMEOUT_S", 2)
    res = CliRunner().invoke(main, ["analyze", str(TRACES / "user_train.sqlite"), "--dask",
                                    "tcp://127.0.0.1:9"])
    assert res.exit_code == 1
    assert res.output.startswith("Error: cannot reach the Dask scheduler at tcp://127.0.0.1:9")
    assert len(res.output.strip().splitlines()) == 1


def test_plain_analyze_does_not_import_dask():
    code = ("import sys; from cgprof.cli import main\n"
            "try:\n main(['analyze', 'traces/user_train.sqlite', '-q'])\n"
            "except SystemExit: pass\n"
            "print('dask' in sys.modules, 'distributed' in sys.modules, 'torch' in sys.modules,"
            " file=sys.stderr)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=TRACES.parent, timeout=60)
    assert proc.stderr.strip().splitlines()[-1] == "False False False"
