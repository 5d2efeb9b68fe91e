"""Real CUDA-graph capture on a GPU: graphed == eager, fallback, buckets, shared pool, NVTX.

Skipped without CUDA (CI has no GPU); run on the device and paste the output into the note.
Numerics are compared in true fp32 (no TF32, deterministic cuDNN: `capture.fp32_strict`).
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from cgprof import mark  # noqa: E402
from cgprof.runners import RunConfig, capture, graphs, models, run_workload  # noqa: E402
from cgprof.runners.results import max_rel_diff  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


@pytest.fixture(autouse=True)
def strict_fp32():
    with capture.fp32_strict():
        yield


def _curves(cfg: RunConfig) -> tuple[float, Any]:
    benchmark_before = torch.backends.cudnn.benchmark
    result = run_workload(cfg)
    eager, graph = result.modes["eager"], result.modes["graph"]
    assert eager.losses is not None and graph.losses is not None
    # the graph really ran: 3 eager warm-up steps, then capture + 17 replays, no fallback
    assert (graph.captures, graph.replays, graph.fallbacks) == (1, 17, 0), graph.fallback_reason
    assert len(set(eager.losses)) > 10  # training moved
    # the runners' settings took effect for both modes, and cudnn.benchmark was put back
    assert (result.fused_optimizer, result.cudnn_benchmark) == (True, True)
    assert result.channels_last is False  # training stays NCHW unless asked (see RunConfig)
    assert torch.backends.cudnn.benchmark == benchmark_before
    return max_rel_diff(eager.losses, graph.losses), eager


@pytest.mark.parametrize("name", ["mlp", "resnet18", "transformer"])
def test_graphed_training_gives_the_eager_loss_curve(name):
    # each model as `cgprof run` trains it: mlp/resnet18 SGD, transformer AdamW (eager with
    # the usual non-capturable AdamW, graphed with capturable=True)
    cfg = RunConfig("train", name, mode="both", steps=20, warmup=0, device="cuda")
    rel, eager = _curves(cfg)
    print(
        f"{name}/{cfg.resolved(True).optimizer}: max rel loss diff over 20 steps {rel:.2e}; "
        f"eager loss {eager.losses[0]:.4f} -> {eager.losses[-1]:.4f}"
    )
    assert rel <= 1e-4


@pytest.mark.parametrize(
    ("name", "optimizer"), [("mlp", "adamw"), ("resnet18", "adamw"), ("transformer", "sgd")]
)
def test_same_optimizer_arithmetic_gives_the_same_curve(name, optimizer):
    base = dict(mode="both", steps=20, warmup=0, device="cuda", optimizer=optimizer)
    usual, _ = _curves(RunConfig("train", name, **base))
    rel, _ = _curves(RunConfig("train", name, capturable_eager=True, **base))
    print(
        f"{name}/{optimizer}: max rel loss diff over 20 steps {rel:.2e} with the same "
        f"optimizer in both modes ({usual:.2e} with a non-capturable eager optimizer)"
    )
    assert rel <= 1e-4


def test_loss_log_is_written_inside_the_replays():
    torch.manual_seed(0)
    model = models.build_model("mlp", "tiny").cuda()
    opt = models.make_optimizer("sgd", list(model.parameters()), capturable=True, fused=True)
    log = torch.full((10,), -1.0, device="cuda")
    step = graphs.GraphedTrainStep(model, nn.CrossEntropyLoss(), opt, loss_log=log)
    batches = models.make_batches(models.spec("mlp", "tiny"), 8, 10, seed=0, device="cuda")
    returned = [step(x, y).item() for x, y in batches]
    assert (step.stats.captures, step.stats.replays, step.stats.fallbacks) == (1, 7, 0)
    assert log.tolist() == returned  # every call, warm-up and replays, in order
    assert len(set(returned)) == 10


def test_channels_last_graph_copies_in_one_memcpy_layout():
    torch.manual_seed(0)
    model = models.build_model("resnet18", "tiny").cuda().to(memory_format=torch.channels_last)
    opt = models.make_optimizer("sgd", list(model.parameters()), capturable=True, fused=True)
    step = graphs.GraphedTrainStep(model, nn.CrossEntropyLoss(), opt)
    batches = models.make_batches(
        models.spec("resnet18", "tiny"),
        4,
        6,
        seed=0,
        device="cuda",
        memory_format=torch.channels_last,
    )
    for x, y in batches:
        step(x, y)
    entry = next(iter(step._entries.values()))
    assert entry.static_inputs.stride() == batches[0][0].stride()
    assert step.stats.replays == 3 and step.stats.fallbacks == 0
    serve = graphs.GraphedInference(model, buckets=[1, 2, 4])
    x = batches[0][0][:3]
    out = serve(x).clone()
    with torch.no_grad():
        torch.testing.assert_close(out, model.eval()(x), rtol=1e-4, atol=1e-5)
    (entry,) = serve._entries.values()
    assert entry.static_inputs.is_contiguous(memory_format=torch.channels_last)


def test_dropout_in_replays_draws_like_eager():
    # lr 0: the weights never change, so each step's loss differs only by its dropout mask
    def parts():
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(64, 256), nn.Dropout(0.5), nn.Linear(256, 10)).cuda()
        return model, torch.optim.SGD(model.parameters(), lr=0.0)

    x = torch.randn(32, 64, device="cuda")
    y = torch.randint(0, 10, (32,), device="cuda")
    model, opt = parts()
    eager = graphs.EagerTrainStep(model, nn.CrossEntropyLoss(), opt)
    torch.manual_seed(123)
    ref = [eager(x, y).item() for _ in range(8)]
    model, opt = parts()
    step = graphs.GraphedTrainStep(model, nn.CrossEntropyLoss(), opt, warmup_iters=2)
    torch.manual_seed(123)
    got = [step(x, y).item() for _ in range(8)]
    assert step.stats.replays == 6
    assert len(set(got[2:])) == 6  # every replay drew a new mask
    assert max_rel_diff(ref, got) <= 1e-6


@pytest.mark.parametrize("name", ["mlp", "resnet18", "transformer"])
def test_graphed_inference_outputs_equal_eager(name):
    spec = models.spec(name)
    model = models.build_model(name, seed=0).cuda().eval()
    exact = graphs.GraphedInference(model)
    bucketed = graphs.GraphedInference(model, buckets=[1, 2, 4, 8])
    gen = torch.Generator().manual_seed(0)
    worst = 0.0
    for n in (1, 3, 8, 1, 5, 3):
        x = torch.randn(n, *spec.sample_shape, generator=gen).cuda()
        with torch.no_grad():
            ref = model(x)
        out = exact(x).clone()
        out_b = bucketed(x).clone()
        torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(out_b, ref, rtol=1e-4, atol=1e-5)
        worst = max(worst, (out - ref).abs().max().item(), (out_b - ref).abs().max().item())
    print(f"{name}: largest |graphed - eager| output difference {worst:.2e}")
    assert (exact.stats.captures, exact.stats.replays, exact.stats.fallbacks) == (4, 6, 0)
    assert (bucketed.stats.captures, bucketed.stats.replays) == (3, 6)
    assert bucketed.stats.fallback_reason is None


def test_graphs_of_one_model_share_one_pool():
    model = models.build_model("mlp", seed=0).cuda()
    serve = graphs.GraphedInference(model, buckets=[1, 2, 4])
    for n in (1, 2, 4):
        serve(torch.randn(n, *models.spec("mlp").sample_shape, device="cuda"))
    assert len(serve.graphs) == 3
    pools = {tuple(g.pool()) for g in serve.graphs.values()}
    assert len(pools) == 1  # one pool for all three graphs
    if isinstance(serve.backend.pool, tuple):  # graph_pool_handle() is an (int, int) id
        assert pools == {serve.backend.pool}


class ItemInForward(nn.Module):
    """Data-dependent control flow: `.item()` is a host sync, which capture cannot record."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(32, 64)
        self.drop = nn.Dropout(0.2)
        self.b = nn.Linear(64, 10)

    def forward(self, x: Any) -> Any:
        h = self.drop(torch.relu(self.a(x)))
        if h.abs().sum().item() < 0:  # never true; the sync is the point
            h = -h
        return self.b(h)


def test_item_inside_capture_falls_back_to_eager(caplog):
    def parts():
        torch.manual_seed(0)
        model = ItemInForward().cuda()
        return model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    data = [
        (torch.randn(16, 32, device="cuda"), torch.randint(0, 10, (16,), device="cuda"))
        for _ in range(8)
    ]
    model, opt = parts()
    eager = graphs.EagerTrainStep(model, nn.CrossEntropyLoss(), opt)
    torch.manual_seed(7)
    ref = [eager(x, y).item() for x, y in data]
    model, opt = parts()
    step = graphs.GraphedTrainStep(model, nn.CrossEntropyLoss(), opt, warmup_iters=2)
    torch.manual_seed(7)
    with caplog.at_level(logging.WARNING, logger="cgprof.runners"):
        got = [step(x, y).item() for x, y in data]
    print("fallback reason:", step.stats.fallback_reason)
    assert len(caplog.records) == 1
    assert (
        caplog.records[0]
        .getMessage()
        .startswith("cgprof: CUDA graph capture failed for input shape (16, 32): ")
    )
    s = step.stats
    assert (s.warmup_calls, s.captures, s.replays, s.fallbacks) == (2, 0, 0, 6)
    assert not torch.cuda.is_current_stream_capturing()
    assert step.graphs == {}
    # nothing captured ever ran: the run continues exactly as eager would, dropout included
    assert max_rel_diff(ref, got) <= 1e-6
    # and the GPU is healthy: a capturable model still captures and replays afterwards
    serve = graphs.GraphedInference(models.build_model("mlp", "tiny").cuda())
    for _ in range(3):
        serve(torch.randn(2, 16, device="cuda"))
    assert (serve.stats.captures, serve.stats.replays, serve.stats.fallbacks) == (1, 3, 0)


class SyncInForward(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(16, 4)

    def forward(self, x: Any) -> Any:
        torch.cuda.synchronize()
        return self.lin(x)


def test_synchronize_inside_capture_falls_back_for_inference(caplog):
    model = SyncInForward().cuda()
    serve = graphs.GraphedInference(model)
    x = torch.randn(3, 16, device="cuda")
    with caplog.at_level(logging.WARNING, logger="cgprof.runners"):
        outs = [serve(x) for _ in range(3)]
    with torch.no_grad():
        ref = model(x)
    for out in outs:
        torch.testing.assert_close(out, ref)
    assert serve.stats.fallbacks == 3 and serve.stats.captures == 0
    assert len(caplog.records) == 1


def test_new_shapes_recapture_and_stay_correct():
    model = models.build_model("resnet18", "tiny", seed=1).cuda().eval()
    serve = graphs.GraphedInference(model, max_graphs=2)
    gen = torch.Generator().manual_seed(1)
    for n in (2, 4, 6, 2, 2):
        x = torch.randn(n, 3, 16, 16, generator=gen).cuda()
        with torch.no_grad():
            ref = model(x)
        torch.testing.assert_close(serve(x).clone(), ref, rtol=1e-5, atol=1e-5)
    s = serve.stats
    assert (s.captures, s.recaptures, s.evictions, s.replays) == (4, 3, 2, 5)


def test_nvtx_ranges_of_a_real_graphed_run(monkeypatch):
    events: list[tuple[str, Any]] = []
    real_push, real_pop = mark.push, mark.pop

    def push(name: str, payload: Any = None) -> None:
        events.append((name, payload))
        real_push(name, payload)

    def pop() -> None:
        events.append(("pop", None))
        real_pop()

    monkeypatch.setattr(mark, "push", push)
    monkeypatch.setattr(mark, "pop", pop)
    cfg = RunConfig(
        "train",
        "mlp",
        mode="graph",
        size="tiny",
        steps=2,
        warmup=4,
        device="cuda",
        graph_warmup_iters=3,
    )
    run_workload(cfg)
    opened = [e for e in events if e[0] != "pop"]
    assert opened[:3] == [("graph", 32), ("warmup", 4), ("step", 0)]
    i = opened.index(("step", 3))
    # the capture step: copy in, capture (its kernels do not run), then the first replay
    assert opened[i : i + 4] == [("step", 3), ("copy_in", 3), ("capture", 1), ("replay", 3)]
    assert opened[-3:] == [("step", 5), ("copy_in", 5), ("replay", 5)]
    assert sum(1 for e in events if e[0] == "pop") == len(opened)


def test_cli_both_modes_on_the_gpu(tmp_path):
    import json

    from click.testing import CliRunner

    from cgprof.cli import main

    out = tmp_path / "run.json"
    result = CliRunner().invoke(
        main,
        ["run", "train", "--model", "mlp", "--steps", "10", "--warmup", "5", "--json", str(out)],
    )
    assert result.exit_code == 0, result.output
    print(result.output)
    payload = json.loads(out.read_text())
    assert list(payload["modes"]) == ["eager", "graph"]
    assert payload["modes"]["graph"]["captures"] == 1
    assert payload["speedup"] > 1.0
