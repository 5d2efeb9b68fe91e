"""How much of each steady-state step runs inside CUDA graphs, and what is still eager.

Computed over the analysis window (the steady-state steps, see
:meth:`cgprof.metrics.step_result.StepResult.window_steps`) from the step table's coverage columns
(``graph_kernels``, ``eager_kernels``, ``graph_gpu_ns``, ``eager_gpu_ns``, ``recapture``,
``fallback``) and, for the eager leftovers, from the kernel rows joined to the API call that
launched them on (pid, correlationId). A kernel replayed from a graph carries a
``graphNodeId``; every other kernel was launched on its own by a host call.

This is the contract the CI gate (``cgprof check``) reads; keys of ``summary`` are stable.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from cgprof.io.trace import column
from cgprof.metrics import launches as L
from cgprof.metrics.intervals import (
    _distinct_table,
    first_match,
    match_pairs,
    pair_keys,
    sums_by_code,
    table_get,
)
from cgprof.metrics.summaries import category_codes

EAGER_TOP_COLUMNS = ["name", "kernels", "gpu_ns", "launch_api", "launch_host_ns"]

#: Rows kept in ``CoverageResult.eager_top``.
EAGER_TOP_N = 10


@dataclass
class CoverageResult:
    """Graph coverage of the analysis window.

    summary  steps (int, window steps), graph_kernel_share (kernels inside replays / all
             kernels of the window steps, 0..1, None when unknown: no kernels, or replay kernels
             hidden by a graph-granularity trace), graph_gpu_share (the same for GPU busy time:
             graph_gpu_ns / (graph_gpu_ns + eager_gpu_ns)), launch_calls_per_step_p50 (kernel +
             graph launch calls), kernel_launches_per_step_p50, graph_launches_per_step_p50,
             sync_calls_per_step_p50, memcpy_calls_per_step_p50, recaptures (int, window steps
             that captured or instantiated a graph after replays had begun), fallbacks (int,
             window steps without a graph launch after replays had begun), partial_steps (int,
             window steps with both graph launches and eager kernel launches)
    eager_top  kernels launched outside graphs in the window steps, most GPU time first
             (EAGER_TOP_COLUMNS): name (demangled), kernels (instances per window step),
             gpu_ns (GPU time per window step), launch_api (the API call that launches most
             of them, e.g. cudaLaunchKernel), launch_host_ns (host time of those launch calls
             per window step); at most EAGER_TOP_N rows
    recapture_steps / fallback_steps   the ``step`` numbers of those steps
    eager_per_step  p50 over the partially graphed window steps (over all window steps when
             none is partial) of: eager kernel launches, GPU busy time outside replays
             (eager_gpu_ns) and the kernel launch calls' host time (keys kernel_launches,
             gpu_ns, launch_host_ns)
    """

    summary: dict[str, object]
    eager_top: pd.DataFrame
    recapture_steps: list[int] = field(default_factory=list)
    fallback_steps: list[int] = field(default_factory=list)
    eager_per_step: dict[str, float] = field(default_factory=dict)


def _p50(values: Any) -> float:
    """Median of the non-missing values (0.0 when none)."""
    if isinstance(values, pd.Series):
        values = values.to_numpy(dtype=np.float64, na_value=np.nan)
    v = np.asarray(values, dtype=np.float64)
    v = v[~np.isnan(v)]
    return float(np.median(v)) if len(v) else 0.0


def call_steps_of(calls: pd.DataFrame, call_steps: pd.DataFrame) -> np.ndarray:
    """The step of every API call (``calls`` row order), -1 for a call in no step.

    ``call_steps`` holds each (pid, corr_id) once, so this is the ``step`` column of
    ``calls.merge(call_steps, how="left")`` as one int64 array: coverage, the verdict and
    the window's call tables all read it instead of merging 1M-row frames each time."""
    if calls.empty or call_steps.empty:
        return np.full(len(calls), -1, dtype=np.int64)
    row = match_pairs(calls, call_steps)  # one process: its correlation ids, not copies
    if row is None:  # keys that do not fit an int64 pair key: let pandas join them
        step = calls[["pid", "corr_id"]].merge(call_steps[["pid", "corr_id", "step"]],
                                               on=["pid", "corr_id"], how="left")["step"]
        return step.fillna(-1).to_numpy(dtype=np.int64)
    # row -1 (no step) picks the appended -1: one gather, no mask
    return np.append(call_steps["step"].to_numpy(np.int64), -1)[row]


def step_positions(step_of: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """For each value of ``step_of``, its position in ``steps`` (distinct step numbers), or -1
    (for -1 and for steps not listed). Step numbers are the step table's row numbers, small
    non-negative ints: one lookup table does it, no hash or sort."""
    steps = np.asarray(steps, dtype=np.int64)
    if len(steps) == 0 or len(step_of) == 0:
        return np.full(len(step_of), -1, dtype=np.int64)
    lut = np.full(int(steps.max()) + 2, -1, dtype=np.int64)  # last slot: anything else
    lut[steps] = np.arange(len(steps))
    if int(step_of.min()) >= -1:  # -1 indexes the last slot itself; clip the steps above
        return lut[np.minimum(step_of, len(lut) - 1)]
    inside = (step_of >= 0) & (step_of < len(lut) - 1)
    return lut[np.where(inside, step_of, len(lut) - 1)]


def family_mask(calls: pd.DataFrame, *families: str, live: bool = True,
                rows: np.ndarray | None = None) -> np.ndarray:
    """Calls of these launch families (``live``: not recorded during stream capture), for every
    call or for the call rows ``rows``."""
    fam = calls["family"]
    if isinstance(fam.dtype, pd.CategoricalDtype):  # one lookup per code, no string compare
        wanted = np.append(fam.cat.categories.isin(families), False)  # code -1: the last
        codes = fam.cat.codes.to_numpy()
        sel = wanted[codes if rows is None else codes[rows]]
    else:
        sel = fam.isin(families).to_numpy(dtype=bool)
        sel = sel if rows is None else sel[rows]
    if live:
        cap = calls["in_capture"].to_numpy(dtype=bool)
        sel &= ~(cap if rows is None else cap[rows])
    return sel


def window_positions(calls: pd.DataFrame, call_steps: pd.DataFrame,
                     steps: pd.DataFrame, step_of: np.ndarray | None = None) -> np.ndarray:
    """For every API call (``calls`` row order), the row of ``steps`` (rows of the step table,
    e.g. the window steps) holding the call's step; -1 for a call in none of them.
    ``step_of``: :func:`call_steps_of` of the calls when the caller has it
    (:meth:`cgprof.metrics.step_result.StepResult.step_of_calls`)."""
    if step_of is None:
        step_of = call_steps_of(calls, call_steps)
    return step_positions(step_of, steps["step"].to_numpy(np.int64))


@dataclass
class StepLaunches:
    """The live (not captured) kernel and graph launch calls of some steps, as row numbers:
    what the coverage and the verdict read, found once for both instead of by merges.

    rows    row numbers in ``calls``, ascending
    pos     the row of the steps frame (:func:`window_positions`) holding each call's step
    kernel  True for a kernel launch, False for a graph launch
    """

    rows: np.ndarray
    pos: np.ndarray
    kernel: np.ndarray

    @classmethod
    def of(cls, calls: pd.DataFrame, call_pos: np.ndarray) -> StepLaunches:
        """From the API calls and :func:`window_positions` of them."""
        if calls.empty:
            none = np.zeros(0, dtype=np.int64)
            return cls(rows=none, pos=none, kernel=np.zeros(0, dtype=bool))
        # int32 rows and positions where they fit: they only index, and they stay alive
        # from the replays to the verdict, beside the gap table (10M calls: 80 -> 40 MB).
        idx = np.int32 if len(calls) < 2**31 else np.int64
        rows = np.flatnonzero(family_mask(calls, L.KERNEL_LAUNCH, L.GRAPH_LAUNCH)
                              & (call_pos >= 0)).astype(idx)
        return cls(rows=rows, pos=call_pos[rows].astype(idx),
                   kernel=family_mask(calls, L.KERNEL_LAUNCH, live=False, rows=rows))


def graph_coverage(
    window_steps: pd.DataFrame,
    kernels: pd.DataFrame,
    calls: pd.DataFrame,
    call_steps: pd.DataFrame,
    launches: StepLaunches | None = None,
) -> CoverageResult:
    """Coverage of ``window_steps`` (rows of the step table).

    ``kernels`` is ``Trace.kernels``; ``calls`` comes from
    :func:`cgprof.metrics.launches.api_calls`; ``call_steps`` is ``StepResult.call_steps``
    (pid, corr_id, step of every attributed call); ``launches``, when the caller has them
    already (the verdict reads them too), are the :class:`StepLaunches` of ``window_steps``.

    One :func:`coverage_partial` over the whole trace, then :func:`merge_coverage_partials`:
    the chunked analysis runs the same two over chunks of whole steps.
    """
    if launches is None:
        launches = StepLaunches.of(calls, window_positions(calls, call_steps, window_steps))
    return merge_coverage_partials([coverage_partial(window_steps, kernels, calls, launches)],
                                   window_steps)


@dataclass
class CoveragePartial:
    """What :func:`coverage_partial` counts over some kernels and API calls (a chunk of whole
    steps, or the whole trace): sums that add up across chunks, keyed by strings (each chunk's
    categories may differ) and by window step.

    host            int64 per row of the ``window_steps`` given to :func:`coverage_partial`
                    (the whole window: global positions): the host ns of the window step's
                    live kernel launch calls (each (pid, corr_id) once)
    names           the eager kernels' names (str, distinct; only names with a kernel here)
    kernels, gpu_ns, launch_host_ns   int64 per name: eager kernels, their GPU ns, the host
                    ns of their launch calls (a call charged once, to its first kernel)
    pair_name, pair_api, pair_kernels   per (name, launch API name) pair (str, str, distinct):
                    the named eager kernels launched by that API
    pair_first      int64 per pair: its first kernel's row in the whole kernel table (the
                    launch API's tie rule: the pair seen first in kernel-table order)
    """

    host: np.ndarray
    names: np.ndarray
    kernels: np.ndarray
    gpu_ns: np.ndarray
    launch_host_ns: np.ndarray
    pair_name: np.ndarray
    pair_api: np.ndarray
    pair_kernels: np.ndarray
    pair_first: np.ndarray

    @classmethod
    def empty(cls, host: np.ndarray) -> CoveragePartial:
        """No eager kernel: only the launch calls' host time per window step."""
        text, ints = np.zeros(0, dtype=object), np.zeros(0, dtype=np.int64)
        return cls(host=host, names=text, kernels=ints, gpu_ns=ints, launch_host_ns=ints,
                   pair_name=text, pair_api=text, pair_kernels=ints, pair_first=ints)

    @classmethod
    def combine(cls, parts: Sequence[CoveragePartial]) -> CoveragePartial:
        """The partial of the union of the parts' chunks (chunks that share no launch call:
        each call's kernels are in its own chunk). Exact int64 sums and minimums, so it can
        fold the chunks in any grouping and order."""
        if not parts:
            raise ValueError("no partial to combine")
        if len(parts) == 1:
            return parts[0]
        n = len(parts[0].host)
        if any(len(p.host) != n for p in parts):
            raise ValueError("partials of different window steps")
        host = np.zeros(n, dtype=np.int64)
        for p in parts:
            host += p.host
        code, names = pd.factorize(np.concatenate([p.names for p in parts]))
        m = len(names)

        def summed(attr: str, codes: np.ndarray, k: int) -> np.ndarray:
            return sums_by_code(codes, np.concatenate([getattr(p, attr) for p in parts]), k)

        pn = pd.Index(names).get_indexer(np.concatenate([p.pair_name for p in parts]))
        api_code, apis = pd.factorize(np.concatenate([p.pair_api for p in parts]))
        pair_code, pairs = pd.factorize(pn.astype(np.int64) * max(len(apis), 1) + api_code)
        first = np.full(len(pairs), np.iinfo(np.int64).max, dtype=np.int64)
        np.minimum.at(first, pair_code, np.concatenate([p.pair_first for p in parts]))
        width = max(len(apis), 1)
        return cls(host=host, names=np.asarray(names, dtype=object),
                   kernels=summed("kernels", code, m), gpu_ns=summed("gpu_ns", code, m),
                   launch_host_ns=summed("launch_host_ns", code, m),
                   pair_name=np.asarray(names, dtype=object)[pairs // width],
                   pair_api=np.asarray(apis, dtype=object)[pairs % width],
                   pair_kernels=summed("pair_kernels", pair_code, len(pairs)),
                   pair_first=first)


def merge_coverage_partials(parts: Sequence[CoveragePartial],
                            window_steps: pd.DataFrame) -> CoverageResult:
    """The :class:`CoverageResult` of ``window_steps`` (the whole analysis's window steps) from
    the :func:`coverage_partial` of every chunk, in any order: the summary and the per-step
    medians read the step table, the eager table the summed partials.

    Each partial's ``host`` is indexed by global window position (one per row of
    ``window_steps``: summed). Partials measured against each chunk's own window steps (host
    arrays as long as those, adding up to ``window_steps``) are taken in chunk order and
    placed end to end instead."""
    ws = window_steps
    n = len(ws)
    gk = ws["graph_kernels"]
    ek = ws["eager_kernels"].astype("int64")
    if n and gk.notna().all():
        total_k = int(gk.sum()) + int(ek.sum())
        kernel_share = float(gk.sum()) / total_k if total_k else None
    else:
        kernel_share = None
    total_gpu = int(ws["graph_gpu_ns"].sum()) + int(ws["eager_gpu_ns"].sum())
    gpu_share = float(ws["graph_gpu_ns"].sum()) / total_gpu if total_gpu else None
    kl = ws["kernel_launches"].to_numpy()
    gl = ws["graph_launches"].to_numpy()
    partial = (gl > 0) & (kl > 0)
    step_no = ws["step"].to_numpy()
    recap = [int(s) for s in step_no[ws["recapture"].to_numpy(dtype=bool)]]
    fall = [int(s) for s in step_no[ws["fallback"].to_numpy(dtype=bool)]]
    summary: dict[str, object] = {
        "steps": int(n),
        "graph_kernel_share": kernel_share,
        "graph_gpu_share": gpu_share,
        "launch_calls_per_step_p50": _p50(kl + gl),
        "kernel_launches_per_step_p50": _p50(kl),
        "graph_launches_per_step_p50": _p50(gl),
        "sync_calls_per_step_p50": _p50(ws["sync_calls"]),
        "memcpy_calls_per_step_p50": _p50(ws["memcpy_calls"]),
        "recaptures": len(recap),
        "fallbacks": len(fall),
        "partial_steps": int(partial.sum()),
    }
    sizes = [len(p.host) for p in parts]
    if any(size != n for size in sizes):
        if sum(sizes) != n:
            raise ValueError(f"partials of {sizes} window steps, not {n}")
        at = np.cumsum([0] + sizes[:-1]).tolist()
        parts = [replace(p, host=np.pad(p.host, (a, n - a - len(p.host))))
                 for a, p in zip(at, parts, strict=True)]
    part = CoveragePartial.combine(parts)
    top = _top_of(part, n)
    launch_host = part.host.astype(np.float64)
    basis = partial if partial.any() else np.ones(n, dtype=bool)
    per_step = {
        "kernel_launches": _p50(kl[basis]),
        "gpu_ns": _p50(ws["eager_gpu_ns"].to_numpy()[basis]),
        "launch_host_ns": _p50(launch_host[basis]),
    }
    return CoverageResult(summary=summary, eager_top=top, recapture_steps=recap,
                          fallback_steps=fall, eager_per_step=per_step)


def _empty_top() -> pd.DataFrame:
    return pd.DataFrame({"name": pd.Series(dtype="object"), "kernels": pd.Series(dtype="float64"),
                         "gpu_ns": pd.Series(dtype="float64"),
                         "launch_api": pd.Series(dtype="object"),
                         "launch_host_ns": pd.Series(dtype="float64")})


def _launch_keys(kernels: pd.DataFrame, calls: pd.DataFrame,
                 launch: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One int64 key per (pid, corr_id) of every kernel and of the calls ``launch`` (rows),
    equal where the pairs are. One process (the usual trace): its correlation ids as they are,
    no copy; else :func:`~cgprof.metrics.intervals.pair_keys`, else pandas numbers the pairs."""
    cols = [kernels["pid"], kernels["corr_id"], calls["pid"], calls["corr_id"]]
    if all(c.dtype == np.int64 for c in cols) and len(kernels) and len(calls):
        kp, cp = cols[0].to_numpy(), cols[2].to_numpy()
        if kp.min() == kp.max() == cp.min() == cp.max():
            return cols[1].to_numpy(), cols[3].to_numpy()[launch]
    keys = pair_keys(kernels, calls)
    if keys is not None:
        return keys[0], keys[1][launch]
    both = pd.concat([kernels[["pid", "corr_id"]], calls[["pid", "corr_id"]].take(launch)],
                     ignore_index=True)
    codes = both.groupby(["pid", "corr_id"], sort=False, dropna=False).ngroup()
    codes = codes.to_numpy(np.int64)
    return codes[:len(kernels)], codes[len(kernels):]


def coverage_partial(window_steps: pd.DataFrame, kernels: pd.DataFrame, calls: pd.DataFrame,
                     launches: StepLaunches, kernel_rows: np.ndarray | None = None,
                     ) -> CoveragePartial:
    """The eager kernels and kernel-launch host time of some steps, as sums to merge
    (:class:`CoveragePartial`, :func:`merge_coverage_partials`).

    ``window_steps``: the analysis's window steps (all of them, also for a chunk: positions
    are global); ``calls`` and ``launches``: API calls (a chunk: ``calls.iloc[r0:r1]``) and
    their :class:`StepLaunches` (with the global window positions); ``kernels``: the kernel
    rows those calls launched, in kernel-table order, and ``kernel_rows`` their rows in the
    whole kernel table (None: ``kernels`` is the whole table).

    Over row numbers, not frames: the window's kernel launch calls (live, each (pid, corr_id)
    once), the eager kernels matched to them by key, then per-name sums by category code."""
    n = len(window_steps)
    host = np.zeros(n, dtype=np.int64)
    if n == 0 or calls.empty:
        return CoveragePartial.empty(host)
    launch, pos = launches.rows[launches.kernel], launches.pos[launches.kernel]
    kernel_key, launch_key = _launch_keys(kernels, calls, launch)
    # Each (pid, corr_id) once, its first call (as drop_duplicates): one lookup table serves
    # that check and the kernels' match below; only repeated keys take the sorting way.
    # int32 rows: they only index (10M kernels: 40 MB less).
    table = _distinct_table(launch_key, narrow=True) if len(launch_key) else None
    if table is None and len(launch):
        first = first_match(launch_key, launch_key) == np.arange(len(launch))
        launch, pos, launch_key = launch[first], pos[first], launch_key[first]
    call_dur = column(calls, "dur_ns", launch).astype(np.int64, copy=False)
    host = sums_by_code(pos, call_dur, n)
    eager = np.flatnonzero(kernels["graph_node_id"].isna().to_numpy(dtype=bool))
    if len(eager) == 0 or len(launch) == 0:
        return CoveragePartial.empty(host)
    key = kernel_key[eager]
    if table is not None:  # each eager kernel's launch call
        if table[1]:
            key -= table[1]  # a gathered copy: shifted in place
        row = table_get(table[0], key)
    else:
        row = first_match(key, launch_key)
    del key, table, launch_key
    hit = row >= 0
    if not hit.all():  # (the usual trace launched every eager kernel from a window step)
        eager, row = eager[hit], row[hit]
    del hit
    if len(eager) == 0:
        return CoveragePartial.empty(host)
    # One launch call can start several kernels (rare for eager launches): charge its host
    # time once, to the first kernel. (A call's kernels share its correlation id: a chunk
    # holds them all.)
    seen = np.zeros(len(launch), dtype=bool)
    seen[row] = True
    once = None
    if np.count_nonzero(seen) < len(row):  # a launch call's row met twice
        once = np.zeros(len(row), dtype=bool)
        once[np.unique(row, return_index=True)[1]] = True
    del seen
    names, name_of = category_codes(kernels["name"])
    apis, api_of = category_codes(calls["name"])
    m = len(name_of)
    width = max(len(api_of), 1)
    count = np.zeros(m, dtype=np.int64)
    gpu, api_host = np.zeros(m, dtype=np.int64), np.zeros(m, dtype=np.int64)
    pairs = np.zeros(m * width, dtype=np.int64)  # kernels per (name, API) code pair
    pair_first = np.full(m * width, -1, dtype=np.int64)  # each pair's first kernel row
    # A chunk of the eager kernels at a time (a named one's name, launch API, GPU and host
    # ns): the per-kernel gathers are a chunk long, not 10M (~0.4 GB at the coverage's peak).
    for a in range(0, len(eager), _TOP_CHUNK):
        e, r = eager[a:a + _TOP_CHUNK], row[a:a + _TOP_CHUNK]
        kc, ac = names[e].astype(np.int64), apis[launch[r]].astype(np.int64)
        api_ns = call_dur[r]
        if once is not None:
            api_ns = np.where(once[a:a + _TOP_CHUNK], api_ns, 0)
        gpu_ns = column(kernels, "dur_ns", e).astype(np.int64, copy=False)
        named = kc >= 0  # a kernel without a name has no group (pandas drops NaN keys)
        if not named.all():
            kc, ac, e = kc[named], ac[named], e[named]
            gpu_ns, api_ns = gpu_ns[named], api_ns[named]
        count += np.bincount(kc, minlength=m)
        gpu += sums_by_code(kc, gpu_ns, m)
        api_host += sums_by_code(kc, api_ns, m)
        pair = kc * width + ac
        has_api = ac >= 0
        if not has_api.all():
            pair, e = pair[has_api], e[has_api]
        here = np.bincount(pair, minlength=m * width)
        pairs += here
        new = (here > 0) & (pair_first < 0)  # pairs met for the first time
        if new.any():
            _first_rows(pair_first, pair, e if kernel_rows is None else kernel_rows[e], new)
    groups, met = np.flatnonzero(count), np.flatnonzero(pairs)
    label = np.asarray([str(v) for v in name_of[groups]], dtype=object)
    at = np.full(m, -1, dtype=np.int64)
    at[groups] = np.arange(len(groups))
    return CoveragePartial(
        host=host, names=label, kernels=count[groups], gpu_ns=gpu[groups],
        launch_host_ns=api_host[groups], pair_name=label[at[met // width]],
        pair_api=np.asarray([str(v) for v in api_of[met % width]], dtype=object),
        pair_kernels=pairs[met], pair_first=pair_first[met])


def _first_rows(first: np.ndarray, code: np.ndarray, rows: np.ndarray, new: np.ndarray) -> None:
    """Set ``first[c]``, for each code ``c`` marked in ``new`` (codes that ``code`` holds),
    to ``rows`` at the first position of ``c`` in ``code``. Prefixes that double in length are
    searched, and only their rows of codes still unfound sorted: the first kernels of a few
    hundred (name, API) pairs usually sit in the first step, and a pair first met late costs
    a pass of lookups, not a sort of every row."""
    want = new.copy()
    todo = int(np.count_nonzero(want))
    a, span = 0, 4096
    while todo and a < len(code):
        b = min(a + span, len(code))
        part = code[a:b]
        hit = np.flatnonzero(want[part])
        if len(hit):
            u, i = np.unique(part[hit], return_index=True)
            first[u] = rows[a + hit[i]]
            want[u] = False
            todo -= len(u)
        a, span = b, span * 2


def _eager_top(ws: pd.DataFrame, kernels: pd.DataFrame, calls: pd.DataFrame,
               launches: StepLaunches) -> tuple[pd.DataFrame, np.ndarray]:
    """Top eager kernels per window step, and each window step's kernel-launch host time
    (float64): :func:`coverage_partial` of the whole trace, finished as the merge does."""
    part = coverage_partial(ws, kernels, calls, launches)
    return _top_of(part, len(ws)), part.host.astype(np.float64)


def _top_of(part: CoveragePartial, n: int) -> pd.DataFrame:
    """The eager table (EAGER_TOP_COLUMNS) of ``n`` window steps from their summed partial:
    the EAGER_TOP_N names of most GPU time, per window step."""
    if len(part.names) == 0:
        return _empty_top()
    # most GPU time first, then by name (as sort_values(["gpu_ns", "name"], [False, True]))
    gpu_per = part.gpu_ns.astype(np.float64) / n
    label = part.names.tolist()
    order = sorted(range(len(label)), key=lambda i: (-gpu_per[i], label[i]))[:EAGER_TOP_N]
    # the launch API table of the kept names: kernels per (kept name, API), and the first
    # kernel row of each pair for ties (dicts: a few hundred pairs, where a string Index or
    # factorize costs more than the loop)
    top_groups = np.asarray(order, dtype=np.int64)
    kept = {label[i]: j for j, i in enumerate(order)}
    sel = [i for i, name in enumerate(part.pair_name.tolist()) if name in kept]
    api_at: dict[str, int] = {}
    for i in sel:
        api_at.setdefault(part.pair_api[i], len(api_at))
    width = max(len(api_at), 1)
    table = np.zeros((len(order), width), dtype=np.int64)
    first: dict[int, int] = {}
    for i in sel:
        g, a = kept[part.pair_name[i]], api_at[part.pair_api[i]]
        table[g, a] = part.pair_kernels[i]
        first[g * width + a] = int(part.pair_first[i])
    api_of = np.asarray(list(api_at), dtype=object)
    return pd.DataFrame({
        "name": np.asarray([label[i] for i in order], dtype=object),
        "kernels": part.kernels[top_groups].astype(np.float64) / n,
        "gpu_ns": gpu_per[order],
        "launch_api": np.asarray(_launch_api(table, np.arange(len(order)), api_of,
                                             first.__getitem__), dtype=object),
        "launch_host_ns": part.launch_host_ns[top_groups].astype(np.float64) / n,
    })


#: Eager kernels per chunk of :func:`coverage_partial`.
_TOP_CHUNK = 1 << 20


def _launch_api(table: np.ndarray, groups: np.ndarray, api_of: np.ndarray,
                first_at: Any) -> list[str | None]:
    """Per kernel name code in ``groups``, the API name that launched most of its kernels
    (``table``: kernels per (name code, API code)); a tie goes to the (name, API) pair seen
    first (``first_at(pair code)``: where its first kernel sits in kernel-table order, e.g. its
    row), as a ``groupby(sort=False)`` counted then sorted stably would order them."""
    width = table.shape[1]
    out: list[str | None] = []
    for g in groups:
        counts = table[g]
        best: np.ndarray | list[Any] = (
            np.flatnonzero(counts == counts.max()) if counts.max() else [])
        if len(best) > 1:  # tie: the pair that appears first (one scan per tied pair)
            best = [min(best, key=lambda a: first_at(int(g) * width + int(a)))]
        out.append(str(api_of[best[0]]) if len(best) else None)
    return out
