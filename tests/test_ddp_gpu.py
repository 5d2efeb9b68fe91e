"""DDP with one CUDA graph per rank on real GPUs (NCCL): graphed == eager, parameters in sync.

Skipped without CUDA (CI has no GPU). World size 1 runs in this process (the process
group is started and torn down by each `run_ddp`); world size 2 needs two GPUs and runs
`torchrun --nproc-per-node 2` as a subprocess. Numerics in true fp32 (`capture.fp32_strict`).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from cgprof.runners import RunConfig, capture  # noqa: E402
from cgprof.runners.ddp import ASYNC_ERROR_HANDLING, DDP_WARMUP_ITERS, run_ddp  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def world_of_one(monkeypatch):
    for name, value in (("RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0"),
                        ("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", str(_free_port()))):
        monkeypatch.setenv(name, value)
    monkeypatch.delenv(ASYNC_ERROR_HANDLING, raising=False)


@pytest.mark.parametrize("name", ["mlp", "resnet18", "transformer"])
def test_nccl_world_of_one_graphed_gives_the_eager_loss_curve(world_of_one, name):
    cfg = RunConfig("train", name, mode="both", steps=20, warmup=0, device="cuda")
    with capture.fp32_strict():
        result = run_ddp(cfg)
    assert (result.world_size, result.backend) == (1, "nccl")
    (run,) = result.ranks
    eager, graph = run.modes["eager"], run.modes["graph"]
    # 11 DDP-enabled eager warm-up steps on the side stream, then capture + replays
    assert DDP_WARMUP_ITERS == 11
    assert (graph.captures, graph.replays, graph.fallbacks) == (1, 9, 0), graph.fallback_reason
    assert eager.losses is not None and len(set(eager.losses)) > 10  # training moved
    rel = run.loss_max_rel_diff
    print(f"ddp world 1 {name}: eager {eager.mean_ms:.3f} ms, graph {graph.mean_ms:.3f} ms, "
          f"max rel loss diff {rel:.2e}")
    assert rel is not None and rel <= 1e-4
    assert result.param_max_abs_diff == [{"eager": 0.0, "graph": 0.0}]
    assert ASYNC_ERROR_HANDLING not in os.environ  # put back after the group is gone


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_torchrun_two_gpus_graphed_in_sync(tmp_path):
    out = tmp_path / "ddp.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         "-m", "cgprof", "run", "train", "--ddp", "--model", "mlp", "--steps", "30",
         "--warmup", "15", "--json", str(out)],
        capture_output=True, text=True, timeout=240, env=env,
    )
    print(proc.stdout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    payload = json.loads(out.read_text())
    assert (payload["world_size"], payload["backend"]) == (2, "nccl")
    for r in payload["ranks"]:
        graph = r["modes"]["graph"]
        # 45 steps: 11 eager warm-up, then the capture step (captured, then replayed) and 33 more
        assert (graph["captures"], graph["replays"], graph["fallbacks"]) == (1, 34, 0)
        assert r["loss_max_rel_diff"] <= 1e-4
        assert r["param_max_abs_diff"] == {"eager": 0.0, "graph": 0.0}
    assert payload["speedup"] > 1.0
