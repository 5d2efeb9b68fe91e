"""`cgprof run train --ddp` on the CPU: gloo, eager, two real torchrun processes.

The two-process run is checked against the arithmetic DDP promises: with equal batches per
rank, all-reducing (averaging) the ranks' gradients is the gradient of the mean loss over
the ranks' concatenated batches, so a single process training on the concatenated batches
sees, step by step, the losses each rank logs, and the ranks' parameters stay equal.
tests/test_ddp_gpu.py runs NCCL and the graphed mode on a GPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from cgprof.cli import main

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from cgprof.errors import RunnerError  # noqa: E402
from cgprof.runners import RunConfig, models  # noqa: E402
from cgprof.runners.ddp import (  # noqa: E402
    DDPResult,
    check_config,
    dist_env,
    format_ddp_table,
)
from cgprof.runners.results import ModeResult, RunResult  # noqa: E402

TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone"]


def test_dist_env_reads_torchrun_variables():
    env = dist_env({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"})
    assert (env.rank, env.world_size, env.local_rank) == (1, 2, 1)


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        (
            {"RANK": "0"},
            "--ddp needs WORLD_SIZE, LOCAL_RANK in the environment, which torchrun sets: "
            "run it as torchrun --nproc-per-node N -m cgprof run train --ddp ...",
        ),
        (
            {"RANK": "x", "WORLD_SIZE": "2", "LOCAL_RANK": "0"},
            "--ddp: RANK='x', WORLD_SIZE='2', LOCAL_RANK='0': each must be an integer",
        ),
        (
            {"RANK": "2", "WORLD_SIZE": "2", "LOCAL_RANK": "0"},
            "--ddp: RANK=2 LOCAL_RANK=0 invalid for WORLD_SIZE=2",
        ),
    ],
)
def test_dist_env_errors(environ, message):
    with pytest.raises(RunnerError) as info:
        dist_env(environ)
    assert str(info.value) == message


def test_check_config():
    check_config(RunConfig("train", "mlp"))
    with pytest.raises(RunnerError, match=r"^--ddp applies to task 'train' only"):
        check_config(RunConfig("infer", "mlp"))


def test_cli_without_torchrun_says_so_in_one_line(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    result = CliRunner().invoke(
        main, ["run", "train", "--ddp", "--model", "mlp", "--device", "cpu", "--size", "tiny"]
    )
    assert result.exit_code == 1
    assert result.output == (
        "Error: --ddp needs RANK, WORLD_SIZE, LOCAL_RANK in the environment, which torchrun "
        "sets: run it as torchrun --nproc-per-node N -m cgprof run train --ddp ...\n"
    )
    result = CliRunner().invoke(main, ["run", "infer", "--ddp", "--model", "mlp"])
    assert result.exit_code == 1
    assert result.output == (
        "Error: --ddp applies to task 'train' only (data-parallel training)\n"
    )


def _mode(mean: float, losses: list[float], **kw: object) -> ModeResult:
    return ModeResult(
        "graph" if kw else "eager", 10, 5, mean, mean, mean * 1.5, mean, mean * 2,
        1000.0 / mean, losses=losses, **kw,  # type: ignore[arg-type]
    )


def _run(eager_ms: float, graph_ms: float, losses: list[float]) -> RunResult:
    run = RunResult("train", "mlp", 32, 10, 5, "cuda", "H200", "2.11.0", 0, "full", "sgd", False)
    run.modes["eager"] = _mode(eager_ms, losses)
    run.modes["graph"] = _mode(graph_ms, [v * (1 + 1e-7) for v in losses], captures=1, replays=4)
    return run


def test_ddp_result_table_and_json_exact():
    result = DDPResult(
        world_size=2,
        backend="nccl",
        graph_warmup_iters=11,
        ranks=[_run(4.0, 0.5, [2.0, 1.0]), _run(5.0, 0.625, [3.0, 1.5])],
        param_checksum=[{"eager": 1.5, "graph": 1.25}, {"eager": 1.5, "graph": 1.25}],
        param_max_abs_diff=[{"eager": 0.0, "graph": 0.0}, {"eager": 0.0, "graph": 2e-7}],
    )
    # the slowest rank in each mode: 5.0 / 0.625
    assert result.speedup == 8.0
    assert result.loss_max_rel_diff == pytest.approx(1e-7)
    assert format_ddp_table(result) == (
        "cgprof run: train mlp (full, sgd), DDP over 2 ranks (nccl), batch 32 per rank, "
        "10 steps after 5 warm-up, cuda (H200), torch 2.11.0, seed 0\n"
        "\n"
        "rank mode     mean_ms    p50_ms    p99_ms   samples/s captures  replays fallbacks\n"
        "   0 eager      4.000     4.000     6.000       250.0        -        -         -\n"
        "   1 eager      5.000     5.000     7.500       200.0        -        -         -\n"
        "   0 graph      0.500     0.500     0.750      2000.0        1        4         0\n"
        "   1 graph      0.625     0.625     0.938      1600.0        1        4         0\n"
        "\n"
        "graph speedup over eager: 8.00x (mean step time of the slowest rank; "
        "per rank 8.00x, 8.00x)\n"
        "loss curves eager vs graph agree within 1.0e-07 relative on every rank\n"
        "parameters across ranks: max |rank r - rank 0| 0.0e+00 (eager), 2.0e-07 (graph)\n"
    )
    payload = json.loads(result.to_json())
    assert (payload["kind"], payload["schema_version"], payload["world_size"]) == (
        "cgprof.run.ddp", 1, 2,
    )
    assert [r["rank"] for r in payload["ranks"]] == [0, 1]
    assert payload["ranks"][1]["modes"]["eager"]["losses"] == [3.0, 1.5]
    assert payload["ranks"][1]["speedup"] == 8.0
    assert payload["param_max_abs_diff"] == 2e-7
    assert payload["speedup"] == 8.0 and payload["graph_warmup_iters"] == 11


def _reference_losses(steps: int, batch: int, seed: int) -> list[list[float]]:
    """Each rank's loss per step, from one process training on both ranks' batches."""
    spec = models.spec("mlp", "tiny")
    torch.manual_seed(seed)
    model = models.build_model("mlp", "tiny", seed=seed)
    opt = models.make_optimizer("sgd", list(model.parameters()), capturable=False)
    shards = [
        models.make_batches(spec, batch, min(steps, 16), seed=seed + r, device="cpu")
        for r in (0, 1)
    ]
    loss_fn = nn.CrossEntropyLoss()
    out: list[list[float]] = [[], []]
    for i in range(steps):
        (x0, y0), (x1, y1) = (s[i % len(s)] for s in shards)
        losses = [loss_fn(model(x0), y0), loss_fn(model(x1), y1)]
        for r in (0, 1):
            out[r].append(losses[r].item())
        ((losses[0] + losses[1]) / 2).backward()  # what the all-reduce averages
        opt.step()
        opt.zero_grad(set_to_none=True)
    return out


def test_torchrun_two_ranks_gloo_gathers_both_and_keeps_parameters_equal(tmp_path):
    out = tmp_path / "ddp.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(sys.path)}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    args = ["--model", "mlp", "--device", "cpu", "--size", "tiny", "--batch", "4"]
    proc = subprocess.run(
        [*TORCHRUN, "--nproc-per-node", "2", "-m", "cgprof", "run", "train", "--ddp", *args,
         "--steps", "3", "--warmup", "1", "--json", str(out)],
        capture_output=True, text=True, timeout=50, env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    # rank 0 alone prints: one header, one row per rank
    assert [line for line in lines if line.startswith("cgprof run:")] == [
        "cgprof run: train mlp (tiny, sgd), DDP over 2 ranks (gloo), batch 4 per rank, "
        f"3 steps after 1 warm-up, cpu (cpu), torch {torch.__version__}, seed 0"
    ]
    assert [line.split()[:2] for line in lines[3:5]] == [["0", "eager"], ["1", "eager"]]
    assert lines[-2] == "parameters across ranks: max |rank r - rank 0| 0.0e+00 (eager)"
    assert lines[-1] == f"wrote {out}"
    payload = json.loads(out.read_text())
    assert (payload["world_size"], payload["backend"], payload["device"]) == (2, "gloo", "cpu")
    ranks = payload["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1]
    for r in ranks:
        assert list(r["modes"]) == ["eager"] and r["modes"]["eager"]["steps"] == 3
        assert r["modes"]["eager"]["mean_ms"] > 0
    losses = [r["modes"]["eager"]["losses"] for r in ranks]
    assert all(len(curve) == 4 for curve in losses)
    assert losses[0] != losses[1]  # each rank trains on its own shard
    # DDP kept the parameters equal on both ranks
    assert ranks[1]["param_max_abs_diff"]["eager"] == 0.0
    c0, c1 = (r["param_checksum"]["eager"] for r in ranks)
    assert c1 == pytest.approx(c0, rel=1e-12)
    # and every rank's loss curve is that of training on both shards' mean loss
    expected = _reference_losses(4, 4, 0)
    for got, want in zip(losses, expected, strict=True):
        assert got == pytest.approx(want, rel=1e-5)


WORKER = '''
import json, sys
from cgprof.runners import RunConfig
from cgprof.runners.ddp import run_ddp


class SimulatedBackend:
    """Capture runs the step once; replay runs it again into the static loss (no CUDA)."""

    capture_runs_work = True

    def run_on_side_stream(self, fn):
        return fn()

    def capture(self, fn):
        out = fn()
        return (fn, out), out

    def replay(self, graph):
        fn, out = graph
        out.copy_(fn())

    def recover(self):
        pass


cfg = RunConfig("train", "mlp", mode="both", device="cpu", size="tiny", batch=4,
                steps=3, warmup=13)
result = run_ddp(cfg, backend_factory=SimulatedBackend)
if result.ranks and int(__import__("os").environ["RANK"]) == 0:
    with open(sys.argv[1], "w") as f:
        f.write(result.to_json())
'''


def test_torchrun_two_ranks_graph_bookkeeping_under_ddp(tmp_path):
    # graph mode's bookkeeping under DDP on the CPU: 11 DDP-enabled warm-up iterations,
    # then one "capture" per rank and replays (simulated: each re-runs the step, gloo
    # all-reduce included); the loss curves must equal eager's exactly
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    out = tmp_path / "ddp.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run(
        [*TORCHRUN, "--nproc-per-node", "2", str(script), str(out)],
        capture_output=True, text=True, timeout=50, env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    payload = json.loads(out.read_text())
    assert payload["graph_warmup_iters"] == 11
    for r in payload["ranks"]:
        eager, graph = r["modes"]["eager"], r["modes"]["graph"]
        assert (graph["captures"], graph["replays"], graph["fallbacks"]) == (1, 4, 0)
        assert graph["losses"] == eager["losses"] and len(eager["losses"]) == 16
        assert r["param_max_abs_diff"] == {"eager": 0.0, "graph": 0.0}
        assert r["loss_max_rel_diff"] == 0.0
    assert payload["ranks"][0]["modes"]["graph"]["losses"] != (
        payload["ranks"][1]["modes"]["graph"]["losses"]
    )
