"""The gap histograms of windows of steps (cgprof.metrics.gap_sinks.GapBins) filled by the gap
measurement itself (GapAsk.bins), a slice of the timeline at a time, with no table of every
gap: exactly cgprof.diff's histogram of a view computed from the span's gap table (its gaps
whose start lies in the window steps' extents, window edges left out), whatever the windows
(every step, a third, one step, a mode's steps, every other step), the cuts (one slice,
small ones, empty ones, between two ops that start together), the floor, one device or two;
in the sweep and in every fallback (too few ops, a check failing before or after the sweep
began, no inner gap, devices far apart, every gap listed); and bin_gaps / extent_positions
against the diff's binning on random data."""

from __future__ import annotations

import dataclasses
import importlib
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pandas.testing as pdt
import pytest
from conftest import Slices, every_cut, random_cuts, spy_sweeps, wait_table, with_tied_copies

import cgprof
from cgprof.metrics import chunked, gap_chunked, gap_measure, gap_result, gap_slices
from cgprof.metrics.gap_measure import measure_gaps
from cgprof.metrics.gap_reduced import measure_gaps_reduced
from cgprof.metrics.gap_sinks import GAP_BIN_EDGES_US, GapBins, bin_gaps, extent_positions
from cgprof.metrics.gap_slices import GapAsk
from cgprof.metrics.gpu import gpu_ops
from cgprof.metrics.launches import api_calls
from cgprof.metrics.steps import compute_steps

pytestmark = pytest.mark.timeout(60)

D = importlib.import_module("cgprof.diff")  # (the package's ``diff`` is the function)

REPO = Path(__file__).resolve().parent.parent
TRACES = sorted((REPO / "traces").glob("*.sqlite"))
#: The ops' columns the chunked analysis reads a slice at a time (chunked._OP_COLUMNS).
COLUMNS = ["start_ns", "end_ns", "device_id", "stream_id", "pid", "corr_id", "kind", "in_graph"]


# -- the diff's way, as cgprof/diff.py had it before GapBins (_assign, _hist_of) -----------

#: cgprof.diff's GAP_BIN_EDGES_US as it defines it.
_DIFF_EDGES_US = tuple(float(f"{v:.6g}") for v in 10.0 ** np.arange(-2.0, 6.0001, 0.25))


def _diff_assign(starts: np.ndarray, ext_cummax: np.ndarray, t: np.ndarray) -> np.ndarray:
    j = np.searchsorted(starts, t, "right") - 1
    ok = j >= 0
    jj = np.where(ok, j, 0)
    ok &= t < ext_cummax[jj]
    return np.where(ok, j, -1)


def _diff_hist_of(v: np.ndarray) -> pd.DataFrame:
    edges = np.array(_DIFF_EDGES_US, dtype=np.float64)
    b = np.clip(np.searchsorted(edges, v / 1000.0, "right") - 1, 0, len(edges) - 2)
    count = np.bincount(b, minlength=len(edges) - 1)
    total = np.bincount(b, weights=v, minlength=len(edges) - 1)
    return pd.DataFrame({"bin_lo_us": edges[:-1], "bin_hi_us": edges[1:],
                         "count": count.astype(np.int64), "total_ns": total.astype(np.int64)})


def _diff_histogram(gaps: pd.DataFrame, extents: tuple[np.ndarray, np.ndarray]) -> pd.DataFrame:
    """The view's histogram of a gap table (cgprof.diff._WindowGaps.histogram)."""
    starts, ext_cummax = extents
    inner = (_diff_assign(starts, ext_cummax, gaps["start_ns"].to_numpy(np.int64)) >= 0) & (
        gaps["kind"] != "window_edge").to_numpy(dtype=bool)
    return _diff_hist_of(gaps["gap_ns"].to_numpy(dtype=np.float64)[inner])


# -- the traces ------------------------------------------------------------------------

@dataclasses.dataclass
class _Case:
    calls: pd.DataFrame
    ops: pd.DataFrame  # the narrow columns
    span: tuple[int, int]
    window: tuple[int, int] | None  # the report's
    wait: tuple[np.ndarray, int, int]
    #: name -> (starts, ext_cummax) of a window of steps, as cgprof.diff.view makes them
    extents: dict[str, tuple[np.ndarray, np.ndarray]]


_CACHE: dict[Path, _Case | None] = {}


def _case(path: Path) -> _Case | None:
    """The trace's calls, narrow ops, span, windows of steps and wait lookup; None when the
    chunked path does not take it."""
    if path not in _CACHE:
        trace = cgprof.load(path, cache=False)
        calls = api_calls(trace, derived=False)
        ops = gpu_ops(trace)
        steps = compute_steps(trace, calls, ops)
        span = steps.span()
        if chunked.plan(calls, steps.steps, 1) is None or span is None:
            _CACHE[path] = None
        else:
            _CACHE[path] = _Case(calls, ops[COLUMNS], span, steps.window(), wait_table(steps),
                                 _extents(steps.steps))
    return _CACHE[path]


def _extents(st: pd.DataFrame) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Windows of the step table's steps (each non-empty one): every step, the steady ones,
    each mode's, the middle third, one step, every other step; their host starts and the
    running max of their extents' ends (cgprof.diff.view's)."""
    n = len(st)
    mode = st["mode"].astype(str).to_numpy()
    picks = {"all": np.arange(n), "steady": np.flatnonzero(np.isin(mode, ["eager", "graph"])),
             **{m: np.flatnonzero(mode == m) for m in ("eager", "graph", "warmup")},
             "middle": np.arange(n // 3, 2 * n // 3), "one": np.array([n // 2]),
             "every other": np.arange(0, n, 2)}
    out = {}
    for name, rows in picks.items():
        if not len(rows):
            continue
        sel = st.iloc[rows]
        starts = sel["start_ns"].to_numpy(np.int64)
        assert (np.diff(starts) >= 0).all()
        gpu_end = sel["gpu_end_ns"].astype("Float64").fillna(0).to_numpy(np.float64).astype(
            np.int64)
        extent = np.maximum(sel["end_ns"].to_numpy(np.int64), gpu_end)
        out[name] = (starts, np.maximum.accumulate(extent))
    return out


def _taken(path: Path) -> _Case:
    case = _case(path)
    if case is None:
        pytest.skip("not a trace the chunked path takes")
    return case


class _Wanted:
    """The diff's histograms from ``measure_gaps(ops, calls, window).listed(min_gap_ns)``,
    each gap table measured once."""

    def __init__(self, ops: pd.DataFrame, calls: pd.DataFrame,
                 extents: dict[str, tuple[np.ndarray, np.ndarray]]):
        self.ops, self.calls, self.extents = ops, calls, extents
        self.tables: dict[Any, pd.DataFrame] = {}

    def __call__(self, window: tuple[int, int] | None, min_gap_ns: int) -> list[pd.DataFrame]:
        if window not in self.tables:
            saved = gap_chunked.CHUNKED_MIN_OPS
            # the whole-array measurement, whatever a test forces
            gap_chunked.CHUNKED_MIN_OPS = 1 << 21
            try:
                self.tables[window] = measure_gaps(self.ops, self.calls, window=window).gaps
            finally:
                gap_chunked.CHUNKED_MIN_OPS = saved
        listed = gap_result._listed(self.tables[window], min_gap_ns)
        return [_diff_histogram(listed, e) for e in self.extents.values()]


def _bins(extents: dict[str, tuple[np.ndarray, np.ndarray]]) -> tuple[GapBins, ...]:
    return tuple(GapBins(*e) for e in extents.values())


def _same(bins: tuple[GapBins, ...], want: list[pd.DataFrame], what: str) -> None:
    assert len(bins) == len(want)
    for b, w in zip(bins, want, strict=True):
        assert b.count.dtype == b.total_ns.dtype == np.int64
        got = b.frame()
        pdt.assert_frame_equal(got, w, check_exact=True, obj=what)
        assert list(got.dtypes) == list(w.dtypes), what


@pytest.fixture
def swept(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """The chunked sweep from one op; counts the sweeps finished and the fallbacks (and in
    ``swept["slices"]``, the slices swept, whatever became of their sweep)."""
    return spy_sweeps(monkeypatch)


def _asks(case: _Case) -> list[GapAsk]:
    """Asks with bins of every window of steps: the span's waits alone (what the chunked
    analysis asks), with a floor of 5 us, and with the tables (limit 5); the report's window
    with a floor of 1 us."""
    w = case.wait
    plain = [GapAsk(case.span, wait=w, tables=False),
             GapAsk(case.span, 5000, wait=w, tables=False),
             GapAsk(case.span, 0, 5, w), GapAsk(case.window, 1000, 5)]
    return [dataclasses.replace(a, bins=_bins(case.extents)) for a in plain]


def _run(ops: pd.DataFrame, calls: pd.DataFrame, cuts: list[int], asks: list[GapAsk],
         want: _Wanted, what: str, twins: bool = False) -> Slices:
    """Measure ``asks`` from one read: their bins are the diff's histograms. ``twins``: each
    beside the same ask without bins, whose results are the same."""
    slices = Slices(ops, cuts)
    every = [b for a in asks for b in ((a, dataclasses.replace(a, bins=())) if twins else (a,))]
    got = gap_slices.measure_gaps_sliced_each(slices, calls, every)
    for a in asks:
        _same(a.bins, want(a.window, a.min_gap_ns), what)
    for (r, per), (r0, per0) in zip(got[0::2], got[1::2], strict=True) if twins else ():
        assert (per is None) == (per0 is None) and (r is None) == (r0 is None), what
        if per is not None:
            np.testing.assert_array_equal(per, per0, err_msg=what)
        if r is not None and r0 is not None:
            for t in ("devices", "by_kind", "histogram", "gaps"):
                pdt.assert_frame_equal(getattr(r, t), getattr(r0, t), check_exact=True)
    return slices


# -- tests -----------------------------------------------------------------------------

def test_the_bins_are_the_diffs() -> None:
    """bin_gaps, GapBins.frame and extent_positions against cgprof.diff's binning and step
    lookup on random data: lengths around every edge (float64 us rounding), 0, past the
    last edge; steps with overlapping extents, times on every boundary."""
    assert GAP_BIN_EDGES_US == D.GAP_BIN_EDGES_US == _DIFF_EDGES_US
    assert len(GAP_BIN_EDGES_US) == 33
    rng = np.random.default_rng(7)
    edges_ns = np.round(np.array(GAP_BIN_EDGES_US) * 1000).astype(np.int64)
    near = (edges_ns[:, None] + np.arange(-2, 3)[None, :]).ravel()
    v = np.concatenate([near, [0, 1, 9, 10, 11, 10**12, 2**40], rng.integers(
        0, 10**10, 5000), np.exp(rng.uniform(0, 23, 5000)).astype(np.int64)])
    v = v[v >= 0]
    count, total = bin_gaps(v)
    want = _diff_hist_of(v.astype(np.float64))
    assert count.dtype == total.dtype == np.int64
    np.testing.assert_array_equal(count, want["count"].to_numpy())
    np.testing.assert_array_equal(total, want["total_ns"].to_numpy())
    assert (count > 0).sum() > len(count) // 2 and count.sum() == len(v)
    empty = bin_gaps(np.zeros(0, dtype=np.int64))
    assert not empty[0].any() and not empty[1].any() and len(empty[0]) == len(count)

    starts = np.sort(rng.integers(0, 10**6, 300))
    ends = starts + rng.integers(0, 20000, 300)
    ext_cummax = np.maximum.accumulate(ends)
    t = np.concatenate([starts, starts - 1, ends, ends - 1, ext_cummax, [-5, 2 * 10**6],
                        rng.integers(-1000, 10**6 + 30000, 20000)])
    pos = extent_positions(starts, ext_cummax, t)
    np.testing.assert_array_equal(pos, _diff_assign(starts, ext_cummax, t))
    assert (pos >= 0).any() and (pos < 0).any()
    assert (extent_positions(starts[:0], ext_cummax[:0], t) == -1).all()

    b = GapBins(starts, ext_cummax)
    g = rng.integers(0, 10**8, len(t))
    b.add(t[:1000], g[:1000])
    b.add(t[1000:], g[1000:])
    inside = _diff_assign(starts, ext_cummax, t) >= 0
    pdt.assert_frame_equal(b.frame(), _diff_hist_of(g[inside].astype(np.float64)),
                           check_exact=True)


@pytest.mark.parametrize("path", [REPO / "traces" / f"{n}.sqlite" for n in (
    "mlp_train_graph", "resnet18_train_eager", "transformer_train_graph", "mlp_infer_graph")],
    ids=lambda p: p.name)
def test_the_views_histogram_is_the_diffs(path: Path) -> None:
    """cgprof.diff's own histogram of a whole analysis's gaps (_WindowGaps.histogram, made
    through GapBins) is the old way's, window by window."""
    case = _taken(path)
    table = gap_result._listed(measure_gaps(case.ops, case.calls, window=case.span).gaps, 0)
    for starts, ext_cummax in case.extents.values():
        got = D._WindowGaps(table, starts, ext_cummax, np.arange(len(starts))).histogram()
        want = _diff_histogram(table, (starts, ext_cummax))
        assert want["count"].sum() > 0 or len(starts) < 3
        pdt.assert_frame_equal(got, want, check_exact=True)


#: Traces of every kind the chunked path takes: eager, graphed (capture, warm-up),
#: graph-level replay rows, requests served with idle time between them, a scored step
#: choice, a ResNet's many small kernels, a transformer's.
VARIED = [p for p in TRACES if p.stem in (
    "mlp_train_eager", "mlp_train_graph", "mlp_train_graph_graphtrace", "mlp_serve_graph",
    "user_train_graph", "resnet18_infer_eager", "transformer_train_graph")]


@pytest.mark.parametrize("path", VARIED, ids=lambda p: p.name)
def test_swept_bins_are_the_diffs_histograms(path: Path, swept: dict[str, int],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Traces of every kind the chunked path takes, swept in one slice, slices of 50 rows and random
    ones (some empty), fill chunks of 37 and 5 ops: each window of steps' bins are the
    diff's histogram of the span's (or the report window's) listed gaps."""
    case = _taken(path)
    ops, calls, n = case.ops, case.calls, len(case.ops)
    want = _Wanted(ops, calls, case.extents)
    assert want(case.span, 0)[0]["count"].sum() > 10  # every step's: some gaps
    runs = [([0, n], gap_chunked.FILL_CHUNK, slice(None), True),  # and each beside its twin
            (every_cut(n, 50), 37, slice(0, 3), False),
            (random_cuts(n, n, 80), 5, slice(1, None, 2), False)]
    for cuts, fill, some, twins in runs:
        monkeypatch.setattr(gap_chunked, "FILL_CHUNK", fill)
        slices = _run(ops, calls, cuts, _asks(case)[some], want,
                      f"{path.name}: {len(cuts)} cuts", twins)
        assert slices.reads == 1
    assert (swept["sweeps"], swept["fallbacks"]) == (2 * 4 + 3 + 2, 0)


def test_a_slice_per_op(traces_dir: Path, swept: dict[str, int],
                        monkeypatch: pytest.MonkeyPatch) -> None:
    """One op per slice: every gap found across a slice boundary."""
    case = _taken(traces_dir / "mlp_train_graph_graphtrace.sqlite")
    monkeypatch.setattr(gap_chunked, "FILL_CHUNK", 5)
    _run(case.ops, case.calls, every_cut(len(case.ops), 1), _asks(case)[1:3],
         _Wanted(case.ops, case.calls, case.extents), "a slice per op")
    assert (swept["sweeps"], swept["fallbacks"]) == (2, 0)


@pytest.mark.parametrize("name", ["mlp_infer_graph", "resnet18_infer_eager"])
def test_cuts_between_ops_that_start_together(traces_dir: Path, name: str,
                                              swept: dict[str, int],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Slices cut exactly between two ops that start together, one device and two (the
    bins take every device's gaps)."""
    case = _taken(traces_dir / f"{name}.sqlite")
    tied, rows = with_tied_copies(case.ops)
    n = len(tied)
    start = tied["start_ns"].to_numpy()
    assert (start[rows] == start[np.array(rows) - 1]).sum() > len(rows) // 2
    two = tied.assign(device_id=np.arange(n) // 2 % 2)
    for ops, fill in ((tied, 37), (two, 5)):
        monkeypatch.setattr(gap_chunked, "FILL_CHUNK", fill)
        want = _Wanted(ops, case.calls, case.extents)
        _run(ops, case.calls, [0, *rows, n], _asks(case)[:3], want, f"{name} ties")
    assert (swept["sweeps"], swept["fallbacks"]) == (2 * 3, 0)


def test_fallback_bins(traces_dir: Path, swept: dict[str, int],
                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the sweep does not apply, the bins come from the whole measurement's table:
    below CHUNKED_MIN_OPS, every gap listed, a check failing before the sweep began (held)
    or after (read again), while sweeping the held slices, ops out of order, no inner gap,
    devices far apart; one ask swept beside one falling back. A sweep given up leaves no
    count behind."""
    monkeypatch.setattr(gap_chunked, "FILL_CHUNK", 37)
    case = _taken(traces_dir / "resnet18_train_graph.sqlite")
    ops, calls, n = case.ops, case.calls, len(case.ops)
    start, end = ops["start_ns"].to_numpy(), ops["end_ns"].to_numpy()
    span = case.span
    inside = np.flatnonzero((start >= span[0]) & (end <= span[1]))
    live = len(gap_measure._live_ops(ops, span))
    cuts = every_cut(n, 50)

    def run(ops: pd.DataFrame, reads: int, sweeps: int, fallbacks: int, what: str,
            asks: list[GapAsk] | None = None) -> int:
        before = {"slices": 0, **swept}
        if asks is None:
            asks = [GapAsk(span, wait=case.wait, tables=False),
                    GapAsk(span, 5000, wait=case.wait, tables=False)]
        asks = [dataclasses.replace(a, bins=_bins(case.extents)) for a in asks]
        slices = _run(ops, calls, cuts, asks, _Wanted(ops, calls, case.extents), what)
        assert (slices.reads, swept["sweeps"] - before["sweeps"],
                swept["fallbacks"] - before["fallbacks"]) == (reads, sweeps, fallbacks), what
        return swept.get("slices", 0) - before["slices"]

    run(ops, 1, 2, 0, "swept")
    run(ops, 1, 0, 1, "every gap listed", [GapAsk(span, 0, None, case.wait)])
    for at, reads in ((int(inside[5]), 1), (int(inside[-5]), 2)):
        other = ops.assign(pid=np.where(np.arange(n) == at, 99, ops["pid"].to_numpy()))
        run(other, reads, 0, 2, f"pid at {at}")
    a, b, c = (int(inside[i]) for i in (-300, -200, -100))
    run(pd.concat([ops.iloc[:a], ops.iloc[b:c], ops.iloc[a:b], ops.iloc[c:]]), 2, 0, 2,
        "out of order")
    run(ops.assign(end_ns=int(end.max())), 2, 0, 2, "no inner gap")
    run(ops.assign(device_id=np.where(np.arange(n) < n // 2, 0, 70000)), 2, 0, 2,
        "devices far apart")
    run(ops, 1, 1, 1, "mixed", [GapAsk(span, 0, 5, case.wait), GapAsk(span, 0, None)])
    # the sweep from a third of the live ops on: the held slices swept first; with another
    # process's op in the last held slice, that sweep fails after taking in the others
    monkeypatch.setattr(gap_chunked, "CHUNKED_MIN_OPS", live // 3)
    run(ops, 1, 2, 0, "from a third")
    held = int(inside[live // 3 - 20])
    other = ops.assign(pid=np.where(np.arange(n) == held, 99, ops["pid"].to_numpy()))
    assert run(other, 1, 0, 2, "fails in the held slices") > 2 * 10  # (10 and more each)
    monkeypatch.setattr(gap_chunked, "CHUNKED_MIN_OPS", 1 << 21)
    run(ops, 1, 0, 2, "too few")


@pytest.mark.parametrize("devices", [1, 2])
def test_measure_gaps_reduced_fills_bins(traces_dir: Path, devices: int,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """measure_gaps_reduced called directly with bins: through the chunked sweep
    (_Chunked.run, one device and two) and the whole measurement (fewer ops than
    CHUNKED_MIN_OPS), waits alone and tables, floors 0 and 5 us; the results unchanged."""
    monkeypatch.setattr(gap_chunked, "FILL_CHUNK", 37)
    case = _taken(traces_dir / "transformer_train_eager.sqlite")
    ops = case.ops
    if devices == 2:
        ops = ops.assign(device_id=(np.arange(len(ops)) % 3 == 0).astype(np.int64))
    want = _Wanted(ops, case.calls, case.extents)
    runs = 0
    spy = gap_chunked._Chunked.run

    def count_runs(self: Any, *a: Any) -> Any:
        nonlocal runs
        got = spy(self, *a)
        runs += got is not None
        return got

    monkeypatch.setattr(gap_chunked._Chunked, "run", count_runs)
    for least, swept in ((1, True), (1 << 21, False)):
        monkeypatch.setattr(gap_chunked, "CHUNKED_MIN_OPS", least)
        for m, limit, tables in ((0, None, False), (5000, 5, True), (0, 5, True)):
            bins = _bins(case.extents)
            before = runs
            got = measure_gaps_reduced(ops, case.calls, case.span, m, limit, case.wait,
                                       tables, bins)
            plain = measure_gaps_reduced(ops, case.calls, case.span, m, limit, case.wait,
                                         tables)
            assert runs - before == 2 * swept
            _same(bins, want(case.span, m), f"reduced {least} {m}")
            np.testing.assert_array_equal(got[1], plain[1])
            if tables:
                assert got[0] is not None and plain[0] is not None
                pdt.assert_frame_equal(got[0].gaps, plain[0].gaps, check_exact=True)


def test_a_dropped_batch_is_caught(traces_dir: Path, swept: dict[str, int],
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The comparison fails where the sweep loses one batch of gaps (a slice's), or where
    the bins are filled twice: the tests above can fail."""
    case = _taken(traces_dir / "mlp_train_eager.sqlite")
    ops, calls = case.ops, case.calls
    want = _Wanted(ops, calls, case.extents)(case.span, 0)
    monkeypatch.setattr(gap_chunked, "FILL_CHUNK", 37)
    add = GapBins.add
    calls_made = {"n": 0}

    def lossy(self: GapBins, start_ns: np.ndarray, gap_ns: np.ndarray) -> None:
        calls_made["n"] += 1
        if calls_made["n"] != 2 * len(case.extents) + 1:  # the third batch, every step's
            add(self, start_ns, gap_ns)

    monkeypatch.setattr(GapBins, "add", lossy)
    bins = _bins(case.extents)
    gap_slices.measure_gaps_sliced_each(Slices(ops, every_cut(len(ops), 50)), calls,
                                        [GapAsk(case.span, wait=case.wait, tables=False,
                                                bins=bins)])
    assert calls_made["n"] > 3 * len(case.extents)
    with pytest.raises(AssertionError):
        _same(bins, want, "lossy")
    _same(bins[1:], want[1:], "the others")  # only every step's bins lost a batch
    monkeypatch.setattr(GapBins, "add", add)
    gap_slices.measure_gaps_sliced_each(Slices(ops, [0, len(ops)]), calls,
                                        [GapAsk(case.span, wait=case.wait, tables=False,
                                                bins=bins)])
    with pytest.raises(AssertionError):  # filled twice
        _same(bins, want, "twice")


def test_an_empty_window_counts_nothing(traces_dir: Path, swept: dict[str, int]) -> None:
    """Bins of no step, beside bins of every step: zeros."""
    case = _taken(traces_dir / "user_train.sqlite")
    none = np.zeros(0, dtype=np.int64)
    bins = (GapBins(none, none), GapBins(*case.extents["all"]))
    gap_slices.measure_gaps_sliced_each(Slices(case.ops, every_cut(len(case.ops), 100)), case.calls,
                                        [GapAsk(case.span, tables=False, bins=bins)])
    assert not bins[0].count.any() and not bins[0].total_ns.any()
    assert bins[1].count.sum() > 0
    assert (swept["sweeps"], swept["fallbacks"]) == (1, 0)
