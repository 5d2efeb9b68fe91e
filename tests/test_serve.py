"""`cgprof run serve` on the CPU: real load-generator process, real server loop, real pipes.

Correctness, not speed (the machine is small and shared): every request is answered once
with its own row (checked against an eager run of the same batch), closed-loop clients never
have two requests in flight, graph mode pads to its buckets (simulated capture backend from
test_runners_cpu), Ctrl-C drains and exits 130 without writing files, the NVTX contract,
and the exact text/JSON/HTML outputs.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from test_runners_cpu import SimulatedBackend, nvtx_ranges, render  # noqa: E402,F401

from cgprof.errors import RunnerError  # noqa: E402
from cgprof.runners import capture, models  # noqa: E402
from cgprof.runners.serve import POOL_ROWS, LevelRecord, run_serve  # noqa: E402
from cgprof.runners.serving import (  # noqa: E402
    LevelResult,
    ServeConfig,
    ServeResult,
    format_serve_table,
)

REPO = Path(__file__).resolve().parents[1]


def tiny(**kw: Any) -> ServeConfig:
    base: dict[str, Any] = dict(
        model="mlp", device="cpu", size="tiny", duration_s=0.4, warmup_s=0.1, max_batch=4,
        keep_rows=True,
    )
    base.update(kw)
    return ServeConfig(**base)


def check_answers(
    cfg: ServeConfig, rec: LevelRecord, device: str = "cpu", rtol: float = 1e-4,
    atol: float = 1e-5,
) -> None:
    """Every request sent was answered exactly once, with the row an eager run of its batch
    (on ``device``) gives for its sample; batches are the server's real batches."""
    load = rec.load
    sent = len(load.sent_ns)
    assert sent > 0
    assert (load.lost, load.duplicates) == (0, 0)
    assert all(t > 0 for t in load.recv_ns)
    assert sorted(load.rows) == list(range(sent))
    in_batches = [rid for b in rec.batches for rid in b.rids]
    assert sorted(in_batches) == list(range(sent))  # each request in exactly one batch
    model = models.build_model(cfg.model, cfg.size, seed=cfg.seed).eval().to(device)
    pool = models.make_batches(
        models.spec(cfg.model, cfg.size), POOL_ROWS, 1, seed=cfg.seed, device=device
    )[0][0]
    with torch.no_grad():
        for b in rec.batches:
            assert 1 <= len(b.rids) <= cfg.max_batch
            assert b.samples == [load.sample[r] for r in b.rids]
            expect = model(pool[b.samples]).cpu()  # the same batch, eager, unpadded
            got = torch.tensor([load.rows[r] for r in b.rids])
            # padding changes GEMM shapes, hence the tolerance
            torch.testing.assert_close(got, expect, rtol=rtol, atol=atol)
            if rec.mode == "graph":
                buckets = capture.default_buckets(cfg.max_batch)
                assert b.bucket == capture.bucket_for(len(b.rids), buckets)
            else:
                assert b.bucket == len(b.rids)


def test_config_errors():
    cases = [
        (dict(clients=()), "client counts must be at least 1 (got [])"),
        (dict(clients=(4, 0)), "client counts must be at least 1 (got [4, 0])"),
        (dict(rates_qps=(100.0, -1.0)), "rates must be positive requests/s (got [100.0, -1.0])"),
        (dict(max_batch=0), "max batch must be at least 1 (got 0)"),
        (dict(duration_s=0.0), "duration must be positive (got 0.0)"),
        (dict(max_wait_ms=-1.0), "max wait must be 0 or more (got -1.0)"),
        (dict(model="vgg"), "unknown model 'vgg' (choose from mlp, resnet18, transformer)"),
        (
            dict(mode="both"),
            "mode 'both' needs CUDA graphs, which need a CUDA GPU, and the device is 'cpu': "
            "use mode 'eager' on the CPU, or device 'cuda' on a machine with a GPU",
        ),
    ]
    for kw, message in cases:
        with pytest.raises(RunnerError) as info:
            tiny(**kw).resolved()
        assert str(info.value) == message
    assert tiny().resolved(cuda_available=False).modes == ("eager",)
    assert tiny(device=None).resolved(cuda_available=True).modes == ("eager", "graph")


def test_each_client_gets_its_own_rows_eager_and_graph():
    cfg = tiny(clients=(1, 6), mode="both")
    records: list[LevelRecord] = []
    result = run_serve(cfg, backend_factory=SimulatedBackend, records=records)
    assert [(r.mode, r.level) for r in records] == [
        ("eager", 1), ("eager", 6), ("graph", 1), ("graph", 6)
    ]
    for rec in records:
        check_answers(cfg, rec)
        load = rec.load
        clients = int(rec.level)
        assert set(load.client) == set(range(clients))
        # closed loop: a client's next request leaves only after its last one came back
        last_recv: dict[int, int] = {}
        for rid in range(len(load.sent_ns)):
            c = load.client[rid]
            assert load.sent_ns[rid] >= last_recv.get(c, 0)
            last_recv[c] = load.recv_ns[rid]
        assert max(len(b.rids) for b in rec.batches) <= min(clients, cfg.max_batch)
    # one client: every batch holds one request
    assert all(len(b.rids) == 1 for b in records[0].batches)
    # every bucket captured once before the first level, nothing re-captured or run eagerly
    assert result.graph_stats is not None
    assert (result.graph_stats["captures"], result.graph_stats["fallbacks"]) == (3, 0)
    for lv in result.levels:
        assert (lv.lost, lv.duplicates, lv.shed) == (0, 0, 0)
        assert lv.qps > 0 and 0 < lv.p50_ms <= lv.p90_ms <= lv.p99_ms
        assert lv.gpu_busy_pct is None  # no CUDA events on the CPU
        assert 1.0 <= lv.mean_batch <= lv.mean_bucket <= cfg.max_batch


def test_open_loop_poisson_arrivals_are_all_answered():
    cfg = tiny(rates_qps=(200.0,), mode="graph", duration_s=0.5)
    records: list[LevelRecord] = []
    result = run_serve(cfg, backend_factory=SimulatedBackend, records=records)
    (rec,) = records
    check_answers(cfg, rec)
    load = rec.load
    assert set(load.client) == {0}
    assert load.due_ns == sorted(load.due_ns)
    # latency runs from the scheduled arrival, which is never after the send
    assert all(d <= s for d, s in zip(load.due_ns, load.sent_ns, strict=True))
    assert result.open_loop and result.levels[0].level == 200.0
    assert "\n   200/s graph " in format_serve_table(result)


def test_clients_stopping_mid_run_leave_nothing_unanswered():
    # 12 clients, batches of 2 and no wait: when the level's time is up the server still
    # holds a queue of requests; the level ends only once each has its one answer
    cfg = tiny(clients=(12,), max_batch=2, max_wait_ms=0.0, duration_s=0.3, warmup_s=0.0)
    records: list[LevelRecord] = []
    run_serve(cfg, records=records)
    (rec,) = records
    check_answers(cfg, rec)
    end = rec.load.start_ns + int(0.3e9)
    assert any(s < end < r for s, r in zip(rec.load.sent_ns, rec.load.recv_ns, strict=True))


def test_generator_counts_lost_and_duplicate_answers():
    """The generator's own check can fail: a server that answers one request twice and
    never answers another (run_level against a hand-written server on a socket pair)."""
    import socket
    import threading
    from multiprocessing.connection import Connection

    from cgprof.runners import loadgen

    a, b = socket.socketpair()
    gen_end, server_end = Connection(a.detach()), Connection(b.detach())
    seen: list[int] = []

    def bad_server() -> None:
        while True:
            msg = server_end.recv()
            if msg[0] == "done":
                return
            rid = msg[1]
            seen.append(rid)
            if rid == 1:
                continue  # lost
            answers = [(rid, [0.0])] * (2 if rid == 0 else 1)  # rid 0 answered twice
            server_end.send(("resp", answers))

    spec = loadgen.LevelSpec(clients=3, rate_qps=None, duration_s=0.1, warmup_s=0.0,
                             drain_s=0.3)
    thread = threading.Thread(target=bad_server)
    thread.start()
    load = loadgen.run_level(gen_end, spec)
    gen_end.send(("done", None))
    thread.join(10)
    assert (load.lost, load.duplicates) == (1, 1)
    assert load.recv_ns[1] == 0 and len(seen) == len(load.sent_ns)


def test_max_wait_gathers_requests_into_batches():
    # 8 clients, a generous wait: the server waits for more requests and batches them
    cfg = tiny(clients=(8,), max_wait_ms=20.0, max_batch=4)
    records: list[LevelRecord] = []
    run_serve(cfg, records=records)
    check_answers(cfg, records[0])
    sizes = [len(b.rids) for b in records[0].batches]
    assert sum(sizes) / len(sizes) > 2.0


def test_nvtx_each_batch_is_a_step(nvtx_ranges):  # noqa: F811 (the fixture)
    cfg = tiny(clients=(1,), mode="graph", duration_s=0.1, warmup_s=0.0, max_batch=2)
    run_serve(cfg, backend_factory=SimulatedBackend)
    graph, level = nvtx_ranges["children"]
    assert (graph["name"], graph["payload"], level["name"], level["payload"]) == (
        "graph", 2, "level", 1
    )
    (warm,) = graph["children"]
    assert render(warm) == (
        "warmup:2(step:0(batch:1(bucket:1(copy_in:0,warmup:0(forward:0,forward:0),capture:1))),"
        "step:1(batch:1(bucket:1(copy_in:1,replay:1))),"
        "step:2(batch:2(bucket:2(copy_in:2,warmup:2(forward:2,forward:2),capture:2))),"
        "step:3(batch:2(bucket:2(copy_in:3,replay:3))))"
    )
    (inner,) = level["children"]  # the mode again, right around the steps
    assert (inner["name"], inner["payload"]) == ("graph", 2)
    steps = inner["children"]
    assert len(steps) > 3
    for i, s in enumerate(steps, start=4):
        assert render(s) == f"step:{i}(batch:1(bucket:1(copy_in:{i},replay:{i})))"


def _result() -> ServeResult:
    r = ServeResult(
        model="resnet18", size="full", device="cuda", device_name="NVIDIA H200",
        torch_version="2.13.0", open_loop=False, max_batch=32, buckets=[1, 2, 4, 8, 16, 32],
        max_wait_ms=1.0, duration_s=3.0, warmup_s=1.0, think_ms=0.0, slo_ms=10.0, seed=0,
    )

    def lv(mode: str, level: int, qps: float, p99: float, busy: float) -> LevelResult:
        return LevelResult(mode, level, int(qps * 3), 100, qps, p99 / 2, p99 * 0.8, p99,
                           float(level), float(level), busy, 0.5, 1.0, 5.0, 0.01)

    r.levels = [lv("eager", 1, 500.0, 3.0, 20.0), lv("eager", 16, 2000.0, 12.0, 40.0),
                lv("graph", 1, 1000.0, 1.5, 45.0), lv("graph", 16, 6000.0, 4.0, 80.0)]
    return r


def test_graph_gain_and_exact_table():
    r = _result()
    # eager's 16-client level misses the 10 ms budget: best eager is 500, best graph 6000
    assert (r.best_qps("eager"), r.best_qps("graph"), r.graph_gain) == (500.0, 6000.0, 12.0)
    assert format_serve_table(r) == (
        "cgprof run serve: resnet18 (full), closed loop, max batch 32 (buckets 1,2,4,8,16,32), "
        "max wait 1 ms, 3 s per level after 1 s warm-up, cuda (NVIDIA H200), torch 2.13.0, "
        "seed 0\n"
        "\n"
        " clients mode        qps   p50_ms   p90_ms   p99_ms  batch  bucket  gpu_busy  host_ms"
        "  batch_ms  gen_cpu\n"
        "       1 eager      500.0    1.500    2.400    3.000   1.00    1.00     20.0%    0.500"
        "     1.000     5.0%\n"
        "       1 graph     1000.0    0.750    1.200    1.500   1.00    1.00     45.0%    0.500"
        "     1.000     5.0%\n"
        "      16 eager     2000.0    6.000    9.600   12.000  16.00   16.00     40.0%    0.500"
        "     1.000     5.0%\n"
        "      16 graph     6000.0    2.000    3.200    4.000  16.00   16.00     80.0%    0.500"
        "     1.000     5.0%\n"
        "\n"
        "eager: highest QPS with p99 <= 10 ms: 500.0 QPS\n"
        "graph: highest QPS with p99 <= 10 ms: 6000.0 QPS\n"
        "graph gain at p99 <= 10 ms: 12.00x\n"
    )
    payload = json.loads(r.to_json())
    assert (payload["schema_version"], payload["kind"]) == (1, "cgprof.serve")
    assert payload["graph_gain"] == 12.0 and payload["best_qps"] == {"eager": 500.0,
                                                                     "graph": 6000.0}
    r.levels[2].p99_ms = math.nan  # a level that answered nothing: JSON null, not NaN
    assert json.loads(r.to_json())["levels"][2]["p99_ms"] is None


def test_html_is_offline_and_deterministic():
    from cgprof.report.serve_html import FIG_ID, figure, render_serve

    r = _result()
    r.model = "<b>resnet</b>"
    page = render_serve(r)
    same = page == render_serve(r)  # booleans first: a failing assert would print 4.8 MB
    escaped = "<b>resnet</b>" not in page and "&lt;b&gt;resnet&lt;/b&gt;" in page
    offline = page.count("<script") == 5 and "<script src" not in page  # plotly.js inlined
    assert (same, escaped, offline) == (True, True, True)
    assert (f'<div id="{FIG_ID}"' in page, "graph gain 12.00x" in page) == (True, True)
    fig = figure(r)
    assert [(t["name"], t["x"], t["y"]) for t in fig["data"]] == [
        ("eager", [500.0, 2000.0], [3.0, 12.0]),
        ("graph", [1000.0, 6000.0], [1.5, 4.0]),
    ]
    assert fig["layout"]["shapes"][0]["y0"] == 10.0  # the SLO line


def _cli(*args: str, cwd: Path, **kw: Any) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "cgprof", "run", "serve", *args],
                          capture_output=True, text=True, cwd=cwd, env=env, timeout=120, **kw)


CLI_TINY = ["--model", "mlp", "--size", "tiny", "--device", "cpu", "--max-batch", "4",
            "--duration", "0.3", "--warmup", "0.1"]


def test_cli_json_stdout_html_and_no_overwrite(tmp_path):
    res = _cli(*CLI_TINY, "--clients", "1,3", "--json", "-", "--html", "r.html", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    payload = json.loads(res.stdout)  # stdout holds the JSON and nothing else
    assert [(lv["mode"], lv["level"]) for lv in payload["levels"]] == [("eager", 1), ("eager", 3)]
    assert "eager: highest QPS with p99 <= 50 ms:" in res.stderr
    assert res.stderr.rstrip().endswith("wrote r.html")
    assert (tmp_path / "r.html").read_text().startswith("<!DOCTYPE html>")
    again = _cli(*CLI_TINY, "--clients", "1", "--html", "r.html", cwd=tmp_path)
    assert again.returncode == 1
    assert again.stderr == "Error: r.html exists; will not overwrite without --force\n"


def test_cli_help_and_train_usage_do_not_import_torch():
    code = (
        "import sys, runpy; sys.argv=['cgprof','run','serve','--help']\n"
        "try:\n    runpy.run_module('cgprof', run_name='__main__')\n"
        "except SystemExit as e:\n    assert e.code in (0, None), e.code\n"
        "assert 'torch' not in sys.modules, 'cgprof run serve --help imported torch'\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("Usage: cgprof run serve [OPTIONS]\n")
    for flag in ("--clients", "--rate", "--max-batch", "--max-wait-ms", "--duration",
                 "--think-ms", "--slo-ms", "--json PATH|-", "--html", "--force"):
        assert flag in proc.stdout


def test_ctrl_c_drains_and_exits_130(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "cgprof", "run", "serve", *CLI_TINY[:-4], "--max-batch", "4",
         "--clients", "4,4,4", "--duration", "2", "--warmup", "0", "--json", "out.json"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    assert proc.stderr is not None
    first = proc.stderr.readline()  # the first level's progress line: serving has begun
    assert first.startswith("cgprof: eager at 4: "), first
    time.sleep(0.5)  # well inside the second level
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    rows = [ln for ln in err.splitlines() if ln.startswith("       4 eager")]
    assert len(rows) == 2 and rows[1].endswith("(interrupted)")  # third level never ran
    assert "WARNING" not in err  # nothing lost or answered twice while draining
    assert err.rstrip().endswith("cgprof run serve: interrupted; no files written")
    assert out == "" and not (tmp_path / "out.json").exists()
