"""The GPU gaps of the chunked analysis measured a slice of the timeline at a time
(cgprof.metrics.gap_slices.measure_gaps_sliced): exactly measure_gaps_reduced of the slices joined,
whatever the cuts (one row a slice, a few, empty slices, a cut between two ops that start
together), forced small fill chunks, several windows, limits, floors and waits, two GPUs; the
fallbacks (too few ops, a check that fails, no inner gap); and the chunked analysis reading
its slices through it."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pandas.testing as pdt
import pytest
from conftest import Slices, every_cut, random_cuts, spy_sweeps, wait_table, with_tied_copies

import cgprof
from cgprof.metrics import analyze, chunked, gap_chunked, gap_measure, gap_slices
from cgprof.metrics.gap_reduced import measure_gaps_reduced
from cgprof.metrics.gap_result import GapResult
from cgprof.metrics.gap_slices import GapAsk
from cgprof.metrics.gpu import gpu_ops
from cgprof.metrics.launches import api_calls
from cgprof.metrics.steps import compute_steps

pytestmark = pytest.mark.timeout(60)

REPO = Path(__file__).resolve().parent.parent
TRACES = sorted((REPO / "traces").glob("*.sqlite")) + sorted(
    (REPO.parent / "shared" / "nsys-samples").glob("*.sqlite"))
#: The ops' columns the chunked analysis reads a slice at a time (chunked._OP_COLUMNS).
COLUMNS = ["start_ns", "end_ns", "device_id", "stream_id", "pid", "corr_id", "kind", "in_graph"]
LIMITS = (1, 5, 1000)
MIN_GAPS = (0, 5000)

_CACHE: dict[Path, Any] = {}


@dataclasses.dataclass
class _Case:
    calls: pd.DataFrame
    ops: pd.DataFrame  # the narrow columns
    windows: list[tuple[int, int] | None]  # none, the steps' span, the report's window
    wait: tuple[np.ndarray, int, int]


def _case(path: Path) -> _Case | None:
    """The trace's calls, narrow ops, windows (as chunked.analyze_path takes them) and wait
    lookup; None when the chunked path does not take it."""
    if path not in _CACHE:
        trace = cgprof.load(path, cache=False)
        calls = api_calls(trace, derived=False)
        ops = gpu_ops(trace)
        steps = compute_steps(trace, calls, ops)
        if chunked.plan(calls, steps.steps, 1) is None:
            _CACHE[path] = None
        else:
            st = steps.steps
            gpu_end = st["gpu_end_ns"].dropna()
            span = (int(st["start_ns"].min()),
                    max(int(st["end_ns"].max()), int(gpu_end.max()) if len(gpu_end) else 0))
            _CACHE[path] = _Case(calls, ops[COLUMNS], [None, span, steps.window()],
                                 wait_table(steps))
    return _CACHE[path]


def _asks(case: _Case, windows: list[tuple[int, int] | None] | None = None) -> list[GapAsk]:
    """Every window x limit x floor x (wait or not), then the waits alone per window."""
    windows = case.windows if windows is None else windows
    asks = [GapAsk(w, m, lim, wait) for w in windows for lim in LIMITS for m in MIN_GAPS
            for wait in (None, case.wait)]
    return asks + [GapAsk(w, wait=case.wait, tables=False) for w in windows]


def _reference(ops: pd.DataFrame, calls: pd.DataFrame, asks: list[GapAsk]) -> list[Any]:
    return [measure_gaps_reduced(ops, calls, a.window, a.min_gap_ns, a.limit, a.wait, a.tables)
            for a in asks]


class _Wanted:
    """measure_gaps_reduced of ``ops`` per ask, each measured once."""

    def __init__(self, ops: pd.DataFrame, calls: pd.DataFrame):
        self.ops, self.calls = ops, calls
        self.got: dict[int, Any] = {}

    def __call__(self, asks: list[GapAsk]) -> list[Any]:
        for a in asks:
            if id(a) not in self.got:
                self.got[id(a)] = _reference(self.ops, self.calls, [a])[0]
        return [self.got[id(a)] for a in asks]


def _same_gaps(got: GapResult | None, want: GapResult | None) -> None:
    if want is None:
        assert got is None
        return
    assert got is not None
    for t in ("devices", "by_kind", "histogram", "streams", "gaps"):
        a, b = getattr(got, t), getattr(want, t)
        pdt.assert_frame_equal(a, b, check_exact=True, obj=t)
        assert list(a.dtypes) == list(b.dtypes), t
    assert (got.min_gap_ns, got.total, got.listed_total) == (
        want.min_gap_ns, want.total, want.listed_total)


def _check(got: list[Any], want: list[Any], asks: list[GapAsk], what: str) -> None:
    assert len(got) == len(want) == len(asks)
    for (g, gw), (w, ww), ask in zip(got, want, asks, strict=True):
        _same_gaps(g, w)
        if ww is None:
            assert gw is None, what
        else:
            assert gw is not None and gw.dtype == ww.dtype == np.int64, what
            np.testing.assert_array_equal(gw, ww, err_msg=f"{what} {ask.window}")


def _sliced(ops: pd.DataFrame, calls: pd.DataFrame, cuts: list[int], asks: list[GapAsk],
            concat: Callable[[list[pd.DataFrame]], pd.DataFrame] | None = None,
            ) -> tuple[list[Any], Slices]:
    assert cuts[0] == 0 and cuts[-1] == len(ops)
    slices = Slices(ops, cuts)
    return gap_slices.measure_gaps_sliced_each(slices, calls, asks, concat), slices


@pytest.fixture
def swept(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """The chunked sweep from one op (every shipped trace); counts the sweeps finished and
    the fallbacks."""
    return spy_sweeps(monkeypatch, slices=False)


def _taken(path: Path) -> _Case:
    case = _case(path)
    if case is None:
        pytest.skip("not a trace the chunked path takes")
    return case


#: The traces every cut is tried on: eager, graphed (capture, warm-up), graph-level replay
#: rows, requests served with idle time between them, a scored step choice, a ResNet's
#: many small kernels, a transformer's, and the real nsys samples (node and graph level).
VARIED = [p for p in TRACES if p.stem in (
    "mlp_train_eager", "mlp_train_graph", "mlp_train_graph_graphtrace", "mlp_serve_graph",
    "user_train_graph", "resnet18_infer_eager", "transformer_train_graph", "mlp8_node",
    "mlp8_graph")]


@pytest.mark.parametrize("path", VARIED, ids=lambda p: p.name)
def test_sliced_gaps_are_the_whole_measurement(path: Path, swept: dict[str, int],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Traces of every kind the chunked path takes, in one slice, slices of 50 and 7 rows and random
    ones (some empty), fill chunks of 37 and 5 ops: no window, the span, the window; limits
    1, 5 and 1000; floors 0 and 5 us; with and without the waits, and the waits alone."""
    case = _taken(path)
    ops, calls, n = case.ops, case.calls, len(case.ops)
    asks = _asks(case)
    want = _Wanted(ops, calls)
    runs = [([0, n], gap_chunked.FILL_CHUNK, asks), ([0, n], 37, asks[2::7]),
            (every_cut(n, 50), 37, asks[0::6]), (random_cuts(n, n, 80), 5, asks[1::13]),
            (every_cut(n, 7, 1000), 5, asks[3::20])]
    for cuts, fill, some in runs:
        monkeypatch.setattr(gap_chunked, "FILL_CHUNK", fill)
        got, slices = _sliced(ops, calls, cuts, some)
        _check(got, want(some), some, f"{len(cuts)} cuts")
        assert slices.reads == 1
    assert swept == {"sweeps": sum(len(r[2]) for r in runs), "fallbacks": 0}
    # the one-measurement call
    a = asks[-4]
    got1 = gap_slices.measure_gaps_sliced(Slices(ops, every_cut(n, 13)), calls, a.window,
                                          a.min_gap_ns, a.limit, a.wait, a.tables)
    _check([got1], want([a]), [a], "measure_gaps_sliced")


SMALL = ["mlp8_graph.sqlite", "mlp8_node.sqlite", "mlp_train_graph_graphtrace.sqlite"]


@pytest.mark.parametrize("name", SMALL)
def test_a_slice_per_op(name: str, swept: dict[str, int],
                        monkeypatch: pytest.MonkeyPatch) -> None:
    """One op per slice: every running max, holder and edge carried across a boundary."""
    path = next((p for p in TRACES if p.name == name), None)
    if path is None:
        pytest.skip(f"{name} not found")
    case = _taken(path)
    asks = [a for a in _asks(case) if (a.limit, a.min_gap_ns, a.wait is None) in (
        (5, 0, False), (1000, 5000, True)) or not a.tables]
    monkeypatch.setattr(gap_chunked, "FILL_CHUNK", 5)
    got, _ = _sliced(case.ops, case.calls, every_cut(len(case.ops), 1), asks)
    _check(got, _reference(case.ops, case.calls, asks), asks, "a slice per op")
    assert swept == {"sweeps": len(asks), "fallbacks": 0}


@pytest.mark.parametrize("name", ["mlp_infer_graph", "resnet18_infer_eager", "user_train"])
def test_sliced_gaps_of_two_devices(traces_dir: Path, name: str, swept: dict[str, int],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """One process on two GPUs (every third op on device 1, the others on 0; and 3 and 1 as
    tests/test_chunked_gaps.py has them): each device's carry, slots and edges."""
    case = _taken(traces_dir / f"{name}.sqlite")
    ops, calls, n = case.ops, case.calls, len(case.ops)
    start, end = ops["start_ns"].to_numpy(), ops["end_ns"].to_numpy()
    # and a window from inside an op a third of the way to inside one two thirds of the way
    windows = [*case.windows, (int(start[n // 3]) + 1, int(end[2 * n // 3]) - 1)]
    asks = _asks(case, windows)
    third = np.arange(n) % 3 == 0
    for ids, runs in (((1, 0), ((every_cut(n, 7), 5, asks[0::11]), (random_cuts(n, 7, 40), 37,
                                                                  asks[1::3]))),
                      ((3, 1), ((random_cuts(n, 5, 20), 37, asks[2::9]),))):
        two = ops.assign(device_id=np.where(third, *ids))
        want = _Wanted(two, calls)
        first = want(asks[:1])[0][0]
        assert first is not None and first.devices["device_id"].tolist() == sorted(ids)
        for cuts, fill, some in runs:
            monkeypatch.setattr(gap_chunked, "FILL_CHUNK", fill)
            got, _ = _sliced(two, calls, cuts, some)
            _check(got, want(some), some, f"devices {ids}")
    assert swept["fallbacks"] == 0


@pytest.mark.parametrize("name", ["mlp_infer_graph", "resnet18_infer_eager",
                                  "mlp_train_graph_graphtrace"])
def test_cuts_between_ops_that_start_together(traces_dir: Path, name: str,
                                              swept: dict[str, int],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Slices cut exactly between two ops that start together (and between two that end
    together), one device and two."""
    case = _taken(traces_dir / f"{name}.sqlite")
    tied, rows = with_tied_copies(case.ops)
    n = len(tied)
    start = tied["start_ns"].to_numpy()
    assert (start[rows] == start[np.array(rows) - 1]).sum() > len(rows) // 2
    asks = [a for a in _asks(case, case.windows[::2]) if (a.limit, a.min_gap_ns, a.wait is None)
            in ((5, 0, False), (1000, 5000, True))]
    two = tied.assign(device_id=np.arange(n) // 2 % 2)  # a tie on each device, or across
    for ops, fill in ((tied, 37), (two, 5)):
        monkeypatch.setattr(gap_chunked, "FILL_CHUNK", fill)
        got, _ = _sliced(ops, case.calls, [0, *rows, n], asks)
        _check(got, _reference(ops, case.calls, asks), asks, name)
    assert swept["fallbacks"] == 0


def test_streams_too_far_apart_for_codes(traces_dir: Path, swept: dict[str, int],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Stream ids 10**6 apart: measure_gaps_reduced's stream table is union_busy's
    (_stream_table_swept declines); the slices' is the same."""
    monkeypatch.setattr(gap_chunked, "FILL_CHUNK", 37)
    case = _taken(traces_dir / "mlp_train_graph.sqlite")
    ops = case.ops.assign(stream_id=case.ops["stream_id"].to_numpy() * 10**6)
    assert ops["stream_id"].nunique() > 1
    assert gap_chunked._stream_table_swept(ops) is None
    asks = [a for a in _asks(case) if a.limit == 1000 and a.min_gap_ns == 0]
    got, _ = _sliced(ops, case.calls, random_cuts(len(ops), 3, 30), asks)
    _check(got, _reference(ops, case.calls, asks), asks, "streams")
    assert swept["fallbacks"] == 0


def test_fallbacks(traces_dir: Path, swept: dict[str, int],
                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the chunked sweep does not apply, the whole measurement of the slices joined:
    below CHUNKED_MIN_OPS (held, one read), a check failing before the sweep began (held,
    one read) or after (read again), no inner gap, devices too far apart, every gap listed.
    And the sweep beginning part way, once CHUNKED_MIN_OPS ops are held."""
    monkeypatch.setattr(gap_chunked, "FILL_CHUNK", 37)
    case = _taken(traces_dir / "resnet18_train_graph.sqlite")
    ops, calls, n = case.ops, case.calls, len(case.ops)
    window = case.windows[2]
    assert window is not None
    asks = [GapAsk(window, 0, 5, case.wait), GapAsk(window, 5000, 1000),
            GapAsk(window, wait=case.wait, tables=False)]
    start, end = ops["start_ns"].to_numpy(), ops["end_ns"].to_numpy()
    inside = np.flatnonzero((start >= window[0]) & (end <= window[1]))  # live, unclipped
    live = len(gap_measure._live_ops(ops, window))
    cuts = every_cut(n, 50)

    def run(ops: pd.DataFrame, cuts: list[int], reads: int, sweeps: int, fallbacks: int,
            asks: list[GapAsk] = asks, what: str = "") -> None:
        before = dict(swept)
        got, slices = _sliced(ops, calls, cuts, asks)
        joined = pd.concat([ops.iloc[a:b] for a, b in zip(cuts[:-1], cuts[1:], strict=True)])
        _check(got, _reference(joined, calls, asks), asks, what)
        assert (slices.reads, swept["sweeps"] - before["sweeps"],
                swept["fallbacks"] - before["fallbacks"]) == (reads, sweeps, fallbacks), what

    run(ops, cuts, 1, 3, 0, what="swept")
    run(ops, cuts, 1, 1, 0, asks=[GapAsk(window, 0, 0, case.wait)], what="none listed")
    # every gap listed: measured whole (a table of every gap)
    run(ops, cuts, 1, 0, 1, asks=[GapAsk(window, 0, None, case.wait)], what="every gap")
    # the sweep from a third of the window's ops on: the held slices swept first
    monkeypatch.setattr(gap_chunked, "CHUNKED_MIN_OPS", live // 3)
    run(ops, cuts, 1, 3, 0, what="from a third")
    # another process's op early (before the sweep began: held, one read) and late (read
    # again)
    for at, reads in ((int(inside[5]), 1), (int(inside[-5]), 2)):
        other = ops.assign(pid=np.where(np.arange(n) == at, 99, ops["pid"].to_numpy()))
        run(other, cuts, reads, 0, 3, what=f"pid at {at}")
    # two runs of ops swapped late in the window: not in (start, end) order, read again
    a, b, c = (int(inside[i]) for i in (-300, -200, -100))
    swapped = pd.concat([ops.iloc[:a], ops.iloc[b:c], ops.iloc[a:b], ops.iloc[c:]])
    run(swapped, cuts, 2, 0, 3, what="out of order")
    # below CHUNKED_MIN_OPS: held, never swept
    monkeypatch.setattr(gap_chunked, "CHUNKED_MIN_OPS", 1 << 21)
    run(ops, cuts, 1, 0, 3, what="too few")
    monkeypatch.setattr(gap_chunked, "CHUNKED_MIN_OPS", 1)
    # no inner gap (every op until the last end): the whole path, read again
    run(ops.assign(end_ns=int(ops["end_ns"].max())), cuts, 2, 0, 3, what="no gap")
    # two devices 70000 ids apart (more than _MAX_CODES): read again
    far = ops.assign(device_id=np.where(np.arange(n) < n // 2, 0, 70000))
    run(far, cuts, 2, 0, 3, what="devices far apart")
    # one measurement falling back beside one swept, from the same read
    mixed = [GapAsk(window, 0, 5), GapAsk(window, 0, None)]
    run(ops, cuts, 1, 1, 1, asks=mixed, what="mixed")


def test_the_joined_fallback_keeps_its_concat(traces_dir: Path, swept: dict[str, int]) -> None:
    """A fallback joins the live slices with the caller's ``concat`` (chunked._join)."""
    case = _taken(traces_dir / "mlp_infer_graph.sqlite")
    ops, n = case.ops, len(case.ops)
    joined: list[int] = []

    def concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
        joined.append(len(frames))
        return chunked._join(frames)

    asks = [GapAsk(case.windows[2], 0, None, case.wait)]
    got, _ = _sliced(ops, case.calls, random_cuts(n, 1, 100), asks, concat)
    _check(got, _reference(ops, case.calls, asks), asks, "concat")
    assert joined and joined[0] > 1


@pytest.mark.parametrize(("name", "k"), [("mlp_train_graph_graphtrace", 1),
                                         ("user_train_graph", 3)])
def test_the_chunked_analysis_reads_the_slices(name: str, k: int, swept: dict[str, int],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """chunked.analyze_path, its gaps swept a slice of steps at a time (CHUNKED_MIN_OPS 1,
    fill chunks of 37, chunks of ``k`` steps): the whole analysis's JSON and text, byte for
    byte."""
    from cgprof.metrics.chunked import analyze_path
    from cgprof.report import json_report, text

    monkeypatch.setenv("CGPROF_NO_CACHE", "1")
    monkeypatch.setattr(gap_chunked, "FILL_CHUNK", 37)
    path = REPO / "traces" / f"{name}.sqlite"

    def reports(result: Any) -> tuple[str, str]:
        return (json.dumps(json_report.result_to_dict(result), sort_keys=True),
                text.render(result))

    want = reports(analyze(cgprof.load(path, cache=False)).light(json_report.GAP_LIST_LIMIT))
    got = analyze_path(path, chunk_steps=k)
    assert got is not None
    assert reports(got) == want
    assert swept["sweeps"] and not swept["fallbacks"]
