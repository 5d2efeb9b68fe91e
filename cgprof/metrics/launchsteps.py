"""Steps from the launch stream, for traces where no NVTX range marks a step.

Most scripts carry no NVTX ranges, yet a training or inference loop repeats: every
iteration makes the same launch calls in the same order. :func:`infer_steps` finds that
repetition on each process's launching threads and cuts the trace into iterations.

Evidence (per thread, the calls outside stream capture that put work on the GPU or wait
for it: kernel and graph launches, copies, memsets, syncs, in start order). Each call gets
a label: its API name plus, for a launch, the name of the first kernel it ran (joined on
process and correlation id) or, in a graph-level trace, the graph it replayed. A label that
occurs once per iteration (an *anchor*) cuts the calls into segments from one occurrence to
the next; the segments of the real iterations hold the same calls. Segments are compared
by their length and a hash of the labels they hold; the most common one is the steady
iteration, and the segments that equal it are *steady*.

Rules, by the anchor's kind (``--step auto:RULE`` picks one, ``--step auto`` the best):

* ``graph``: a graph launch (one replay, or a fixed cycle of replays, per iteration). It
  wins whenever it qualifies: a graphed program's steady state is where it replays, however
  long its eager warm-up before capture ran.
* ``kernel``: a kernel launch (the period of the launched-kernel sequence).
* ``copy``: a copy or memset call (a batch copied in each iteration).
* ``sync``: a host sync (a loss read back each iteration).

An anchor that recurs several times per iteration (the kernel of a layer the model repeats)
cuts the iteration into near-identical pieces, and the pieces that differ (where one
iteration ends and the next begins) recur at a fixed stride k. When another anchor on the
same thread cuts one step per k of those pieces, the coarser one is the iteration and the
finer one is dropped. The same shape is an iteration that does extra work every k
iterations (logs its loss every 10): then the steps are k iterations long, and the finer
anchor is still listed among the alternatives; an iteration count for such a loop needs its
steps marked (``cgprof.mark.step()``, or an NVTX range).

An anchor qualifies with at least MIN_ITERATIONS steady segments, each launching work
(kernels or graphs), that hold at least MIN_FIT of the calls from the first steady segment
to the last (its *fit*: a share of calls, not of time, since a host that runs ahead of the
GPU waits at its next sync, and that wait lands in whichever segment holds it). Among the
qualified anchors of a rule, and then of the rules other than ``graph``, those whose fit is
at least FIT_SHARE of the best fit and whose steady calls add up to at least FINER_SHARE of
the most are kept (a label that occurs twice per iteration cuts it into two kinds of
segment that alternate, so only about half of the calls are steady; one that occurs once
every ten iterations explains as many calls as one per iteration, in fewer, coarser
steps), and the one with the most steady segments wins, then the more steady calls, then
the earliest start (the first call of an iteration beats a later one of the same
iteration). Across threads, a kept anchor on the thread that launched first (the main
thread, where the loop runs; autograd's threads launch only the backward pass) wins over
later threads'.

Steps: every segment from the first steady one to the last steady one, whether steady or
not (an iteration that also logs its loss is still an iteration); the last occurrence's
segment counts when its calls equal a steady iteration. Segments before the first steady
one, and the calls before the anchor's first occurrence, are warm-up steps (``warmup``
True: warm-up iterations, compilation, capture); calls after the last step are not in any
step. A graph launch's step begins with the copies and memsets right before it (the
iteration's inputs staged into static buffers) when the same ones precede every
occurrence. A step spans from its anchor call's start to the next step's start (the last one: to
its last call's end), on the anchor's thread; other threads' calls join the step that
contains them in time, as for NVTX steps.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from cgprof import schema as S
from cgprof.io.trace import Trace, column

RULES = ("graph", "kernel", "copy", "sync")
#: A qualified anchor has at least this many steady segments.
MIN_ITERATIONS = 3
#: ... filling at least this share of the time from the first steady one to the last.
MIN_FIT = 0.6
#: Anchors within this share of the best fit, and of the best steady total, compete on count.
FIT_SHARE = 0.85
FINER_SHARE = 0.8
#: Per process, the threads with the most such calls that are tried.
THREADS_TRIED = 4

#: The rule of each family of cgprof.metrics.launches (its names, not imported: the
#: families come with the calls this module is given).
_RULE_OF_FAMILY = {"graph_launch": "graph", "kernel_launch": "kernel", "memcpy": "copy",
                   "memset": "copy", "sync": "sync"}


@dataclass
class LaunchFit:
    """The best anchor of one rule on one process: its steps and how well they fit.

    anchor      the anchor's label (API name, and the kernel or graph it ran)
    starts, ends, warmup   the steps (warm-up ones first), int64 ns and bool
    steady      steady segments; total: segments from the first steady one to the last
    steady_calls  the calls in steady segments; loop_calls: from the first steady one to the
                last steady one
    period_ns   the median steady segment's time
    """

    rule: str
    pid: int
    global_tid: int
    tid: int
    anchor: str
    starts: np.ndarray
    ends: np.ndarray
    warmup: np.ndarray
    steady: int
    total: int
    steady_calls: int
    loop_calls: int
    period_ns: int
    thread_rank: int = 0
    stride: int = 0

    @property
    def fit(self) -> float:
        return self.steady_calls / self.loop_calls if self.loop_calls > 0 else 0.0

    @property
    def warmups(self) -> int:
        return int(self.warmup.sum())


def launch_labels(trace: Trace) -> pd.DataFrame:
    """Per launch (pid, corr_id): ``label`` (categorical), the kernel it ran, or ``graph N``
    for a graph replay (node level: the graph of its nodes' ids, the upper half of a node id;
    graph level: the executable graph)."""
    keys: list[tuple[np.ndarray, np.ndarray]] = []
    codes: list[np.ndarray] = []  # per part, each row's label as a code into ``names``
    names: list[str] = []
    k = trace.stored("kernels")
    if len(k):
        in_graph = k["graph_node_id"].notna().to_numpy()
        pid, corr = k["pid"].to_numpy(np.int64), k["corr_id"].to_numpy(np.int64)
        if (~in_graph).any():
            kernel = pd.Categorical(k["short_name"])
            keys.append((pid[~in_graph], corr[~in_graph]))
            codes.append(np.asarray(kernel.codes, dtype=np.int64)[~in_graph])
            names.extend(str(x) for x in kernel.categories)
        if in_graph.any():
            # a replay's nodes share its launch's correlation id
            graph = k["graph_node_id"].to_numpy()[in_graph].astype(np.int64) >> 32
            g = pd.DataFrame({"pid": pid[in_graph], "corr_id": corr[in_graph], "graph": graph})
            first = g.groupby(["pid", "corr_id"], sort=False)["graph"].min()
            keys.append((first.index.get_level_values(0).to_numpy(np.int64),
                         first.index.get_level_values(1).to_numpy(np.int64)))
            codes.append(_graph_codes(first.to_numpy(np.int64), names))
    gt = trace.graph_trace
    if len(gt):
        ids = gt["graph_exec_id"].astype("Int64").fillna(-1).to_numpy(np.int64)
        keys.append((gt["pid"].to_numpy(np.int64), gt["corr_id"].to_numpy(np.int64)))
        codes.append(_graph_codes(ids, names))
    if not keys:
        return pd.DataFrame({"pid": np.zeros(0, np.int64), "corr_id": np.zeros(0, np.int64),
                             "label": pd.Categorical([])})
    out = pd.DataFrame({"pid": np.concatenate([p for p, _ in keys]),
                        "corr_id": np.concatenate([c for _, c in keys]),
                        "label": pd.Categorical.from_codes(np.concatenate(codes),
                                                           categories=pd.Index(names))})
    return out.drop_duplicates(["pid", "corr_id"])


def _graph_codes(ids: np.ndarray, names: list[str]) -> np.ndarray:
    """Codes into ``names`` of the ``graph N`` labels of ``ids`` (-1: unknown), the labels
    not yet there appended."""
    uniq, inv = np.unique(ids, return_inverse=True)
    codes = []
    for v in uniq:
        label = "graph ?" if v < 0 else f"graph {v}"
        if label not in names:
            names.append(label)
        codes.append(names.index(label))
    return np.asarray(codes, dtype=np.int64)[inv]


def infer_steps(calls: pd.DataFrame, labels: Callable[[], pd.DataFrame]
                ) -> dict[str, list[LaunchFit]]:
    """Per rule (RULES order), the best qualified anchor of each process (module doc);
    rules without one are absent. ``calls``: cgprof.metrics.launches.api_calls;
    ``labels``: gives :func:`launch_labels` (read only when there are calls to label)."""
    fam = calls["family"].astype("category")  # (a no-op when it is one already)
    rule_of_code = np.asarray([RULES.index(_RULE_OF_FAMILY[f]) if f in _RULE_OF_FAMILY else -1
                               for f in fam.cat.categories] + [-1], dtype=np.int8)
    fam_codes = fam.cat.codes.to_numpy()
    rule = rule_of_code[fam_codes]
    live = (rule >= 0) & ~calls["in_capture"].to_numpy(dtype=bool)
    if live.sum() < MIN_ITERATIONS + 1:
        return {}
    rows = np.flatnonzero(live)
    pid = calls["pid"].to_numpy(np.int64)[rows]
    corr = calls["corr_id"].to_numpy(np.int64)[rows]
    api = calls["name"].astype("category").cat
    api_codes = api.codes.to_numpy(np.int64)[rows]
    api_names = list(api.categories)
    lab = labels()
    label_codes = np.full(len(rows), -1, dtype=np.int64)
    label_names: list[str] = []
    if len(lab):
        lab_cat = lab["label"].astype("category")
        label_names = [str(x) for x in lab_cat.cat.categories]
        key = _pair_key(lab["pid"].to_numpy(np.int64), lab["corr_id"].to_numpy(np.int64),
                        pid, corr)
        if key is not None:
            lk, ck = key
            order = np.argsort(lk, kind="stable")
            at = np.searchsorted(lk[order], ck)
            at[at == len(lk)] = 0
            hit = (lk[order][at] == ck) if len(lk) else np.zeros(len(ck), dtype=bool)
            codes = lab_cat.cat.codes.to_numpy(np.int64)[order][at]
            launch = np.isin(rule[rows], [RULES.index("graph"), RULES.index("kernel")])
            label_codes = np.where(hit & launch, codes, -1)
    symbol = api_codes * (len(label_names) + 1) + label_codes + 1

    def text_of(code: int) -> str:
        a, lab_code = divmod(int(code), len(label_names) + 1)
        return str(api_names[a]) + ("" if lab_code == 0 else " " + label_names[lab_code - 1])

    c = pd.DataFrame({"pid": pid, "global_tid": calls["global_tid"].to_numpy(np.int64)[rows],
                      "start_ns": calls["start_ns"].to_numpy(np.int64)[rows],
                      "end_ns": calls["end_ns"].to_numpy(np.int64)[rows],
                      "tid": column(calls, "tid")[rows], "rule": rule[rows], "symbol": symbol})
    found: dict[str, list[LaunchFit]] = {}
    for p, g in c.groupby("pid", sort=True):
        for r, fit in _process_fits(int(p), g, text_of).items():
            found.setdefault(r, []).append(fit)
    return {r: found[r] for r in RULES if r in found}


def _pair_key(pid_a: np.ndarray, corr_a: np.ndarray, pid_b: np.ndarray, corr_b: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray] | None:
    """(pid, corr_id) of both sides as one int64 each (pids coded by position), or None when
    the correlation ids do not fit beside the pid code."""
    pids = np.unique(np.concatenate([pid_a, pid_b]))
    lo = min(int(corr_a.min(initial=0)), int(corr_b.min(initial=0)))
    hi = max(int(corr_a.max(initial=0)), int(corr_b.max(initial=0)))
    width = hi - lo + 1
    if width * len(pids) >= 2**62:
        return None
    return (np.searchsorted(pids, pid_a) * width + (corr_a - lo),
            np.searchsorted(pids, pid_b) * width + (corr_b - lo))


def best_rule(found: dict[str, list[LaunchFit]]) -> str | None:
    """The rule whose steps are used: ``graph`` when it qualified, else the rule of the best
    anchor by the module doc's order (summed over processes)."""
    if not found:
        return None
    if "graph" in found:
        return "graph"
    best = _bests(list(found.values()))
    return max(found, key=lambda r: _rank(found[r], *best))


def instances(fits: list[LaunchFit], name: str) -> pd.DataFrame:
    """The steps of ``fits`` as step instances (the columns of
    cgprof.metrics.summaries.nvtx_ranges, plus ``warmup``), in start order."""
    frames = []
    for f in fits:
        n = len(f.starts)
        frames.append(pd.DataFrame({
            "start_ns": f.starts, "end_ns": f.ends, "dur_ns": f.ends - f.starts,
            "event_type": S.NVTX_PUSHPOP, "global_tid": f.global_tid, "pid": f.pid,
            "tid": f.tid, "payload": pd.array([pd.NA] * n, dtype="Int64"), "text": name,
            "domain": "", "name": name, "warmup": f.warmup}))
    out = pd.concat(frames, ignore_index=True)
    return out.sort_values(["start_ns", "global_tid"], kind="stable").reset_index(drop=True)


def describe(rule: str, fits: list[LaunchFit]) -> str:
    """One sentence: the anchor, the steps, the period and the fit (the first process's
    figures, and how many processes when several)."""
    f = fits[0]
    what = {"graph": "graph launch", "kernel": "kernel launch", "copy": "copy",
            "sync": "sync"}[rule]
    warm = f" after {f.warmups} warm-up step{'s' * (f.warmups != 1)}" if f.warmups else ""
    procs = f" (first of {len(fits)} processes)" if len(fits) > 1 else ""
    return (f"the {what} `{f.anchor}` recurs once per iteration on thread {f.tid}{procs}: "
            f"{f.total} steps{warm}, {f.steady} of them identical, period "
            f"{f.period_ns / 1e6:.3f} ms (median), identical ones hold {_pct(f.fit)} of the "
            "loop's calls")


def _pct(share: float) -> str:
    return f"{min(share, 0.999) * 100:.1f}%" if share < 1.0 else "100%"


def _total(fits: list[LaunchFit]) -> int:
    return sum(f.steady_calls for f in fits)


def _fit(fits: list[LaunchFit]) -> float:
    loop = sum(f.loop_calls for f in fits)
    return _total(fits) / loop if loop > 0 else 0.0


def _bests(groups: list[list[LaunchFit]]) -> tuple[int, float]:
    return max(_total(g) for g in groups), max(_fit(g) for g in groups)


def _rank(fits: list[LaunchFit], best_total: int, best_fit: float) -> tuple:
    total = _total(fits)
    return (total >= FINER_SHARE * best_total and _fit(fits) >= FIT_SHARE * best_fit,
            -min(f.thread_rank for f in fits), sum(f.steady for f in fits), total,
            -min(int(f.starts[~f.warmup][0]) for f in fits))


def _process_fits(pid: int, g: pd.DataFrame, text_of: Callable[[int], str]
                  ) -> dict[str, LaunchFit]:
    """The best anchor per rule on one process, over its THREADS_TRIED busiest threads."""
    best: dict[str, list[LaunchFit]] = {}
    counts = g.groupby("global_tid", sort=True).size().sort_values(ascending=False, kind="stable")
    tried = list(counts.index[:THREADS_TRIED])
    first = g.groupby("global_tid")["start_ns"].min()
    every: list[LaunchFit] = []
    # threads in the order they first launched: the main thread, then autograd's
    for rank, gtid in enumerate(sorted(tried, key=lambda t: (int(first[t]), int(t)))):
        t = g[g["global_tid"] == gtid].sort_values("start_ns", kind="stable")
        for fit in _thread_fits(pid, int(gtid), t, text_of):
            fit.thread_rank = rank
            every.append(fit)
    for fit in every:
        if not _within(fit, every):
            best.setdefault(fit.rule, []).append(fit)
    return {rule: _pick(fits) for rule, fits in best.items()}


def _within(fine: LaunchFit, fits: list[LaunchFit]) -> bool:
    """``fine`` recurs inside the iteration another anchor cuts: its odd segments recur at a
    fixed stride k, and another anchor on the same thread cuts one step per k of its own."""
    k = fine.stride
    return bool(k) and any(
        c is not fine and c.global_tid == fine.global_tid and abs(c.total * k - fine.total) <= k
        for c in fits)


def _pick(fits: list[LaunchFit]) -> LaunchFit:
    best = _bests([[f] for f in fits])
    return max(fits, key=lambda f: _rank([f], *best))


def _weights(codes: np.ndarray) -> np.ndarray:
    """A fixed pseudo-random uint64 per label code (splitmix64): the segments' hash adds them."""
    z = codes.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def _thread_fits(pid: int, gtid: int, t: pd.DataFrame, text_of: Callable[[int], str]
                 ) -> list[LaunchFit]:
    """Every rule's best anchor on one thread's calls (in start order)."""
    n = len(t)
    if n < MIN_ITERATIONS + 1:
        return []
    uniques, codes = np.unique(t["symbol"].to_numpy(np.int64), return_inverse=True)
    start = t["start_ns"].to_numpy(np.int64)
    end = t["end_ns"].to_numpy(np.int64)
    rules = np.asarray(RULES, dtype=object)[t["rule"].to_numpy()]
    tid = int(t["tid"].iloc[0])
    with np.errstate(over="ignore"):
        prefix = np.concatenate([[np.uint64(0)], np.cumsum(_weights(codes), dtype=np.uint64)])
    is_launch = np.isin(rules, ["graph", "kernel"])
    launches = np.concatenate([[0], np.cumsum(is_launch, dtype=np.int64)])
    order = np.argsort(codes, kind="stable")
    bounds = np.flatnonzero(np.diff(codes[order])) + 1
    per_rule: dict[str, list[LaunchFit]] = {}
    for pos in np.split(order, bounds):
        if len(pos) < MIN_ITERATIONS + 1:
            continue
        fit = _anchor_fit(pos, prefix, launches, codes, start, end, n)
        if fit is not None:
            back = _lead(pos, rules, codes)
            if back:
                fit = _anchor_fit(pos - back, prefix, launches, codes, start, end, n) or fit
        if fit is None:
            continue
        starts, ends, warm, steady, total, steady_calls, loop_calls, period, stride = fit
        rule = str(rules[pos[0]])
        per_rule.setdefault(rule, []).append(LaunchFit(
            rule, pid, gtid, tid, text_of(int(uniques[codes[pos[0]]])), starts, ends, warm, steady,
            total, steady_calls, loop_calls, period, stride=stride))
    return [f for fits in per_rule.values() for f in fits]


def _lead(pos: np.ndarray, rules: np.ndarray, codes: np.ndarray) -> int:
    """For a graph launch anchor: how many copy and memset calls right before it begin its
    step (the iteration's inputs staged into the graph's static buffers), the same labels
    before every occurrence; 0 for other anchors."""
    if rules[pos[0]] != "graph" or pos[0] == 0:
        return 0
    back = 0
    while back < pos[0] and rules[pos[0] - back - 1] == "copy":
        back += 1
    while back:
        before = pos[:, None] - back + np.arange(back)[None, :]
        if (pos - back >= 0).all() and (rules[before] == "copy").all() and (
                codes[before] == codes[before[0]]).all():
            return back
        back -= 1
    return 0


def _stride(steady: np.ndarray, first: int) -> int:
    """The fixed stride (in segments) at which the segments that differ from the steady one
    recur from ``first`` on, or 0 when they do not (fewer than two, or irregular)."""
    odd = np.flatnonzero(~steady[first:])
    if len(odd) < 2:
        return 0
    step = np.diff(odd)
    return int(step[0]) if (step == step[0]).all() and step[0] >= 2 else 0


def _completes(codes: np.ndarray, at: int, m: int, last: int, n: int) -> int:
    """How many calls from ``last`` hold every call of the steady segment at ``at`` (of
    length ``m``), within 2 * m calls, or 0."""
    rest = codes[last:min(n, last + 2 * m)]
    want = pd.Series(codes[at:at + m]).value_counts()
    seen = pd.Series(rest).groupby(rest).cumcount().to_numpy() + 1  # k-th occurrence so far
    need = want.reindex(rest).to_numpy()
    done = np.flatnonzero(seen == need)  # where a label reaches its steady count
    if len(done) < len(want):
        return 0
    return int(done[len(want) - 1]) + 1 if len(set(rest[done[:len(want)]])) == len(want) else 0


def _anchor_fit(pos: np.ndarray, prefix: np.ndarray, launches: np.ndarray, codes: np.ndarray,
                start: np.ndarray, end: np.ndarray, n: int) -> tuple | None:
    """The steps an anchor at call positions ``pos`` cuts, or None when it does not qualify."""
    with np.errstate(over="ignore"):
        seg_hash = prefix[pos[1:]] - prefix[pos[:-1]]
    seg_len = np.diff(pos)
    with np.errstate(over="ignore"):
        mixed = seg_len.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    keys = pd.factorize(seg_hash ^ mixed)[0]  # one key per (labels, length)
    modal = int(np.bincount(keys).argmax())
    steady = keys == modal
    m = int(seg_len[np.argmax(steady)])
    h = seg_hash[np.argmax(steady)]
    at = int(pos[np.argmax(steady)])
    if launches[at + m] == launches[at]:
        return None  # the steady segment launches nothing: no iteration of GPU work
    last = int(pos[-1])
    with np.errstate(over="ignore"):
        tail = last + m <= n and prefix[last + m] - prefix[last] == h
    # the last occurrence's iteration: the steady calls exactly, or all of them and a few
    # more (it also logs), ending at the call that completes them
    tail_len = m if tail else _completes(codes, at, m, last, n)
    n_steady = int(steady.sum()) + int(tail)
    if n_steady < MIN_ITERATIONS:
        return None
    idx = np.flatnonzero(steady)
    first, final = int(idx[0]), (len(pos) - 1 if tail_len else int(idx[-1]))
    seg_start = start[pos]
    seg_end = np.append(seg_start[1:], end[last + tail_len - 1] if tail_len else end[-1])
    dur = seg_end - seg_start
    steady_all = np.append(steady, tail)
    steady_calls = n_steady * m
    loop_calls = int((last + tail_len if tail_len else pos[final + 1]) - pos[first])
    if steady_calls < MIN_FIT * loop_calls:
        return None
    stride = _stride(steady[:final], first)
    keep = np.arange(first, final + 1)
    starts, ends = seg_start[keep], seg_end[keep]
    warm_starts, warm_ends = seg_start[:first], seg_end[:first]
    if pos[0] > 0:  # calls before the anchor's first occurrence: one warm-up step
        warm_starts = np.concatenate([[start[0]], warm_starts])
        warm_ends = np.concatenate([[seg_start[0]], warm_ends])
    starts = np.concatenate([warm_starts, starts]).astype(np.int64)
    ends = np.concatenate([warm_ends, ends]).astype(np.int64)
    warm = np.arange(len(starts)) < len(warm_starts)
    period = int(np.median(dur[steady_all]))
    return starts, ends, warm, n_steady, len(keep), steady_calls, loop_calls, period, stride
