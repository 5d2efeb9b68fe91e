"""CPU tests of cgprof.runners: eager paths, graph-cache bookkeeping, fallback, NVTX contract.

CUDA graphs cannot be captured on a CPU, so the graph library's bookkeeping (static
buffers, shape keys, buckets, counters, fallback, NVTX ranges) runs here against
`SimulatedBackend`: its "capture" runs the step once and its "replay" runs it again,
copying the result into the static output the way a replayed graph overwrites it. A
library that forgot a `copy_` into the static buffers, or rebound them, would replay stale
data and the loss curves below would not match eager. tests/test_runners_gpu.py runs the
real capture on a GPU.
"""

from __future__ import annotations

import contextlib
import json
import logging
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import load_script

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from cgprof import mark  # noqa: E402
from cgprof.errors import RunnerError  # noqa: E402
from cgprof.runners import RunConfig, capture, format_table, graphs, models, run_workload  # noqa: E402
from cgprof.runners.results import ModeResult, RunResult, max_rel_diff  # noqa: E402
from cgprof.runners.timing import summarize, throughput_per_s  # noqa: E402

#: CPU losses of the same step computed twice (graph vs eager buffers, or two runs) may differ
#: in the last bits: oneDNN/MKL pick kernels and reduction orders by thread count, memory
#: layout and load, so CPU float results are compared within this relative tolerance, not
#: bit for bit. A real bug (stale static buffer, missed copy) changes the loss by far more.
LOSS_REL = 1e-5


def close(got: list[float] | None, want: list[float] | None) -> bool:
    """Two loss curves of the same length agreeing within LOSS_REL at every step."""
    assert got is not None and want is not None
    return len(got) == len(want) and got == pytest.approx(want, rel=LOSS_REL, abs=1e-7)


@pytest.fixture(autouse=True, scope="module")
def one_intra_op_thread():
    """Run this module's torch work on one thread.

    With several OpenMP/oneDNN threads on a small shared machine (2 cores, many processes)
    the threads spin-wait on each other's barriers: a 4 s test took 25 s with two copies
    running, and runs were seen stuck inside oneDNN for over 10 minutes. One thread avoids
    the barriers (and makes reduction order fixed); the per-test timeout catches the rest.
    """
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


class SimulatedBackend:
    """Capture runs the work once; replay runs it again into the static outputs."""

    capture_runs_work = True

    def __init__(self, fail_with: BaseException | None = None) -> None:
        self.fail_with = fail_with
        self.capture_calls = 0
        self.replay_calls = 0
        self.side_stream_calls = 0
        self.recover_calls = 0

    def run_on_side_stream(self, fn: Any) -> Any:
        self.side_stream_calls += 1
        return fn()

    def capture(self, fn: Any) -> tuple[Any, Any]:
        self.capture_calls += 1
        if self.fail_with is not None:
            raise self.fail_with
        out = fn()
        return (fn, out), out

    def replay(self, graph: Any) -> None:
        self.replay_calls += 1
        fn, out = graph
        out.copy_(fn())

    def recover(self) -> None:
        self.recover_calls += 1


def tiny(task: str, model: str, **kw: Any) -> RunConfig:
    base: dict[str, Any] = dict(
        task=task, model=model, device="cpu", size="tiny", steps=4, warmup=3, batch=4
    )
    base.update(kw)
    return RunConfig(**base)


# --------------------------------------------------------------------------- timing, results


def test_summarize_exact_values():
    s = summarize([1_000_000, 2_000_000, 3_000_000, 4_000_000])
    assert (s.count, s.mean_ms, s.p50_ms, s.min_ms, s.max_ms, s.total_ms) == (
        4,
        2.5,
        2.5,
        1.0,
        4.0,
        10.0,
    )
    assert s.p99_ms == pytest.approx(3.97)
    assert throughput_per_s(32 * 4, 10.0) == pytest.approx(12800.0)
    with pytest.raises(ValueError, match="no measured steps"):
        summarize([])


def test_max_rel_diff():
    assert max_rel_diff([2.0, 4.0], [2.0, 4.0]) == 0.0
    assert max_rel_diff([2.0, 4.0], [2.002, 4.0]) == pytest.approx(1e-3)
    assert max_rel_diff([1.0], [float("nan")]) != max_rel_diff([1.0], [float("nan")])  # NaN


def _result(task: str = "train") -> RunResult:
    r = RunResult(
        task=task,
        model="mlp",
        batch=32,
        steps=100,
        warmup=20,
        device="cuda",
        device_name="NVIDIA H200",
        torch_version="2.11.0",
        seed=0,
        size="full",
        optimizer="sgd" if task == "train" else None,
        variable=False,
    )
    r.modes["eager"] = ModeResult(
        "eager", 100, 20, 4.0, 3.9, 5.5, 3.5, 6.0, 8000.0, losses=[2.0, 1.0]
    )
    r.modes["graph"] = ModeResult(
        "graph",
        100,
        20,
        0.5,
        0.52,
        0.75,
        0.4,
        0.9,
        64000.0,
        captures=1,
        replays=116,
        losses=[2.0, 1.00001],
    )
    return r


def test_format_table_exact_text():
    assert format_table(_result()) == (
        "cgprof run: train mlp (full, sgd), batch 32, 100 steps after 20 warm-up, "
        "cuda (NVIDIA H200), torch 2.11.0, seed 0\n"
        "\n"
        "mode     mean_ms    p50_ms    p99_ms   samples/s captures  replays fallbacks\n"
        "eager      4.000     3.900     5.500      8000.0        -        -         -\n"
        "graph      0.500     0.520     0.750     64000.0        1      116         0\n"
        "\n"
        "graph speedup over eager: 8.00x (mean step time); "
        "loss curves agree within 1.0e-05 relative\n"
    )
    infer = _result("infer")
    assert "graph speedup over eager: 7.50x (p50 request latency)" in format_table(infer)


def test_run_result_json_payload():
    import json

    payload = json.loads(_result().to_json())
    assert payload["schema_version"] == 1
    assert payload["kind"] == "cgprof.run"
    assert payload["speedup"] == pytest.approx(8.0)
    assert payload["speedup_p50"] == pytest.approx(7.5)
    assert payload["loss_max_rel_diff"] == pytest.approx(1e-5)
    assert payload["modes"]["graph"]["replays"] == 116
    assert payload["capturable_eager"] is False
    # which of the runners' CUDA settings took effect (none on this CPU-built result)
    flags = ("fused_optimizer", "cudnn_benchmark", "channels_last")
    assert [payload[k] for k in flags] == [False, False, False]
    assert list(payload) == sorted(payload)


# --------------------------------------------------------------------------- config


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(model="vgg"), "unknown model 'vgg' (choose from mlp, resnet18, transformer)"),
        (dict(batch=0), "batch size must be at least 1 (got 0)"),
        (dict(steps=0), "steps must be at least 1 (got 0)"),
        (dict(warmup=-1), "warmup must be 0 or more (got -1)"),
        (dict(mode="fast"), "unknown mode 'fast' (choose from eager, graph, both)"),
        (dict(variable=True), "variable batch sizes apply to task 'infer' only"),
        (
            dict(mode="graph", device="cpu"),
            "mode 'graph' needs CUDA graphs, which need a CUDA GPU, and the device is 'cpu': "
            "use mode 'eager' on the CPU, or device 'cuda' on a machine with a GPU",
        ),
    ],
)
def test_config_errors(kwargs, message):
    cfg = RunConfig(**{"task": "train", "model": "mlp", **kwargs})
    with pytest.raises(RunnerError) as info:
        cfg.resolved()
    assert str(info.value) == message


def test_config_defaults_follow_the_device():
    on_gpu = RunConfig("train", "resnet18").resolved(cuda_available=True)
    assert (on_gpu.device, on_gpu.mode, on_gpu.batch, on_gpu.optimizer) == (
        "cuda",
        "both",
        16,
        "sgd",
    )
    on_cpu = RunConfig("infer", "transformer").resolved(cuda_available=False)
    assert (on_cpu.device, on_cpu.mode, on_cpu.batch, on_cpu.optimizer) == ("cpu", "eager", 1, None)
    # channels-last: inference only, unless asked
    assert (on_gpu.channels_last, on_cpu.channels_last) == (False, True)
    forced = RunConfig("train", "resnet18", channels_last=True).resolved(cuda_available=True)
    assert forced.channels_last is True
    with pytest.raises(RunnerError, match="torch sees none here"):
        RunConfig("train", "mlp", mode="graph").resolved(cuda_available=False)
    with pytest.raises(RunnerError, match=r"torch.cuda.is_available\(\) is False"):
        RunConfig("train", "mlp", device="cuda").resolved(cuda_available=False)


def test_importing_runners_does_not_import_torch():
    code = (
        "import sys, cgprof.runners, cgprof.commands.run\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


# --------------------------------------------------------------------------- models


def test_full_models_have_the_published_shapes():
    resnet = models.build_model("resnet18")
    assert sum(p.numel() for p in resnet.parameters()) == 11_173_962  # CIFAR ResNet-18
    mlp = models.build_model("mlp")
    assert sum(isinstance(m, nn.Linear) for m in mlp.modules()) == 41
    assert sum(p.numel() for p in mlp.parameters()) == 40 * (256 * 256 + 256) + 256 * 10 + 10
    assert models.spec("mlp").sample_shape == (256,)
    transformer = models.build_model("transformer")
    assert len(transformer.encoder.layers) == 6
    assert transformer.encoder.layers[0].self_attn.embed_dim == 512


@pytest.mark.parametrize("name", ["mlp", "resnet18", "transformer"])
def test_tiny_models_forward_and_seeded_weights(name):
    spec = models.spec(name, "tiny")
    a = models.build_model(name, "tiny", seed=3)
    b = models.build_model(name, "tiny", seed=3)
    c = models.build_model(name, "tiny", seed=4)
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(pa, pb)
    assert not all(
        torch.equal(pa, pc) for pa, pc in zip(a.parameters(), c.parameters(), strict=True)
    )
    x = torch.randn(3, *spec.sample_shape)
    assert a.eval()(x).shape == (3, 10)


# --------------------------------------------------------------------------- eager runner


@pytest.mark.parametrize("name", ["mlp", "resnet18", "transformer"])
def test_eager_training_runs_and_is_reproducible(name):
    first = run_workload(tiny("train", name, mode="eager"))
    again = run_workload(tiny("train", name, mode="eager"))
    losses = first.modes["eager"].losses
    assert losses is not None and len(losses) == 7
    assert all(v == v and 0 < v < 20 for v in losses)  # finite, sane cross-entropy
    assert close(losses, again.modes["eager"].losses)  # same seed: the same curve
    other = run_workload(tiny("train", name, mode="eager", seed=1))
    assert other.modes["eager"].losses != losses
    m = first.modes["eager"]
    assert m.steps == 4 and m.min_ms <= m.p50_ms <= m.max_ms and m.throughput_per_s > 0
    assert (m.captures, m.replays, m.fallbacks) == (0, 0, 0)


def test_eager_training_learns():
    cfg = tiny("train", "mlp", mode="eager", steps=160, warmup=0, batch=8)
    losses = run_workload(cfg).modes["eager"].losses
    assert losses is not None
    # 16 fixed batches of random labels, cycled: the MLP memorises them, so the mean loss
    # over the last pass through the data must be well below the first pass's (~ln 10)
    assert sum(losses[-16:]) / 16 < 0.85 * sum(losses[:16]) / 16


def test_eager_inference_variable_sizes():
    cfg = tiny("infer", "resnet18", mode="eager", variable=True, batch=8, steps=6, warmup=2)
    from cgprof.runners.workloads import request_sizes

    sizes = request_sizes(cfg.resolved(cuda_available=False), 8)
    assert sizes == request_sizes(cfg.resolved(cuda_available=False), 8)
    assert all(1 <= s <= 8 for s in sizes) and len(set(sizes)) > 1
    result = run_workload(cfg)
    m = result.modes["eager"]
    assert m.losses is None
    assert m.throughput_per_s == pytest.approx(sum(sizes[2:]) / (m.mean_ms * 6 / 1e3))


# --------------------------------------------------------------------------- graph bookkeeping


@pytest.mark.parametrize("name", ["mlp", "resnet18", "transformer"])
def test_simulated_graph_training_matches_eager(name):
    # transformer: dropout is on, so this also checks the graph path draws random numbers
    # in the same order as eager
    cfg = tiny("train", name, mode="both", steps=6, warmup=2)
    result = run_workload(cfg, backend_factory=SimulatedBackend)
    eager, graph = result.modes["eager"], result.modes["graph"]
    assert close(graph.losses, eager.losses)
    assert result.loss_max_rel_diff is not None and result.loss_max_rel_diff <= LOSS_REL
    # 3 eager warm-up steps, 1 capture (which ran the step), 4 replays
    assert (graph.captures, graph.replays, graph.recaptures, graph.fallbacks) == (1, 4, 0, 0)


def _train_parts(name: str = "mlp", seed: int = 0):
    model = models.build_model(name, "tiny", seed=seed)
    opt = models.make_optimizer("sgd", list(model.parameters()), capturable=False)
    batches = models.make_batches(models.spec(name, "tiny"), 4, 8, seed=seed, device="cpu")
    return model, opt, batches


def test_make_optimizer_fused_and_foreach():
    params = list(models.build_model("mlp", "tiny").parameters())
    sgd = models.make_optimizer("sgd", params, capturable=False, fused=True)
    assert (sgd.defaults["fused"], sgd.defaults["momentum"], sgd.defaults["lr"]) == (
        True,
        0.9,
        0.01,
    )
    assert models.make_optimizer("sgd", params, capturable=False).defaults["fused"] is None
    adamw = models.make_optimizer("adamw", params, capturable=True, fused=True)
    assert (adamw.defaults["fused"], adamw.defaults["capturable"]) == (True, True)


def test_cpu_runs_apply_no_cuda_settings():
    result = run_workload(tiny("train", "resnet18", mode="eager", steps=1, warmup=0))
    assert (result.fused_optimizer, result.cudnn_benchmark, result.channels_last) == (
        False,
        False,
        False,
    )


def test_loss_log_is_written_by_every_call():
    model, opt, batches = _train_parts()
    log = torch.full((8,), -1.0)
    step = graphs.GraphedTrainStep(
        model, nn.CrossEntropyLoss(), opt, warmup_iters=2, backend=SimulatedBackend(), loss_log=log
    )
    # 2 eager warm-up calls, the capture (which ran the step), 3 replays
    returned = [step(x, y).item() for x, y in batches[:6]]
    assert log[:6].tolist() == returned
    assert log[6:].tolist() == [-1.0, -1.0]
    assert (step.stats.warmup_calls, step.stats.captures, step.stats.replays) == (2, 1, 3)
    step(*batches[6])
    step(*batches[7])
    with pytest.raises(RunnerError) as info:
        step(*batches[0])
    assert str(info.value) == (
        "loss_log is full (8 slots, one per call): pass a longer one, "
        "or call rewind_loss_log() after reading it"
    )
    assert step.stats.calls == 8  # the refused call did nothing
    step.rewind_loss_log()
    again = step(*batches[0]).item()
    assert log[0].item() == again


def test_loss_log_must_be_a_1d_float_tensor():
    model, opt, _ = _train_parts()
    with pytest.raises(RunnerError) as info:
        graphs.GraphedTrainStep(
            model,
            nn.CrossEntropyLoss(),
            opt,
            backend=SimulatedBackend(),
            loss_log=torch.zeros(4, 2, dtype=torch.int64),
        )
    assert str(info.value) == (
        "loss_log must be a 1-D floating-point tensor on the model's device (cpu); "
        "got (4, 2) torch.int64 on cpu"
    )


def test_static_buffer_keeps_the_callers_layout():
    nhwc = torch.randn(4, 3, 8, 8).contiguous(memory_format=torch.channels_last)
    buf = capture.static_buffer(nhwc)
    assert buf.shape == nhwc.shape and buf.stride() == nhwc.stride()
    assert not buf.is_contiguous() and bool((buf == 0).all())
    padded = capture.static_buffer(nhwc[:1], rows=2)
    assert padded.shape == (2, 3, 8, 8)
    assert padded.is_contiguous(memory_format=torch.channels_last)
    assert padded[:1].stride() == nhwc[:1].stride()  # copy_in stays a same-layout copy
    assert capture.static_buffer(torch.randn(4, 3, 8, 8)).is_contiguous()
    assert capture.static_buffer(torch.randn(5, 16), rows=8).shape == (8, 16)
    # a non-dense input (a column slice) gets a contiguous buffer
    assert capture.static_buffer(torch.randn(4, 32)[:, ::2]).is_contiguous()


@contextlib.contextmanager
def _without_onednn() -> Iterator[None]:
    """Torch's own CPU kernels instead of oneDNN's. torch 2.13's oneDNN channels-last
    convolution backward corrupts the heap on some CPUs: on this project's 2-core AMD EPYC
    machine (2026-12-02) the test below aborted the whole pytest run (glibc: "corrupted size
    vs. prev_size"), and outside pytest its eager losses came out wrong. What the test checks,
    the static buffers' layout and ``copy_``, does not depend on which kernels convolve."""
    with warnings.catch_warnings():  # (flags() also sets oneDNN's TF32 switch, and warns)
        warnings.simplefilter("ignore", UserWarning)
        with torch.backends.mkldnn.flags(enabled=False):
            yield


@_without_onednn()
def test_channels_last_training_copies_in_without_changing_layout():
    model, opt, _ = _train_parts("resnet18")
    model = model.to(memory_format=torch.channels_last)
    ref_model, ref_opt, _ = _train_parts("resnet18")
    ref_model = ref_model.to(memory_format=torch.channels_last)
    batches = models.make_batches(
        models.spec("resnet18", "tiny"),
        4,
        5,
        seed=0,
        device="cpu",
        memory_format=torch.channels_last,
    )
    x0 = batches[0][0]
    assert x0.is_contiguous(memory_format=torch.channels_last) and not x0.is_contiguous()
    step = graphs.GraphedTrainStep(
        model, nn.CrossEntropyLoss(), opt, warmup_iters=1, backend=SimulatedBackend()
    )
    ref = graphs.EagerTrainStep(ref_model, nn.CrossEntropyLoss(), ref_opt)
    got = [step(x, y).item() for x, y in batches]
    want = [ref(x, y).item() for x, y in batches]
    assert close(got, want)
    entry = next(iter(step._entries.values()))
    assert entry.static_inputs.stride() == x0.stride()


def test_static_buffers_are_filled_with_copy_never_rebound():
    model, opt, batches = _train_parts()
    step = graphs.GraphedTrainStep(
        model, nn.CrossEntropyLoss(), opt, warmup_iters=1, backend=SimulatedBackend()
    )
    step(*batches[0])
    entry = next(iter(step._entries.values()))
    ptr = entry.static_inputs.data_ptr()
    for x, y in batches[1:]:
        loss = step(x, y)
        assert entry.static_inputs.data_ptr() == ptr
        assert torch.equal(entry.static_inputs, x) and torch.equal(entry.static_targets, y)
    assert loss is entry.static_out  # the loss is the static output, readable after a call


def test_capture_failure_falls_back_to_eager_once(caplog):
    backend = SimulatedBackend(
        fail_with=RuntimeError(
            "CUDA error: operation not permitted when stream is capturing\n"
            "CUDA kernel errors might be asynchronously reported"
        )
    )
    model, opt, batches = _train_parts()
    step = graphs.GraphedTrainStep(
        model, nn.CrossEntropyLoss(), opt, warmup_iters=2, backend=backend
    )
    ref_model, ref_opt, _ = _train_parts()
    ref = graphs.EagerTrainStep(ref_model, nn.CrossEntropyLoss(), ref_opt)
    with caplog.at_level(logging.WARNING, logger="cgprof.runners"):
        for x, y in batches:
            assert torch.allclose(step(x, y), ref(x, y), rtol=LOSS_REL, atol=1e-7)
    reason = (
        "capture failed for input shape (4, 16): RuntimeError: CUDA error: operation "
        "not permitted when stream is capturing"
    )
    assert [r.getMessage() for r in caplog.records] == [
        f"cgprof: CUDA graph {reason}; running eagerly from now on"
    ]
    s = step.stats
    assert (s.calls, s.warmup_calls, s.captures, s.replays, s.fallbacks) == (8, 2, 0, 0, 6)
    assert s.fallback_reason == reason
    assert backend.capture_calls == 1 and backend.recover_calls == 1  # never retried
    assert step.graphs == {} and step._entries == {}  # no half-captured state left
    assert all(p.grad is None for p in model.parameters())
    for p, q in zip(model.parameters(), ref_model.parameters(), strict=True):
        assert torch.allclose(p, q, rtol=LOSS_REL, atol=1e-7)


def test_inference_capture_failure_falls_back(caplog):
    model = models.build_model("mlp", "tiny")
    serve = graphs.GraphedInference(model, backend=SimulatedBackend(MemoryError("out of memory")))
    x = torch.randn(3, 16)
    with caplog.at_level(logging.WARNING, logger="cgprof.runners"):
        out1 = serve(x)
        out2 = serve(x)
    with torch.no_grad():
        assert torch.equal(out1, model(x)) and torch.equal(out2, model(x))
    assert len(caplog.records) == 1
    assert serve.stats.fallbacks == 2 and serve.stats.captures == 0


def test_graphed_train_step_checks():
    model, opt, _ = _train_parts()
    with pytest.raises(RunnerError) as info:
        graphs.GraphedTrainStep(
            model, nn.CrossEntropyLoss(), opt, warmup_iters=0, backend=SimulatedBackend()
        )
    assert str(info.value) == (
        "warmup_iters must be at least 1 (got 0): optimizer state and lazily created "
        "buffers must exist before capture"
    )
    if not torch.cuda.is_available():
        with pytest.raises(RunnerError) as info:
            graphs.GraphedTrainStep(model, nn.CrossEntropyLoss(), opt)
        assert str(info.value).startswith("CUDA graphs need a CUDA GPU, and torch sees none")
    adamw = torch.optim.AdamW(model.parameters())
    with pytest.raises(RunnerError, match="create it with capturable=True"):
        graphs._check_capturable(adamw)
    graphs._check_capturable(opt)  # SGD has no host-side step count


def test_buckets():
    assert capture.default_buckets(1) == [1]
    assert capture.default_buckets(12) == [1, 2, 4, 8, 12]
    assert capture.default_buckets(16) == [1, 2, 4, 8, 16]
    b = [1, 2, 4, 8]
    assert [capture.bucket_for(n, b) for n in (1, 2, 3, 4, 5, 8, 9)] == [1, 2, 4, 4, 8, 8, None]
    assert capture.check_buckets([8, 1, 4]) == [1, 4, 8]
    for bad in ([], [0, 2], [2, 2]):
        with pytest.raises(RunnerError, match="buckets must be distinct positive batch sizes"):
            capture.check_buckets(bad)


def test_bucketed_inference_pads_slices_and_counts(caplog):
    model = models.build_model("mlp", "tiny")
    serve = graphs.GraphedInference(model, buckets=[1, 2, 4, 8], backend=SimulatedBackend())
    gen = torch.Generator().manual_seed(0)
    sizes = [3, 1, 4, 4, 2, 5, 8, 9, 3]
    with caplog.at_level(logging.WARNING, logger="cgprof.runners"):
        for n in sizes:
            x = torch.randn(n, 16, generator=gen)
            out = serve(x)
            assert out.shape == (n, 10)
            with torch.no_grad():
                torch.testing.assert_close(out, model(x), rtol=1e-5, atol=1e-6)
    s = serve.stats
    # 3->4 capture, 1 capture, 4 replay, 4 replay, 2 capture, 5->8 capture, 8 replay,
    # 9 eager (above the largest bucket), 3->4 replay
    assert (s.calls, s.captures, s.recaptures, s.replays, s.fallbacks) == (9, 4, 3, 4, 1)
    assert sorted(k[0][0] for k in serve.graphs) == [1, 2, 4, 8]
    assert [r.getMessage() for r in caplog.records] == [
        "cgprof: batch 9 is larger than the largest bucket (8); such batches run eagerly"
    ]
    entry = serve._entries[((4, 16), torch.float32)]
    assert torch.equal(entry.static_inputs[3:], torch.zeros(1, 16))  # padding row zeroed


def test_shape_cache_evicts_and_recaptures():
    model = models.build_model("mlp", "tiny")
    serve = graphs.GraphedInference(model, max_graphs=2, backend=SimulatedBackend())
    for n in (1, 2, 3, 1, 1):
        serve(torch.randn(n, 16))
    s = serve.stats
    assert (s.captures, s.recaptures, s.evictions, s.replays) == (4, 3, 2, 1)
    assert sorted(k[0][0] for k in serve.graphs) == [1, 3]


def test_replay_fast_path_follows_shape_changes_and_evictions():
    # the fast path replays the shape replayed last; a new shape, an eviction of that
    # shape's graph or a padded request must go through the cache again
    def parts():
        model = models.build_model("mlp", "tiny", seed=3)
        return model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    gen = torch.Generator().manual_seed(1)
    sizes = [4, 4, 4, 2, 2, 2, 4, 4, 4]
    data = [(torch.randn(n, 16, generator=gen), torch.randint(0, 10, (n,), generator=gen))
            for n in sizes]
    model, opt = parts()
    eager = graphs.EagerTrainStep(model, nn.CrossEntropyLoss(), opt)
    ref = [eager(x, y).item() for x, y in data]
    model, opt = parts()
    step = graphs.GraphedTrainStep(
        model, nn.CrossEntropyLoss(), opt, warmup_iters=1, max_graphs=1,
        backend=SimulatedBackend(),
    )
    got = [step(x, y).item() for x, y in data]
    assert got == ref
    s = step.stats
    # per shape run: warm-up, capture (the simulated capture runs the step), replays
    assert (s.warmup_calls, s.captures, s.recaptures, s.evictions, s.replays) == (3, 3, 2, 2, 3)

    serve = graphs.GraphedInference(
        models.build_model("mlp", "tiny"), buckets=[2, 4], backend=SimulatedBackend()
    )
    for n in (4, 4, 3, 4, 2, 3, 3):
        x = torch.randn(n, 16, generator=gen)
        out = serve(x)
        assert out.shape == (n, 10)
        with torch.no_grad():
            torch.testing.assert_close(out, serve.model(x), rtol=1e-5, atol=1e-6)
    entry = serve._entries[((4, 16), torch.float32)]
    assert torch.equal(entry.static_inputs[3:], torch.zeros(1, 16))  # padded again, last
    assert (serve.stats.captures, serve.stats.replays) == (2, 5)


def test_warns_once_when_recapture_cancels_the_benefit(caplog):
    model = models.build_model("mlp", "tiny")
    sizes = [1 + i % 30 for i in range(90)]
    with caplog.at_level(logging.WARNING, logger="cgprof.runners"):
        thrash = graphs.GraphedInference(model, max_graphs=8, backend=SimulatedBackend())
        for n in sizes:
            thrash(torch.randn(n, 16))
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 1
    assert messages[0].startswith("cgprof: 50 CUDA graph captures in 50 calls (input shapes")
    assert messages[0].endswith("pad inputs to a few bucket sizes or keep shapes fixed")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="cgprof.runners"):
        bucketed = graphs.GraphedInference(
            model, buckets=capture.default_buckets(30), backend=SimulatedBackend()
        )
        for n in sizes:
            bucketed(torch.randn(n, 16))
    assert caplog.records == []
    assert bucketed.stats.captures == 6 and bucketed.stats.replays == 84


# --------------------------------------------------------------------------- NVTX contract


@pytest.fixture
def nvtx_ranges(monkeypatch):
    """Every range cgprof.mark opens, as a tree; the real NVTX calls still happen."""
    root: dict[str, Any] = {"name": "root", "payload": None, "children": []}
    stack = [root]
    real_push, real_pop = mark.push, mark.pop

    def push(name: str, payload: int | float | None = None) -> None:
        node = {"name": name, "payload": payload, "children": []}
        stack[-1]["children"].append(node)
        stack.append(node)
        real_push(name, payload)

    def pop() -> None:
        stack.pop()
        real_pop()

    monkeypatch.setattr(mark, "push", push)
    monkeypatch.setattr(mark, "pop", pop)
    yield root
    assert stack == [root], "unbalanced NVTX ranges"


def render(node: dict[str, Any]) -> str:
    inner = ",".join(render(c) for c in node["children"])
    head = f"{node['name']}:{node['payload']}"
    return f"{head}({inner})" if inner else head


def test_nvtx_eager_training(nvtx_ranges):
    run_workload(tiny("train", "mlp", mode="eager", steps=2, warmup=2))
    eager = "forward:{0},backward:{0},optimizer:{0}"
    steps = [f"step:{i}(" + eager.format(i) + ")" for i in range(4)]
    assert [render(c) for c in nvtx_ranges["children"]] == [
        f"eager:4(warmup:2({steps[0]},{steps[1]}),{steps[2]},{steps[3]})"
    ]
    assert mark.DOMAIN == "cgprof"


def test_nvtx_graph_training(nvtx_ranges):
    cfg = tiny("train", "mlp", mode="graph", steps=2, warmup=3, graph_warmup_iters=2)
    run_workload(cfg, backend_factory=SimulatedBackend)
    (graph,) = nvtx_ranges["children"]
    assert (graph["name"], graph["payload"]) == ("graph", 4)
    warm, *measured = graph["children"]
    assert [render(s) for s in warm["children"] + measured] == [
        "step:0(copy_in:0,warmup:0(forward:0,backward:0,optimizer:0))",
        "step:1(copy_in:1,warmup:1(forward:1,backward:1,optimizer:1))",
        # the simulated capture runs the step itself; a CUDA capture is followed by replay:2
        "step:2(copy_in:2,capture:1)",
        "step:3(copy_in:3,replay:3)",
        "step:4(copy_in:4,replay:4)",
    ]
    assert render(warm).startswith("warmup:3(step:0(")


def test_nvtx_graph_inference(nvtx_ranges):
    cfg = tiny("infer", "mlp", mode="both", steps=2, warmup=1, batch=2)
    run_workload(cfg, backend_factory=SimulatedBackend)
    assert [render(c) for c in nvtx_ranges["children"]] == [
        "eager:2(warmup:1(step:0(forward:0)),step:1(forward:1),step:2(forward:2))",
        "graph:2(warmup:1(step:0(copy_in:0,warmup:0(forward:0,forward:0),capture:1)),"
        "step:1(copy_in:1,replay:1),step:2(copy_in:2,replay:2))",
    ]


# --------------------------------------------------------------------------- bench script

BENCH = [sys.executable, str(Path(__file__).resolve().parents[1] / "scripts" / "bench_runners.py")]


def test_bench_runners_rejects_a_zero_repeat():
    res = subprocess.run([*BENCH, "--repeat", "0"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2
    assert "--repeat must be at least 1" in res.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU error line")
def test_bench_runners_reports_a_failed_workload_as_a_json_line_per_repeat():
    res = subprocess.run(
        [*BENCH, "--only", "mlp-infer-b1", "--repeat", "2", "--steps", "1", "--warmup", "0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 1
    lines = [json.loads(line) for line in res.stdout.splitlines()]
    assert [(d["workload"], d["repeat"]) for d in lines] == [
        ("mlp-infer-b1", 1),
        ("mlp-infer-b1", 2),
    ]
    assert all("CUDA" in d["error"] for d in lines)


def test_bench_runners_vs_hand_flags_are_checked():
    res = subprocess.run([*BENCH, "--vs-hand", "--rounds", "0"], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 2 and "--rounds must be at least 1" in res.stderr
    res = subprocess.run([*BENCH, "--vs-hand", "--only", "resnet18-infer-var16"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2
    assert (
        "--vs-hand: resnet18-infer-var16 has variable batch sizes, no hand-written twin"
        in res.stderr
    )


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU error line")
def test_bench_runners_vs_hand_reports_a_failed_workload_once():
    res = subprocess.run(
        [*BENCH, "--vs-hand", "--only", "mlp-infer-b1", "--only", "mlp-train-b32",
         "--rounds", "2", "--steps", "1", "--warmup", "0"],
        capture_output=True, text=True, timeout=120,
    )
    assert res.returncode == 1
    lines = [json.loads(line) for line in res.stdout.splitlines()]
    assert [(d["workload"], d["vs_hand"]) for d in lines] == [
        ("mlp-infer-b1", True), ("mlp-train-b32", True),
    ]
    assert all("CUDA" in d["error"] for d in lines)


def test_vs_hand_line_takes_the_median_of_per_round_ratios():
    bench = load_script("bench_runners")
    line = bench.vs_hand_line("mlp-infer-b1", [0.200, 0.250, 0.100], [0.196, 0.250, 0.090])
    assert line == {
        "workload": "mlp-infer-b1",
        "vs_hand": True,
        "basis": "p50 latency",
        "rounds": 3,
        "runner_ms": [0.2, 0.25, 0.1],
        "hand_ms": [0.196, 0.25, 0.09],
        "ratios": [0.98, 1.0, 0.9],
        "runner_ms_median": 0.2,
        "hand_ms_median": 0.196,
        "ratio": 0.98,
        "target": 0.98,
        "met": True,
    }
    line = bench.vs_hand_line("mlp-train-b32", [1.0, 1.0], [0.9, 0.96])
    assert (line["basis"], line["ratio"], line["met"]) == ("mean step time", 0.93, False)
