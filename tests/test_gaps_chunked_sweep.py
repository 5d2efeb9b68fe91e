"""gpu_gaps' chunked sweep (big traces) against the whole-array path it replaces."""

import numpy as np
import pandas as pd
import pandas.testing as pdt
import pytest

from cgprof.metrics import gap_chunked, gap_measure
from cgprof.metrics import intervals as iv

TRACES = ["mlp_train_eager", "mlp_train_graph", "ddp_mlp_train_graph", "resnet18_infer_graph",
          "mlp_train_graph_graphtrace", "transformer_train_eager", "user_train_graph"]


def _windows(ops):
    lo, hi = int(ops["start_ns"].min()), int(ops["end_ns"].max())
    return [None, (lo - 1000, hi + 1000), (lo + (hi - lo) // 3, hi - (hi - lo) // 3), (lo, hi)]


#: Chunks of one op (a Python step per op: slow) only on the traces of fewest ops.
CASES = [(name, chunk) for chunk in (1, 7, 1000, 1 << 20) for name in TRACES
         if chunk != 1 or name in ("mlp_train_graph_graphtrace", "resnet18_infer_graph")]


@pytest.mark.parametrize(("name", "chunk"), CASES)
def test_chunked_gaps_equal_the_whole_array_sweep(traces_dir, monkeypatch, name, chunk):
    import cgprof
    from cgprof.metrics.gpu import gpu_ops
    from cgprof.metrics.launches import api_calls

    trace = cgprof.load(traces_dir / f"{name}.sqlite")
    ops, calls = gpu_ops(trace), api_calls(trace)
    windows = _windows(ops)
    slow = [gap_measure.gpu_gaps(ops, calls, window=w) for w in windows]
    monkeypatch.setattr(gap_chunked, "CHUNKED_MIN_OPS", 0)
    monkeypatch.setattr(iv, "SWEEP_CHUNK", chunk)
    used = []
    of = gap_chunked._Chunked.of
    monkeypatch.setattr(gap_chunked._Chunked, "of",
                        staticmethod(lambda o, c: used.append(of(o, c)) or used[-1]))
    fast = [gap_measure.gpu_gaps(ops, calls, window=w) for w in windows]
    if name != "ddp_mlp_train_graph":  # two processes: the general path
        assert any(u is not None for u in used)
    for f, s in zip(fast, slow, strict=True):
        pdt.assert_frame_equal(f.gaps, s.gaps)
        for table in ("devices", "by_kind", "histogram", "streams"):
            pdt.assert_frame_equal(getattr(f, table), getattr(s, table))


def test_sweep_chunks_equal_gap_sweep(monkeypatch):
    rng = np.random.default_rng(5)
    for chunk in (1, 2, 3, 5, 64):
        monkeypatch.setattr(iv, "SWEEP_CHUNK", chunk)
        for _ in range(200):
            n = int(rng.integers(1, 30))
            start = np.sort(rng.integers(0, 50, n))
            end = start + rng.integers(0, 12, n)
            o = np.lexsort((end, start))
            start, end = start[o], end[o]
            ncodes = int(rng.integers(1, 4))
            code = rng.integers(0, ncodes, n).astype(np.uint16)
            order = np.argsort(code, kind="stable")
            first = np.zeros(n, dtype=bool)
            first[0] = True
            first[1:] = code[order][1:] != code[order][:-1]
            gap, prev_end, prev_pos = iv.gap_sweep(start[order], end[order], first)
            prev_pos = np.where(first, 0, order[prev_pos])  # 0 on a group's first row
            got = {}
            for _c, rows, _st, _en, g, pe, pp in iv.sweep_chunks(start, end, code, ncodes):
                for i, r in enumerate(rows.tolist()):
                    got[r] = (int(g[i]), int(pe[i]), int(pp[i]))
            want = {int(r): (int(g), int(pe), int(pp)) for r, g, pe, pp in
                    zip(order, gap, prev_end, prev_pos, strict=True)}
            assert got == want


def test_dense_code_is_the_sorted_distinct_tuples():
    rng = np.random.default_rng(6)
    for _ in range(100):
        n = int(rng.integers(1, 50))
        a, b = rng.integers(3, 6, n), rng.integers(-2, 2, n)
        coded = gap_chunked._dense_code([a, b])
        pairs = sorted(set(zip(a.tolist(), b.tolist(), strict=True)))
        code, (va, vb) = coded
        assert list(zip(va.tolist(), vb.tolist(), strict=True)) == pairs
        if code is None:
            assert len(pairs) == 1
        else:
            rows = list(zip(a.tolist(), b.tolist(), strict=True))
            assert [pairs[c] for c in code.tolist()] == rows
    assert gap_chunked._dense_code([np.array([0, 2**40])]) is None
    assert pd.api.types.is_integer_dtype(gap_chunked._dense_code([np.array([1, 2])])[0])


def test_gap_sweep_in_chunks_equals_one_sweep(monkeypatch):
    rng = np.random.default_rng(7)
    cases = []
    for _ in range(300):
        n = int(rng.integers(1, 40))
        first = rng.random(n) < rng.choice([0.05, 0.3, 0.9])
        first[0] = True
        start = rng.integers(0, 30, n)
        end = start + rng.integers(0, 10, n)
        cases.append((start, end, first))
    want = [iv.gap_sweep(*c) for c in cases]
    for chunk in (1, 2, 3, 7):
        monkeypatch.setattr(iv, "SWEEP_CHUNK", chunk)
        for c, w in zip(cases, want, strict=True):
            got = iv.gap_sweep(*c)
            for g, x in zip(got, w, strict=True):
                assert g.tolist() == x.tolist()
            gap, none, prev_pos = iv.gap_sweep(*c, want_prev_end=False)
            assert none is None
            assert gap.tolist() == w[0].tolist() and prev_pos.tolist() == w[2].tolist()


def test_replay_inner_gap_blocks_equal_one_block(monkeypatch):
    from cgprof.metrics import replays as R

    rng = np.random.default_rng(8)
    for _ in range(100):
        n_in = rng.integers(1, 6, int(rng.integers(1, 12)))
        at_in = np.cumsum(n_in) - n_in
        gap_in = rng.integers(0, 5, int(n_in.sum()))
        monkeypatch.setattr(R, "_BLOCK", 1 << 20)
        want = R._inner_gap_stats(gap_in, n_in, at_in)
        for block in (1, 3, 8):
            monkeypatch.setattr(R, "_BLOCK", block)
            got = R._inner_gap_stats(gap_in, n_in, at_in)
            for g, w in zip(got, want, strict=True):
                assert g.tolist() == w.tolist()
        # the median as pandas' group median, the first longest gap as idxmax
        ri = np.repeat(np.arange(len(n_in)), n_in)
        s = pd.Series(gap_in)
        assert ((want[0] + want[1]) / 2).tolist() == s.groupby(ri).median().tolist()
        assert want[2].tolist() == s.groupby(ri).idxmax().tolist()


def test_per_step_family_in_chunks_equals_one_bincount(monkeypatch):
    from cgprof.metrics import step_table

    rng = np.random.default_rng(9)
    for _ in range(50):
        m, n, k = int(rng.integers(1, 60)), int(rng.integers(1, 6)), int(rng.integers(2, 5))
        call_step = rng.integers(-1, n, m)
        live = (call_step >= 0) & (rng.random(m) < 0.8)
        fcode = rng.integers(-1, k - 1, m).astype(np.int8)
        dur = rng.integers(0, 10**6, m)
        bins = call_step[live] * k + fcode[live] + 1
        want_c = np.bincount(bins, minlength=n * k)[: n * k].reshape(n, k)
        want_h = np.bincount(bins, weights=dur[live].astype(np.float64),
                             minlength=n * k)[: n * k].reshape(n, k)
        for chunk in (1, 4, 1 << 20):
            monkeypatch.setattr(step_table, "_CHUNK", chunk)
            got_c, got_h = step_table._per_step_family(call_step, live, fcode, dur, n, k)
            assert got_c.tolist() == want_c.tolist()
            assert got_h.tolist() == want_h.tolist()


def test_busy_per_step_in_chunks_equals_the_sorted_sweep(monkeypatch):
    from cgprof.metrics import step_table

    rng = np.random.default_rng(10)
    for _ in range(200):
        m, n = int(rng.integers(1, 50)), int(rng.integers(1, 6))
        start = np.sort(rng.integers(0, 100, m))
        end = start + rng.integers(0, 30, m)
        o = np.lexsort((end, start))
        start, end = start[o], end[o]
        step = np.sort(rng.integers(-1, n, m))  # steps follow time; -1: no step
        if rng.random() < 0.5:
            step[rng.random(m) < 0.2] = -1
        mask = (step >= 0) & (rng.random(m) < rng.choice([1.0, 0.6]))
        assert step_table._steps_follow_time(step, start, end, mask)
        want = step_table._busy_per_step(step[mask], start[mask], end[mask], n)
        for chunk in (1, 2, 5, 1 << 20):
            monkeypatch.setattr(step_table, "_CHUNK", chunk)
            got = step_table._busy_per_step_chunked(step, start, end, n, mask)
            for k in want:
                assert got[k].tolist() == want[k].tolist(), (k, chunk)
    assert not step_table._steps_follow_time(np.array([1, 0]), np.array([0, 1]), np.array([1, 2]),
                                             None)


def test_gpu_ops_merge_of_sorted_sources_is_the_stable_sort(monkeypatch):
    from cgprof.metrics import gpu as GP

    rng = np.random.default_rng(11)
    for _ in range(300):
        k = int(rng.integers(1, 5))
        starts, ends = [], []
        for _ in range(k):
            m = int(rng.integers(0, 12)) if starts else int(rng.integers(1, 12))
            s = rng.integers(0, 15, m)
            e = s + rng.integers(0, 4, m)
            o = np.lexsort((e, s))
            starts.append(s[o])
            ends.append(e[o])
        masks = GP._merge_masks(starts, ends)
        s_all, e_all = np.concatenate(starts), np.concatenate(ends)
        order = np.lexsort((e_all, s_all))
        src = np.concatenate([np.full(len(s), j) for j, s in enumerate(starts)])
        if masks == [None]:
            assert k == 1
            continue
        assert masks is not None
        which = np.full(len(s_all), -1)
        for j, mask in enumerate(masks):
            which[mask] = j
        assert which.tolist() == src[order].tolist()
    monkeypatch.setattr(GP, "_MAX_TIES", 0)
    tied = ([np.array([1, 2]), np.array([2])], [np.array([3, 3]), np.array([3])])
    assert GP._merge_masks(*tied) is None


@pytest.mark.parametrize("name", ["mlp_train_eager", "mlp_train_graph", "ddp_mlp_train_graph",
                                  "user_train_graph"])
def test_launch_wait_per_step_in_chunks(traces_dir, monkeypatch, name):
    from cgprof.metrics import analyze, step_launch_wait, step_table

    r = analyze(traces_dir / f"{name}.sqlite")
    gaps, cs, n = r.step_gaps, r.steps.call_steps, len(r.steps.steps)
    rows = np.flatnonzero(step_table._is_value(gaps["kind"], "launch_bound"))
    want = step_launch_wait._wait_per_step(gaps, rows, cs, n)
    assert want.tolist() == r.steps.steps["launch_wait_ns"].tolist()
    for chunk in (1, 5, 1 << 20):
        monkeypatch.setattr(step_table, "_CHUNK", chunk)
        got = step_launch_wait._wait_per_step_chunked(gaps, rows, cs, n)
        if name == "ddp_mlp_train_graph":
            assert got is None  # two processes
        elif name == "user_train_graph":  # dense correlation ids: the lookup table
            assert got is not None
        if got is not None:
            assert got.tolist() == want.tolist()


def _synthetic(rng, n, devices, pids=(7,)):
    start = np.sort(rng.integers(0, 20 * n, n))
    end = start + rng.integers(1, 40, n)
    o = np.lexsort((end, start))
    start, end = start[o], end[o]
    corr = rng.integers(1, n // 2 + 2, n)  # shared ids: replays of several ops
    ops = pd.DataFrame({
        "start_ns": start, "end_ns": end,
        "device_id": rng.choice(devices, n).astype(np.int64),
        "stream_id": rng.choice([3, 7, 9], n).astype(np.int64),
        "pid": rng.choice(pids, n).astype(np.int64),
        "corr_id": corr.astype(np.int64),
        "kind": pd.Categorical(rng.choice(["kernel", "memcpy", "memset"], n)),
        "in_graph": rng.random(n) < 0.4,
        "is_input_copy": np.zeros(n, dtype=bool),
    })
    ids = np.unique(corr)
    ids = ids[rng.random(len(ids)) < 0.8]  # some ops without a launch call
    m = len(ids) + 5
    c_start = np.sort(rng.integers(0, 20 * n, m))
    fam = rng.choice(["kernel_launch", "graph_launch", "memcpy", "sync", "other"], m)
    calls = pd.DataFrame({
        "pid": np.full(m, pids[0], dtype=np.int64),
        "corr_id": np.concatenate([ids, 10**6 + np.arange(5)]).astype(np.int64),
        "start_ns": c_start, "end_ns": c_start + rng.integers(0, 30, m),
        "name": pd.Categorical(np.where(fam == "sync", "cudaDeviceSynchronize",
                                        np.where(fam == "graph_launch", "cudaGraphLaunch",
                                                 "cudaLaunchKernel"))),
        "family": pd.Categorical(fam),
    })
    return ops, calls


@pytest.mark.parametrize("devices", [[0], [0, 1], [1, 4, 5]])
def test_chunked_gaps_on_synthetic_devices(monkeypatch, devices):
    rng = np.random.default_rng(len(devices))
    for _ in range(10):
        ops, calls = _synthetic(rng, int(rng.integers(20, 200)), devices)
        lo, hi = int(ops["start_ns"].min()), int(ops["end_ns"].max())
        windows = [None, (lo - 5, hi + 5), (lo, hi), (lo + (hi - lo) // 4, hi - (hi - lo) // 4)]
        monkeypatch.setattr(gap_chunked, "CHUNKED_MIN_OPS", 10**9)
        slow = [gap_measure.gpu_gaps(ops, calls, window=w) for w in windows]
        monkeypatch.setattr(gap_chunked, "CHUNKED_MIN_OPS", 0)
        for chunk in (3, 17, 1 << 20):
            monkeypatch.setattr(iv, "SWEEP_CHUNK", chunk)
            assert gap_chunked._Chunked.of(ops, calls) is not None
            fast = [gap_measure.gpu_gaps(ops, calls, window=w) for w in windows]
            for f, s in zip(fast, slow, strict=True):
                pdt.assert_frame_equal(f.gaps, s.gaps)
                for table in ("devices", "by_kind", "histogram", "streams"):
                    pdt.assert_frame_equal(getattr(f, table), getattr(s, table))
