"""The gaps a timeline of a window of steps draws (cgprof.metrics.gap_sinks.GapTimeline) filled by
the gap measurement itself (GapAsk.bins / measure_gaps_reduced's ``bins``), a batch of gaps
at a time, with no table of every gap: exactly what the measurement's own gap table says,
whatever the windows of steps (every step, the first third, a middle slice, one step), the
number of gaps kept (1, 5, some, more than there are), the cuts (one slice, small ones,
empty ones, one op each, between two ops that start together), the floor, one device or
two; in the whole-table fallback, in the chunked sweep of one frame (window-edge gaps
included: a GapTimeline takes them, GapBins does not), in the sliced sweep and in every
fallback after a sweep was given up (which must leave nothing behind: no gap counted twice).

The reference, from the full listed gap table G of the same measurement (``measure_gaps(ops,
calls, window).listed(min_gap_ns)``, or a real analysis's ``step_gaps``), a window start t0
and the window steps' running-max extent ends ``ends``:

* hit: the rows with end_ns > t0 and start_ns < ends[-1];
* ``counts[k]``: the hit rows with start_ns < ends[k], exactly;
* ``frame()``: B is the keep-th smallest start among the hit rows (the largest where there
  are at most ``keep``). What is asserted is the property a timeline needs, not "exactly the
  first ``keep`` rows": GapTimeline only lowers its ``bound`` (no row starting after it is
  kept) when one batch holds more than ``keep`` hit rows or its kept rows pass 2 * keep, so
  its frame() may also hold hit rows starting after B (about 2 * keep rows at most, more with
  ties; e.g. two batches of one gap each with keep=1 keep both). So: frame()'s rows
  starting at or before B are exactly the expected ones (device_id start_ns end_ns gap_ns
  as int64, kind next_api as strings, in the table's (device, start) order), and every row
  frame() holds is a hit row of G (same values), each once, in (device, start) order.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from conftest import Slices, every_cut, random_cuts, spy_sweeps, wait_table, with_tied_copies

import cgprof
from cgprof.metrics import chunked, gap_chunked, gap_measure, gap_result, gap_slices
from cgprof.metrics.gap_measure import measure_gaps
from cgprof.metrics.gap_reduced import measure_gaps_reduced
from cgprof.metrics.gap_result import GAP_KINDS
from cgprof.metrics.gap_sinks import GapBatch, GapTimeline
from cgprof.metrics.gap_slices import GapAsk
from cgprof.metrics.gpu import gpu_ops
from cgprof.metrics.launches import api_calls
from cgprof.metrics.steps import compute_steps
from cgprof.metrics.windows import extent_ends

pytestmark = pytest.mark.timeout(120)

REPO = Path(__file__).resolve().parent.parent
TRACES = REPO / "traces"
#: The ops' columns the chunked analysis reads a slice at a time (chunked._OP_COLUMNS).
COLUMNS = ["start_ns", "end_ns", "device_id", "stream_id", "pid", "corr_id", "kind", "in_graph"]
INTS = ["device_id", "start_ns", "end_ns", "gap_ns"]
TEXTS = ["kind", "next_api"]
FRAME = [*INTS, *TEXTS]
#: Graphed, eager, served requests, a scored step choice (the sliced sweep of a transformer
#: and of the graphed inference run: test_real_analysis_step_gaps, test_two_devices_...).
SWEPT_TRACES = ["mlp_train_graph", "resnet18_train_eager", "mlp_serve_graph",
                "user_train_graph"]


# -- the traces ------------------------------------------------------------------------

@dataclasses.dataclass
class _Case:
    calls: pd.DataFrame
    ops: pd.DataFrame  # the narrow columns
    span: tuple[int, int]
    window: tuple[int, int] | None  # the report's
    wait: tuple[np.ndarray, int, int] | None
    #: name -> (t0, ends) of a window of steps: its first step's host start and the running
    #: max of its steps' extent ends
    windows: dict[str, tuple[int, np.ndarray]]
    sweeps: bool  # the chunked path takes the trace


_CACHE: dict[Path, _Case] = {}


def _case(path: Path) -> _Case:
    if path not in _CACHE:
        trace = cgprof.load(path, cache=False)
        calls = api_calls(trace, derived=False)
        ops = gpu_ops(trace)
        steps = compute_steps(trace, calls, ops)
        span = steps.span()
        assert span is not None
        sweeps = chunked.plan(calls, steps.steps, 1) is not None
        _CACHE[path] = _Case(calls, ops[COLUMNS], span, steps.window(),
                             wait_table(steps) if sweeps else None, _windows(steps.steps),
                             sweeps)
    return _CACHE[path]


def _taken(path: Path) -> _Case:
    case = _case(path)
    if not case.sweeps:
        pytest.skip("not a trace the chunked path takes")
    return case


def _windows(st: pd.DataFrame) -> dict[str, tuple[int, np.ndarray]]:
    """Windows of the step table's steps: every step, the first third, a middle slice, one
    step; each one's t0 and ends (cgprof.diff.view's extents)."""
    n = len(st)
    picks = {"all": np.arange(n), "first third": np.arange(max(1, n // 3)),
             "middle": np.arange(n // 3, max(n // 3 + 1, 2 * n // 3)),
             "one": np.array([n // 2])}
    out = {}
    for name, rows in picks.items():
        sel = st.iloc[rows]
        starts = sel["start_ns"].to_numpy(np.int64)
        assert (np.diff(starts) >= 0).all()
        out[name] = (int(starts[0]), np.maximum.accumulate(extent_ends(sel)))
    return out


class _Reference:
    """``measure_gaps(ops, calls, window).listed(min_gap_ns)``, each table measured once,
    by the whole-array measurement whatever a test forces."""

    def __init__(self, ops: pd.DataFrame, calls: pd.DataFrame):
        self.ops, self.calls = ops, calls
        self.tables: dict[Any, pd.DataFrame] = {}

    def __call__(self, window: tuple[int, int] | None, min_gap_ns: int) -> pd.DataFrame:
        if window not in self.tables:
            saved = gap_chunked.CHUNKED_MIN_OPS
            gap_chunked.CHUNKED_MIN_OPS = 1 << 21
            try:
                self.tables[window] = measure_gaps(self.ops, self.calls, window=window).gaps
            finally:
                gap_chunked.CHUNKED_MIN_OPS = saved
        return gap_result._listed(self.tables[window], min_gap_ns)


# -- the reference and the comparison --------------------------------------------------

@dataclasses.dataclass
class _Want:
    name: str
    t0: int
    ends: np.ndarray
    keep: int


Timelines = list[tuple[_Want, GapTimeline]]


def _timelines(table: pd.DataFrame, windows: dict[str, tuple[int, np.ndarray]],
               names: tuple[str, ...] | None = None) -> Timelines:
    """A GapTimeline per window of steps (those of ``names``, default every one) and keep
    (1, 5, a third of the window's gaps, more than there are), the keeps chosen from the
    reference table ``table``."""
    out = []
    ref = _Table(table)
    for name, (t0, ends) in windows.items():
        if names is not None and name not in names:
            continue
        n = int(ref.hit(t0, ends).sum())
        for keep in sorted({1, 5, max(2, n // 3), n + 7}):
            out.append((_Want(name, t0, ends.copy(), keep), GapTimeline(t0, ends, keep)))
    return out


def _sinks(tls: Timelines) -> tuple[GapTimeline, ...]:
    return tuple(t for _, t in tls)


class _Table:
    """A reference gap table's columns (ints as int64, kind and next_api as strings), and
    each row's position by (device, start): a gap's identity."""

    def __init__(self, table: pd.DataFrame):
        self.ints = {c: table[c].to_numpy(np.int64) for c in INTS}
        self.texts = {c: table[c].astype(str).to_numpy(dtype=object) for c in TEXTS}
        dev, start = self.ints["device_id"], self.ints["start_ns"]
        # the table's order, (device, start), each pair once
        assert ((np.diff(dev) > 0) | ((np.diff(dev) == 0) & (np.diff(start) > 0))).all()
        self.row = {k: i for i, k in enumerate(zip(dev.tolist(), start.tolist(), strict=True))}

    def hit(self, t0: int, ends: np.ndarray) -> np.ndarray:
        return (self.ints["end_ns"] > t0) & (self.ints["start_ns"] < ends[-1])


def _expected(ref: _Table, w: _Want) -> tuple[np.ndarray, int | None, np.ndarray]:
    """counts, B (None: no hit row) and the rows (positions in the table) frame() must
    hold up to B."""
    hit = ref.hit(w.t0, w.ends)
    start = ref.ints["start_ns"]
    hs = np.sort(start[hit])
    counts = np.searchsorted(hs, w.ends, "left").astype(np.int64)
    if not len(hs):
        return counts, None, np.zeros(0, dtype=np.int64)
    bound = int(hs[min(w.keep, len(hs)) - 1])
    return counts, bound, np.flatnonzero(hit & (start <= bound))


def _same_one(w: _Want, tl: GapTimeline, ref: _Table, what: str) -> None:
    what = f"{what} [{w.name}, keep {w.keep}]"
    counts, bound, rows = _expected(ref, w)
    assert tl.counts.dtype == np.int64, what
    np.testing.assert_array_equal(tl.counts, counts, err_msg=what)
    got = tl.frame()
    assert list(got.columns) == FRAME, what
    assert all(got[c].dtype == np.int64 for c in INTS), (what, got.dtypes)
    if bound is None:
        assert not len(got), what
        return
    ints = {c: got[c].to_numpy(np.int64) for c in INTS}
    texts = {c: got[c].astype(str).to_numpy(dtype=object) for c in TEXTS}
    start = ints["start_ns"]
    # each row a row of the table (same values), each once, in its order, a hit row
    at = np.array([ref.row.get(k, -1) for k in zip(ints["device_id"].tolist(),
                                                   start.tolist(), strict=True)],
                  dtype=np.int64)
    assert (at >= 0).all(), (what, got[at < 0].head(3))
    for c in INTS:
        np.testing.assert_array_equal(ints[c], ref.ints[c][at], err_msg=f"{what}: {c}")
    for c in TEXTS:
        assert (texts[c] == ref.texts[c][at]).all(), (what, c)
    assert (np.diff(at) > 0).all(), (what, "order or a row twice")
    assert ref.hit(w.t0, w.ends)[at].all(), what
    # the earliest: exactly the expected rows up to B
    np.testing.assert_array_equal(at[start <= bound], rows, err_msg=f"{what}: up to B")


def _same(tls: Timelines, table: pd.DataFrame, what: str) -> None:
    assert tls
    ref = _Table(table)
    for w, tl in tls:
        _same_one(w, tl, ref, what)


# -- ways of measuring -----------------------------------------------------------------


@pytest.fixture
def swept(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """The chunked sweep from one op; counts the sliced sweeps finished, the fallbacks, the
    slices swept (whatever became of their sweep), and the batches and tables handed to
    GapTimelines."""
    seen = spy_sweeps(monkeypatch)
    seen.update(batches=0, tables=0)
    add_batch, add_table = GapTimeline.add_batch, GapTimeline.add_table

    def spy_batch(self: GapTimeline, batch: GapBatch) -> None:
        seen["batches"] += 1
        add_batch(self, batch)

    def spy_table(self: GapTimeline, gaps: pd.DataFrame, min_gap_ns: int) -> None:
        seen["tables"] += 1
        add_table(self, gaps, min_gap_ns)

    monkeypatch.setattr(GapTimeline, "add_batch", spy_batch)
    monkeypatch.setattr(GapTimeline, "add_table", spy_table)
    return seen


def _asks(case: _Case, ref: _Reference, names: tuple[str, ...] | None = None
          ) -> list[tuple[GapAsk, Timelines]]:
    """Asks with timelines of every window of steps (or those of ``names``): the span's
    waits alone (what the chunked analysis asks), with a floor of 5 us, with the tables
    (limit 5); the report's window with a floor of 1 us."""
    w = case.wait
    plain = [GapAsk(case.span, wait=w, tables=False),
             GapAsk(case.span, 5000, wait=w, tables=False),
             GapAsk(case.span, 0, 5, w), GapAsk(case.window, 1000, 5)]
    out = []
    for a in plain:
        tls = _timelines(ref(a.window, a.min_gap_ns), case.windows, names)
        out.append((dataclasses.replace(a, bins=_sinks(tls)), tls))
    return out


def _run(ops: pd.DataFrame, calls: pd.DataFrame, cuts: list[int],
         asks: list[tuple[GapAsk, Timelines]], ref: _Reference, what: str) -> Slices:
    """Measure ``asks`` from one read of the slices: their timelines are the reference's."""
    slices = Slices(ops, cuts)
    gap_slices.measure_gaps_sliced_each(slices, calls, [a for a, _ in asks])
    for a, tls in asks:
        _same(tls, ref(a.window, a.min_gap_ns), f"{what}, {a.window} > {a.min_gap_ns}")
    return slices


def _two_devices(ops: pd.DataFrame) -> pd.DataFrame:
    return ops.assign(device_id=(np.arange(len(ops)) % 3 == 0).astype(np.int64))


def _idle_window(table: pd.DataFrame) -> tuple[tuple[int, int], int]:
    """A window whose ends fall in the middle of two long idle stretches (inner gaps of the
    one-device table ``table``, in its second and third quarters), and its lead edge's
    length."""
    inner = np.flatnonzero((table["kind"] != "window_edge").to_numpy(dtype=bool))
    start = table["start_ns"].to_numpy(np.int64)
    gap = table["gap_ns"].to_numpy(np.int64)
    n = len(inner)
    a = inner[n // 4:n // 2][np.argmax(gap[inner[n // 4:n // 2]])]
    b = inner[n // 2:3 * n // 4][np.argmax(gap[inner[n // 2:3 * n // 4]])]
    assert gap[a] > 4 and gap[b] > 4
    w0, w1 = int(start[a] + gap[a] // 2), int(start[b] + gap[b] // 2)
    return (w0, w1), int(start[a] + gap[a] - w0)


# -- tests -----------------------------------------------------------------------------

def test_timeline_alone_on_random_batches() -> None:
    """GapTimeline fed directly on random data: batches of every size (many below and above
    ``keep``, starts in and out of order), ties across devices, rows outside the window on
    both sides and across t0, fresh copies committed, a whole table; against the reference."""
    rng = np.random.default_rng(11)
    for trial in range(40):
        n = int(rng.integers(0, 400))
        start = rng.integers(0, 10_000, n).astype(np.int64)
        start[rng.random(n) < 0.3] = rng.integers(0, 10_000, 1)[0] // 100 * 100  # ties
        gap = rng.integers(1, 300, n).astype(np.int64)
        dev = rng.integers(0, 3, n).astype(np.int64)
        kind = rng.integers(0, len(GAP_KINDS), n).astype(np.int8)
        cats = ["cudaLaunchKernel", "", "cudaMemcpyAsync"]
        api = rng.integers(0, len(cats), n)
        table = pd.DataFrame({"device_id": dev, "start_ns": start, "end_ns": start + gap,
                              "gap_ns": gap,
                              "kind": np.asarray(GAP_KINDS, dtype=object)[kind],
                              "next_api": np.asarray(cats, dtype=object)[api]})
        table = table.sort_values(["device_id", "start_ns"], kind="stable").drop_duplicates(
            ["device_id", "start_ns"]).reset_index(drop=True)
        # t0 and ends at random, or on gaps' ends and starts (the boundaries: a gap ending
        # at t0 is out, one starting at a step's end is not counted for it)
        t0 = int(rng.integers(0, 5000)) if trial % 4 or not n else int(rng.choice(start + gap))
        ends = rng.integers(t0, 11_000, int(rng.integers(1, 8)))
        if trial % 2 and n:
            ends[:: 2] = np.maximum(rng.choice(start, len(ends[:: 2])), t0)
        ends = np.maximum.accumulate(np.sort(ends) if trial % 5 else ends)
        nhit = int(_Table(table).hit(t0, ends).sum())
        tls = [(_Want("random", t0, ends, k), GapTimeline(t0, ends, k))
               for k in sorted({1, 2, 5, max(1, nhit // 2), nhit + 3})]
        order = rng.permutation(len(table)) if trial % 2 else np.arange(len(table))
        cuts = np.unique(np.concatenate([[0, len(order)], rng.integers(0, len(order) + 1, 12)]))
        fresh = [t.fresh() for _, t in tls] if trial % 3 == 0 else None
        codes = {k: i for i, k in enumerate(GAP_KINDS)}
        for a, b in zip(cuts[:-1], cuts[1:], strict=True):
            part = table.iloc[order[a:b]]
            for d in np.unique(part["device_id"].to_numpy()):
                p = part[part["device_id"].to_numpy() == d]
                batch = GapBatch(p["start_ns"].to_numpy(np.int64), p["gap_ns"].to_numpy(np.int64),
                                 int(d), p["kind"].map(codes).to_numpy(np.int8),
                                 np.array([cats.index(x) for x in p["next_api"]],
                                          dtype=np.int64), cats)
                for i, (_, t) in enumerate(tls):
                    (fresh[i] if fresh is not None else t).add_batch(batch)
        if fresh is not None:
            for (_, t), f in zip(tls, fresh, strict=True):
                t.commit(f)
        _same(tls, table, f"random trial {trial}")
        floor = int(rng.integers(0, 200))
        whole = [(w, GapTimeline(w.t0, w.ends, w.keep)) for w, _ in tls]
        for _, t in whole:
            t.add_table(table, floor)
        _same(whole, table[table["gap_ns"].to_numpy() > floor], f"random table {trial}")


@pytest.mark.parametrize("name", ["mlp_train_graph", "resnet18_infer_eager",
                                  "ddp_mlp_train_eager", "ddp_mlp_train_graph"])
def test_fallback_whole_table(name: str, swept: dict[str, int],
                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Fewer ops than CHUNKED_MIN_OPS (or every gap listed, or two processes: the ddp
    traces, two real devices): measure_gaps_reduced measures the whole table and hands it
    over (add_table, no batch); the span with its window edges and the report's window,
    floors 0 and 5 us, waits alone and tables."""
    monkeypatch.setattr(gap_chunked, "CHUNKED_MIN_OPS", 1 << 21)
    case = _case(TRACES / f"{name}.sqlite")
    ref = _Reference(case.ops, case.calls)
    if name.startswith("ddp"):
        assert case.ops["device_id"].nunique() == 2
    for window in (case.span, case.window):
        for m, limit, tables in ((0, None, True), (5000, 5, True), (0, None, False)):
            table = ref(window, m)
            tls = _timelines(table, case.windows)
            before = dict(swept)
            got, _ = measure_gaps_reduced(case.ops, case.calls, window, m, limit, case.wait,
                                          tables, _sinks(tls))
            assert (got is not None) == tables
            assert swept["tables"] - before["tables"] == len(tls)
            assert swept["batches"] == before["batches"]
            _same(tls, table, f"{name} fallback {window} > {m}")
    assert (ref(case.span, 0)["kind"] == "window_edge").any()


@pytest.mark.parametrize("devices", [1, 2])
@pytest.mark.parametrize("name", ["transformer_train_eager", "mlp_train_graph"])
def test_reduced_sweep_with_window_edges(name: str, devices: int,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """measure_gaps_reduced through the chunked sweep of one frame (_Chunked.run), one
    device and two: the span (edges at both ends) and a window whose ends fall in the middle
    of idle stretches (an edge per device at each end, two devices' leads tied); floors 0,
    5 us, the lead edge's length (the edge left out) and one less (taken); waits alone and
    tables. The window edges are among the expected rows, the earliest for keep 1."""
    monkeypatch.setattr(gap_chunked, "FILL_CHUNK", 500)
    case = _taken(TRACES / f"{name}.sqlite")
    ops = case.ops if devices == 1 else _two_devices(case.ops)
    ref = _Reference(ops, case.calls)
    idle, lead = _idle_window(_Reference(case.ops, case.calls)(case.span, 0))
    runs = 0
    spy = gap_chunked._Chunked.run

    def count_runs(self: Any, *a: Any) -> Any:
        nonlocal runs
        got = spy(self, *a)
        runs += got is not None
        return got

    monkeypatch.setattr(gap_chunked._Chunked, "run", count_runs)
    monkeypatch.setattr(gap_chunked, "CHUNKED_MIN_OPS", 1)
    edges_seen = 0
    for window, floors in ((case.span, (0, 5000)), (idle, (0, 5000, lead, lead - 1))):
        for m in floors:
            table = ref(window, m)
            is_edge = (table["kind"] == "window_edge").to_numpy(dtype=bool)
            starts = table["start_ns"].to_numpy(np.int64)
            if window == idle:
                # the lead edges: one per device; the first op's device's is ``lead`` long
                assert (is_edge & (starts == idle[0])).sum() == devices - (m >= lead)
                trail = (is_edge & (table["end_ns"] == idle[1]).to_numpy()).sum()
                assert trail == devices or m > 5000
            for limit, tables in ((None, False), (5, True)):
                tls = _timelines(table, case.windows)
                before = runs
                measure_gaps_reduced(ops, case.calls, window, m, limit, case.wait, tables,
                                     _sinks(tls))
                assert runs - before == 1
                _same(tls, table, f"{name} reduced {devices} {window} > {m}")
                norm = _Table(table)
                for w, _ in tls:
                    rows = _expected(norm, w)[2]
                    edge = norm.texts["kind"][rows] == "window_edge"
                    edges_seen += int(edge.sum())
                    if w.name == "all" and w.keep == 1 and window == idle and m < lead:
                        assert edge.sum() == devices == len(rows)  # the lead edges, tied
    assert edges_seen > 10


@pytest.mark.parametrize("name", SWEPT_TRACES)
def test_sliced_sweep(name: str, swept: dict[str, int],
                      monkeypatch: pytest.MonkeyPatch) -> None:
    """measure_gaps_sliced_each swept in one slice, slices of 50 rows and random ones (some
    empty), fill chunks of the default, 37 and 5 ops; asks of waits alone and of tables,
    several at once, each with its own timelines."""
    case = _taken(TRACES / f"{name}.sqlite")
    ops, calls, n = case.ops, case.calls, len(case.ops)
    ref = _Reference(ops, calls)
    runs = [([0, n], gap_chunked.FILL_CHUNK, slice(None)), (every_cut(n, 50), 37, slice(0, 3)),
            (random_cuts(n, n, 80), 5, slice(1, None, 2))]
    for cuts, fill, some in runs:
        monkeypatch.setattr(gap_chunked, "FILL_CHUNK", fill)
        slices = _run(ops, calls, cuts, _asks(case, ref)[some], ref,
                      f"{name}: {len(cuts)} cuts")
        assert slices.reads == 1
    assert (swept["sweeps"], swept["fallbacks"], swept["tables"]) == (4 + 3 + 2, 0, 0)
    assert swept["batches"] > 0


def test_a_slice_per_op(swept: dict[str, int], monkeypatch: pytest.MonkeyPatch) -> None:
    """One op per slice: every gap found across a slice boundary, batches of one gap."""
    case = _taken(TRACES / "mlp_train_graph_graphtrace.sqlite")
    monkeypatch.setattr(gap_chunked, "FILL_CHUNK", 5)
    ref = _Reference(case.ops, case.calls)
    _run(case.ops, case.calls, every_cut(len(case.ops), 1),
         _asks(case, ref, ("all", "middle"))[1:3], ref, "a slice per op")
    assert (swept["sweeps"], swept["fallbacks"]) == (2, 0)


@pytest.mark.parametrize("name", ["mlp_infer_graph", "resnet18_infer_eager"])
def test_two_devices_and_tied_cuts(name: str, swept: dict[str, int],
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The sliced sweep over two devices (ops alternating between them, each with its own
    window edges) and over slices cut exactly between two ops that start together."""
    case = _taken(TRACES / f"{name}.sqlite")
    tied, rows = with_tied_copies(case.ops)
    n = len(tied)
    two = tied.assign(device_id=np.arange(n) // 2 % 2)
    for ops, fill, cuts in ((tied, 37, [0, *rows, n]), (two, 5, [0, *rows, n]),
                            (_two_devices(case.ops), 37, every_cut(len(case.ops), 30))):
        monkeypatch.setattr(gap_chunked, "FILL_CHUNK", fill)
        ref = _Reference(ops, case.calls)
        if ops["device_id"].nunique() == 2:
            span = ref(case.span, 0)
            assert span["device_id"].nunique() == 2
            assert (span["kind"] == "window_edge").sum() >= 3
        _run(ops, case.calls, cuts, _asks(case, ref, ("all", "middle"))[0:3:2], ref,
             f"{name} two/ties")
    assert (swept["sweeps"], swept["fallbacks"]) == (3 * 2, 0)


def test_given_up_sweeps_count_once(swept: dict[str, int],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Where a sweep is given up the fallback's table fills the timelines, and what the
    given-up sweep took in (batches into fresh copies, never committed) is not counted: a
    check failing before the sweep began (held) or after (read again), while sweeping the
    held slices, ops out of order, no inner gap, two devices far apart; one ask swept beside
    one falling back; too few ops. The sweeps given up after slices were swept had handed
    batches to their fresh copies (asserted): counting those too would double the counts."""
    monkeypatch.setattr(gap_chunked, "FILL_CHUNK", 37)
    case = _taken(TRACES / "resnet18_train_graph.sqlite")
    ops, calls, n = case.ops, case.calls, len(case.ops)
    start, end = ops["start_ns"].to_numpy(), ops["end_ns"].to_numpy()
    span = case.span
    inside = np.flatnonzero((start >= span[0]) & (end <= span[1]))
    live = len(gap_measure._live_ops(ops, span))
    cuts = every_cut(n, 50)

    def run(ops: pd.DataFrame, reads: int, sweeps: int, fallbacks: int, what: str,
            asks: list[GapAsk] | None = None) -> dict[str, int]:
        before = dict(swept)
        if asks is None:
            asks = [GapAsk(span, wait=case.wait, tables=False),
                    GapAsk(span, 5000, wait=case.wait, tables=False)]
        ref = _Reference(ops, calls)
        with_tls = []
        for a in asks:
            tls = _timelines(ref(a.window, a.min_gap_ns), case.windows)
            with_tls.append((dataclasses.replace(a, bins=_sinks(tls)), tls))
        slices = _run(ops, calls, cuts, with_tls, ref, what)
        assert (slices.reads, swept["sweeps"] - before["sweeps"],
                swept["fallbacks"] - before["fallbacks"]) == (reads, sweeps, fallbacks), what
        got = {k: swept[k] - before[k] for k in swept}
        # each falling-back ask's timelines took its table once (none where it is empty)
        if sweeps == 0 and len(ref(span, 0)):
            assert got["tables"] == sum(len(t) for _, t in with_tls), what
        return got

    got = run(ops, 1, 2, 0, "swept")
    assert got["tables"] == 0 and got["batches"] > 0
    run(ops, 1, 0, 1, "every gap listed", [GapAsk(span, 0, None, case.wait)])
    for at, reads in ((int(inside[5]), 1), (int(inside[-5]), 2)):
        other = ops.assign(pid=np.where(np.arange(n) == at, 99, ops["pid"].to_numpy()))
        got = run(other, reads, 0, 2, f"pid at {at}")
        if reads == 2:  # the sweep took in most of the gaps before it was given up
            assert got["batches"] > 2 * 4 * 10
    a, b, c = (int(inside[i]) for i in (-300, -200, -100))
    got = run(pd.concat([ops.iloc[:a], ops.iloc[b:c], ops.iloc[a:b], ops.iloc[c:]]), 2, 0, 2,
              "out of order")
    assert got["batches"] > 0
    run(ops.assign(end_ns=int(end.max())), 2, 0, 2, "no inner gap")
    got = run(ops.assign(device_id=np.where(np.arange(n) < n // 2, 0, 70000)), 2, 0, 2,
              "devices far apart")
    assert got["batches"] > 0
    run(ops, 1, 1, 1, "mixed", [GapAsk(span, 0, 5, case.wait), GapAsk(span, 0, None)])
    # the sweep from a third of the live ops on: the held slices swept first; with another
    # process's op in the last held slice, that sweep fails after taking in the others
    monkeypatch.setattr(gap_chunked, "CHUNKED_MIN_OPS", live // 3)
    run(ops, 1, 2, 0, "from a third")
    held = int(inside[live // 3 - 20])
    other = ops.assign(pid=np.where(np.arange(n) == held, 99, ops["pid"].to_numpy()))
    got = run(other, 1, 0, 2, "fails in the held slices")
    assert got["slices"] > 2 * 10 and got["batches"] > 0
    monkeypatch.setattr(gap_chunked, "CHUNKED_MIN_OPS", 1 << 21)
    got = run(ops, 1, 0, 2, "too few")
    assert got["batches"] == 0


def test_real_analysis_step_gaps(swept: dict[str, int]) -> None:
    """The sliced sweep of the steps' span with a floor of 2 us equals what a real analysis
    lists (cgprof.metrics.analyze(...).step_gaps, min_gap_us=2), windows of its own steps."""
    path = TRACES / "transformer_train_graph.sqlite"
    case = _taken(path)
    result = cgprof.metrics.analyze(cgprof.load(path, cache=False), min_gap_us=2.0)
    table = result.step_gaps
    assert len(table) > 100 and (table["kind"] == "window_edge").any()
    windows = _windows(result.steps.steps)
    tls = _timelines(table, windows)
    gap_slices.measure_gaps_sliced_each(Slices(case.ops, every_cut(len(case.ops), 200)), case.calls,
                                        [GapAsk(case.span, 2000, wait=case.wait, tables=False,
                                                bins=_sinks(tls))])
    assert (swept["sweeps"], swept["fallbacks"]) == (1, 0)
    _same(tls, table, "analyze's step_gaps")


def test_the_comparison_can_fail(swept: dict[str, int],
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The comparison fails where the sweep loses one batch, drops the window edges, or the
    timelines are filled twice: the tests above can fail."""
    case = _taken(TRACES / "mlp_train_eager.sqlite")
    ops, calls = case.ops, case.calls
    ref = _Reference(ops, calls)
    table = ref(case.span, 0)
    assert (table["kind"] == "window_edge").sum() == 2
    add_batch = GapTimeline.add_batch  # (the fixture's spy)

    def measure(tls: Timelines) -> None:
        gap_slices.measure_gaps_sliced_each(Slices(ops, every_cut(len(ops), 50)), calls,
                                            [GapAsk(case.span, wait=case.wait, tables=False,
                                                    bins=_sinks(tls))])

    seen = {"n": 0}

    def lossy(self: GapTimeline, batch: GapBatch) -> None:
        seen["n"] += 1
        if seen["n"] != 3 * len(tls) + 1:  # the fourth batch, the first timeline's
            add_batch(self, batch)

    def no_edges(self: GapTimeline, batch: GapBatch) -> None:
        if not batch.edge:
            add_batch(self, batch)

    for fake in (lossy, no_edges):
        tls = _timelines(table, case.windows)
        monkeypatch.setattr(GapTimeline, "add_batch", fake)
        measure(tls)
        with pytest.raises(AssertionError):
            _same(tls[:1] if fake is lossy else tls, table, fake.__name__)
        if fake is lossy:
            _same(tls[1:], table, "the others")  # only the first timeline lost a batch
    monkeypatch.setattr(GapTimeline, "add_batch", add_batch)
    tls = _timelines(table, case.windows)
    measure(tls)
    _same(tls, table, "once")
    measure(tls)
    with pytest.raises(AssertionError):  # filled twice
        _same(tls, table, "twice")
