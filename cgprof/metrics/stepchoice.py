"""Which NVTX range is the step, when the user did not say: candidates scored on evidence.

:func:`choose_step_ranges` (what ``cgprof.metrics.steps`` calls) applies the rules in order:

1. ``option``: ``--step NAME[@DOMAIN]``.
2. ``default``: cgprof's own range ``step`` in domain ``cgprof`` (``cgprof.mark.step()``).
3. ``scored`` / ``cycle``: every repeating range name, and every fixed cycle of top-level
   ranges, is a candidate scored by :func:`score_candidates`; the best qualified one wins.
   A cycle (e.g. ``reader``, ``backbone``, ..., ``post_processing``, each once per
   iteration, always in that order) is one step per cycle: an instance spans the first
   range's start to the last range's end of each cycle, on that thread.
4. ``marked``: ``cgprof record``'s step marker (cgprof/bootstrap/sitecustomize.py) marked
   each optimizer step, range ``cgprof.record: step`` (default domain), unless the launch
   stream finds graph replays recurring once per iteration (a captured optimizer step
   replays without calling the hook, so the marks cover only warm-up and capture).
5. ``launches``: no NVTX range qualified; the iterations are found in the launch stream
   (cgprof.metrics.launchsteps: a graph launch, kernel, copy or sync that recurs once per
   iteration). ``--step auto`` asks for this rule, ``--step auto:RULE`` for one of its
   rules (graph, kernel, copy, sync).
6. ``whole-trace``: nothing qualified; the whole trace is one step.

Scoring (one row per range name, i.e. ``domain:text``; see :func:`score_candidates`):

* ``count``: instances (closed ranges). A candidate needs at least 2 on one thread (a range
  that each of several threads opens once is no loop).
* ``top_level``: share of instances not nested inside a range of another name on the same
  thread. Ranges that occur once on a thread (a ``main`` or ``training`` wrapper) do not
  count as parents, so a loop inside one wrapper is still top-level.
* ``coverage``: share of the kernel- and graph-launch calls (outside stream capture) of the
  candidate's processes, made between its first instance's start and its last one's end,
  that start inside one of its instances, counting calls on every thread of the process
  (PyTorch launches the backward pass from autograd threads, as ``cgprof.metrics.steps``
  attributes them). Calls before the first or after the last instance (warm-up, compilation,
  evaluation after the loop) do not count. <NA> when those processes launch nothing then.
* ``overlap``: share of instances that start before the previous instance on the same thread
  ended (steps must not overlap).
* ``library``: the range belongs to a library, not to the user's loop: NCCL, CUB/CCCL,
  cuDNN, cuBLAS, MPI, TensorRT/myelin, NVSHMEM, PyTorch's per-op ranges from ``emit_nvtx``
  (``aten::...``, ``..., op_id = N``, ``..., seq = N``), profiler ranges (``ProfilerStep#N``,
  DLProf's JSON ``{...}`` markers), nvFuser internals (``getTerminatingOutputs``, ...).
* ``name``: ``step``-like names (step, iter, iteration, batch, train, training as a word)
  score x2; ``epoch`` x0.25 (an epoch is many steps: too coarse a unit).

A candidate qualifies when it is no library range, repeats (2 or more on a thread), covers
at least MIN_COVERAGE of its processes' launch calls (or they launch nothing) and at most
MAX_OVERLAP of its instances overlap. Its score::

    coverage (1 when unknown) * (0.5 + 0.5 * top_level) * min(1, count / MANY) * name factor

and 0 when it does not qualify. Ties go to more instances, then to the name. ``reasons``
says in words what counted for and against each candidate.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from cgprof import schema as S
from cgprof.errors import AnalysisError
from cgprof.io.trace import Trace
from cgprof.metrics import launches as L
from cgprof.metrics import launchsteps as LS
from cgprof.metrics.summaries import nvtx_ranges

DEFAULT_STEP = ("step", "cgprof")
#: The range cgprof record's step marker opens at each optimizer step (default domain).
MARKED_STEP = "cgprof.record: step"

#: A candidate must contain at least this share of its processes' launch calls.
MIN_COVERAGE = 0.5
#: At most this share of a candidate's instances may overlap the previous one on its thread.
MAX_OVERLAP = 0.1
#: From this many instances on, the count no longer raises the score.
MANY = 10
#: Candidates kept in StepChoice / StepResult (best first); score_candidates returns all.
CANDIDATES_KEPT = 10
#: Score factors for names that look like a step, and like an epoch.
STEP_NAME_FACTOR = 2.0
EPOCH_NAME_FACTOR = 0.25

CANDIDATE_COLUMNS = ["name", "domain", "text", "kind", "count", "top_level", "coverage",
                     "overlap", "library", "qualified", "score", "reasons"]

_STEP_WORD = re.compile(r"(?<![a-z])(step|iter|iteration|batch|train|training)(?![a-z])")
_EPOCH_WORD = re.compile(r"(?<![a-z])epochs?(?![a-z])")
_LIBRARY_DOMAINS = re.compile(
    r"^(nccl|rccl|cccl|cub|thrust|cudnn|cublas|cublaslt|cufft|cusolver|cusparse|curand|"
    r"mpi|openmpi|nvshmem|tensorrt|trt|myelin|nvfuser|dlprof|nsight systems|pytorch)$",
    re.IGNORECASE)
_LIBRARY_TEXT = [
    ("NCCL", re.compile(r"^nccl|^rccl", re.IGNORECASE)),
    ("CUB/CCCL", re.compile(r"^(cub|thrust|cccl)::|^CCCL:", re.IGNORECASE)),
    ("cuDNN", re.compile(r"^cudnn", re.IGNORECASE)),
    ("cuBLAS", re.compile(r"^cublas", re.IGNORECASE)),
    ("MPI", re.compile(r"^MPI[_:]|^PMPI_")),
    ("TensorRT", re.compile(r"^myelin|tensorrt|^trt[:_ ]|^ExecutionContext::", re.IGNORECASE)),
    ("PyTorch per-op (emit_nvtx)", re.compile(r"^aten::|, op_id = |(^|, )seq = \d")),
    ("profiler", re.compile(r"^ProfilerStep#|^\s*\{")),
    ("nvFuser", re.compile(
        r"^(getTerminatingOutputs|FusionExecutor|FusionKernelRuntime|KernelExecutor|GpuLower|"
        r"executor_utils::|SegmentCandidateFinder|nvfuser|Fusion::|FusionExecutorCache|"
        r"inferOutputSizes|allocOutputs|prepareRuntimeOrder|ExpressionEvaluator)")),
]


@dataclass
class StepChoice:
    """The chosen step instances and how they were chosen.

    ranges      the instances (columns of cgprof.metrics.summaries.nvtx_ranges)
    name        display name ("cgprof:step"), None for whole-trace
    source      "option", "default", "scored", "cycle", "marked", "launches" or
                "whole-trace"
    rule        one sentence: which rule chose it and why
    candidates  the CANDIDATES_KEPT best scored candidates, best first (CANDIDATE_COLUMNS);
                empty for option and default
    """

    ranges: pd.DataFrame
    name: str | None
    source: str
    rule: str
    candidates: pd.DataFrame


def library_of(text: str, domain: str) -> str | None:
    """Which library an NVTX range belongs to (by its domain or text), or None (cgprof
    record's own marker counts as one: it has a rule of its own)."""
    if text == MARKED_STEP:
        return "cgprof record"
    if domain and _LIBRARY_DOMAINS.match(domain.strip()):
        return domain
    for lib, pat in _LIBRARY_TEXT:
        if pat.search(text):
            return lib
    return None


def name_factor(text: str) -> float:
    """STEP_NAME_FACTOR for step-like names, EPOCH_NAME_FACTOR for epoch-like ones, else 1."""
    low = text.lower()
    if _EPOCH_WORD.search(low):
        return EPOCH_NAME_FACTOR
    if _STEP_WORD.search(low):
        return STEP_NAME_FACTOR
    return 1.0


def parse_step_option(value: str) -> tuple[str, str | None]:
    """``NAME[@DOMAIN]`` -> (name, domain or None)."""
    if "@" in value:
        name, domain = value.rsplit("@", 1)
        return name, domain
    return value, None


def choose_step_ranges(trace: Trace, step: str | None,
                       calls: pd.DataFrame | None = None,
                       ranges: pd.DataFrame | None = None,
                       labels: Callable[[], pd.DataFrame] | None = None) -> StepChoice:
    """Apply the rules of the module doc; ``calls`` is cgprof.metrics.launches.api_calls,
    ``ranges`` the trace's cgprof.metrics.summaries.nvtx_ranges when the caller has them,
    ``labels`` gives cgprof.metrics.launchsteps.launch_labels (default: of ``trace``)."""
    if ranges is None:
        ranges = nvtx_ranges(trace)
    if labels is None:
        labels = lambda: LS.launch_labels(trace)  # noqa: E731
    empty = pd.DataFrame({c: [] for c in CANDIDATE_COLUMNS})
    if step is not None and (step == "auto" or step.startswith("auto:")):
        if calls is None:
            calls = L.api_calls(trace, derived=False)
        rule = step[len("auto:"):] or None
        if rule is not None and rule not in LS.RULES:
            raise AnalysisError(f"--step {step}: the rules are auto:" + ", auto:".join(LS.RULES))
        chosen = _from_launches(calls, labels, rule, empty)
        if chosen is None:
            raise AnalysisError(f"{trace.path}: --step {step}: no launch that recurs once per "
                                f"iteration{' for rule ' + rule if rule else ''}")
        return chosen
    if step is not None:
        name, domain = parse_step_option(step)
        sel = ranges[ranges["text"] == name]
        if domain is not None:
            sel = sel[sel["domain"] == domain]
        if sel.empty:
            known = ", ".join(_range_labels(ranges)[:8]) or "none"
            raise AnalysisError(
                f"{trace.path}: no NVTX range '{step}' (ranges in this trace: {known})"
            )
        return StepChoice(sel, str(sel["name"].iloc[0]), "option",
                          f"option: --step {step}", empty)
    name, domain = DEFAULT_STEP
    sel = ranges[(ranges["text"] == name) & (ranges["domain"] == domain)]
    if len(sel):
        return StepChoice(sel, f"{domain}:{name}", "default",
                          "default: cgprof's own step range (cgprof.mark.step)", empty)
    if calls is None:
        calls = L.api_calls(trace, derived=False)
    cand, cycles = score_candidates(ranges, calls)
    if len(cand) and bool(cand["qualified"].iloc[0]):
        best = cand.iloc[0]
        source = str(best["kind"])
        inst = (cycles[str(best["name"])] if source == "cycle" else
                ranges[ranges["name"].astype(str) == str(best["name"])])
        return StepChoice(inst, str(best["name"]), source, _rule_sentence(best, inst),
                          cand.head(CANDIDATES_KEPT))
    chosen = _from_launches(calls, labels, None, cand.head(CANDIDATES_KEPT))
    marked = ranges[(ranges["text"] == MARKED_STEP) & (ranges["domain"] == "")]
    if len(marked) >= 2 and (chosen is None or chosen.name != "auto:graph"):
        return StepChoice(marked, MARKED_STEP, "marked",
                          "marked: cgprof record's step marker, one range per optimizer step "
                          "(cgprof record --no-mark-steps leaves it out)",
                          cand.head(CANDIDATES_KEPT) if chosen is None else chosen.candidates)
    if chosen is not None:
        return chosen
    why = ("no NVTX ranges" if ranges.empty else "no NVTX range repeats" if cand.empty else
           "no repeating range qualified as a step (see the candidates)")
    return StepChoice(ranges.iloc[0:0], None, "whole-trace", f"whole-trace: {why}",
                      cand.head(CANDIDATES_KEPT))


def _from_launches(calls: pd.DataFrame, labels: Callable[[], pd.DataFrame], rule: str | None,
                   nvtx: pd.DataFrame) -> StepChoice | None:
    """Steps from the launch stream (``rule``: one of launchsteps.RULES, None: the best),
    with every rule that found steps listed first among the candidates, or None."""
    found = LS.infer_steps(calls, labels)
    pick = LS.best_rule(found) if rule is None else rule if rule in found else None
    if pick is None:
        return None
    rows = [{"name": f"auto:{r}", "domain": "", "text": f"auto:{r}", "kind": "launches",
             "count": sum(f.total for f in fits), "top_level": 1.0,
             "coverage": round(fits[0].fit, 4), "overlap": 0.0, "library": "",
             "qualified": True, "score": round(fits[0].fit, 4),
             "reasons": LS.describe(r, fits)} for r, fits in found.items()]
    rows.sort(key=lambda row: row["name"] != f"auto:{pick}")
    cand = pd.concat([pd.DataFrame(rows, columns=CANDIDATE_COLUMNS), nvtx], ignore_index=True)
    name = f"auto:{pick}"
    lead = "option: --step " + name if rule else "launches: no NVTX range marks a step"
    return StepChoice(LS.instances(found[pick], name), name, "launches",
                      f"{lead}; {LS.describe(pick, found[pick])}", cand.head(CANDIDATES_KEPT))


def _rule_sentence(best: pd.Series, inst: pd.DataFrame) -> str:
    threads = sorted(int(t) for t in pd.unique(inst["tid"]))
    procs = len(pd.unique(inst["pid"]))
    where = (f"thread {threads[0]}" if len(threads) == 1 else
             f"{len(threads)} threads" + (f" in {procs} processes" if procs > 1 else ""))
    parts = [f"{best['kind']}: "]
    if best["kind"] == "cycle":
        parts.append(f"a fixed cycle of top-level ranges on {where}, one step per cycle, "
                     f"{best['count']} cycles")
    else:
        top = float(best["top_level"])
        parts.append(f"top-level on {where}" if top >= 1.0 else
                     f"nested in other ranges on {where}" if top <= 0.0 else
                     f"{_pct(top)} top-level on {where}")
        parts.append(f", {best['count']} instances")
    cov = best["coverage"]
    parts.append(", no launch calls to cover" if pd.isna(cov) else
                 f", covers {_pct(cov)} of launch calls")
    if best["kind"] != "cycle" and name_factor(str(best["text"])) > 1:
        parts.append(", name looks like a step")
    return "".join(parts)


def score_candidates(ranges: pd.DataFrame, calls: pd.DataFrame
                     ) -> tuple[pd.DataFrame, dict[str, pd.DataFrame]]:
    """Score every repeating range name and every fixed cycle as a step (module doc).

    Returns the candidates (CANDIDATE_COLUMNS, best first) and, per cycle candidate, its
    instances (nvtx_ranges columns; each spans one cycle; ``name`` and ``text`` are the
    candidate's name). Columns: name, domain, text; kind "scored" (a range
    name) or "cycle"; count (instances); top_level, coverage, overlap (shares 0..1, coverage
    NaN when the processes launch nothing); library (the library's name, or "");
    qualified (bool); score (float, 0 when not qualified); reasons (text).
    """
    empty = pd.DataFrame({c: [] for c in CANDIDATE_COLUMNS})
    if ranges.empty:
        return empty, {}
    r = ranges.assign(end_ns=ranges["end_ns"].astype("int64"),
                      name=ranges["name"].astype(str)).reset_index(drop=True)
    counts = r.groupby("name", sort=True).size()
    counts = counts[counts >= 2]
    top = _top_level(r)
    launches = _launch_times(calls)
    rows: list[dict] = []
    cycles: dict[str, pd.DataFrame] = {}
    libs: dict[str, str | None] = {}
    start = r["start_ns"].to_numpy(np.int64)
    end = r["end_ns"].to_numpy(np.int64)
    pid = r["pid"].to_numpy(np.int64)
    gtid = r["global_tid"].to_numpy(np.int64)
    texts, domains = r["text"].to_numpy(), r["domain"].to_numpy()
    groups = r.groupby("name", sort=True).indices
    per_thread = r.groupby(["name", "global_tid"]).size().groupby(level=0).max()
    for name, count in counts.items():
        idx = groups[name]
        text = texts[idx[0]] if isinstance(texts[idx[0]], str) else ""
        domain = str(domains[idx[0]])
        libs[str(name)] = lib = library_of(text, domain)
        rows.append(_judge(str(name), domain, text, "scored", int(count), int(per_thread[name]),
                           float(top[idx].mean()),
                           _coverage(pid[idx], start[idx], end[idx], launches),
                           _overlap(gtid[idx], start[idx], end[idx]), lib))
    for cyc_name, inst in _cycles(r, top, counts, libs).items():
        s_, e_ = inst["start_ns"].to_numpy(np.int64), inst["end_ns"].to_numpy(np.int64)
        rows.append(_judge(cyc_name, "", cyc_name, "cycle", len(inst), len(inst), 1.0,
                           _coverage(inst["pid"].to_numpy(np.int64), s_, e_, launches),
                           _overlap(inst["global_tid"].to_numpy(np.int64), s_, e_), None))
        cycles[cyc_name] = inst
    if not rows:
        return empty, {}
    cand = pd.DataFrame(rows, columns=CANDIDATE_COLUMNS)
    cand = cand.sort_values(["score", "count", "name"], ascending=[False, False, True],
                            kind="stable").reset_index(drop=True)
    return cand, cycles


def _judge(name: str, domain: str, text: str, kind: str, count: int, per_thread: int,
           top_level: float,
           coverage: float | None, overlap: float, library: str | None) -> dict:
    reasons = []
    qualified = True
    if library:
        qualified = False
        reasons.append(f"library range ({library})")
    if count < 2 or per_thread < 2:
        qualified = False
        reasons.append("does not repeat" if count < 2 else "does not repeat on any one thread")
    if coverage is not None and coverage < MIN_COVERAGE:
        qualified = False
        reasons.append(f"covers only {_pct(coverage)} of launch calls")
    if overlap > MAX_OVERLAP:
        qualified = False
        reasons.append(f"{overlap:.0%} of instances overlap")
    if top_level < 1.0:
        reasons.append(f"{1 - top_level:.0%} nested in other ranges")
    nf = 1.0 if kind == "cycle" else name_factor(text)
    if nf > 1:
        reasons.append("name looks like a step")
    elif nf < 1:
        reasons.append("name looks like an epoch (too coarse)")
    if kind == "cycle":
        reasons.append("fixed cycle of top-level ranges")
    raw = ((1.0 if coverage is None else coverage) * (0.5 + 0.5 * top_level)
           * min(1.0, count / MANY) * nf)
    return {"name": name, "domain": domain, "text": text, "kind": kind, "count": count,
            "top_level": round(top_level, 4),
            "coverage": np.nan if coverage is None else round(coverage, 4),
            "overlap": round(overlap, 4), "library": library or "", "qualified": qualified,
            "score": round(raw, 4) if qualified else 0.0, "reasons": "; ".join(reasons)}


def _pct(share: float) -> str:
    """0.9986 -> "99.9%" (never rounded up to 100%), 0.5 -> "50%"."""
    if share >= 1.0 or share <= 0.0:
        return f"{share:.0%}"
    digits = 0
    while digits < 3 and round(share * 100, digits) in (0.0, 100.0):
        digits += 1
    return f"{share * 100:.{digits}f}%"


def _top_level(r: pd.DataFrame) -> np.ndarray:
    """Per range: not nested inside a range of another name on its thread.

    Only names that occur at least twice on the thread count as parents (a one-off
    ``main`` wrapper around the loop does not). Per thread, the outermost such ranges
    ("roots": not enclosed by an earlier-starting one) are found with a running maximum of
    end times; a range is nested when the last root starting at or before it encloses it,
    is another range and has another name."""
    out = np.ones(len(r), dtype=bool)
    per_thread = r.groupby(["global_tid", "name"])["name"].transform("size").to_numpy()
    for _gtid, idx in r.groupby("global_tid", sort=False).indices.items():
        sub = r.iloc[idx]
        cont = per_thread[idx] >= 2
        if not cont.any():
            continue
        c_idx = idx[cont]
        cs = r["start_ns"].to_numpy(np.int64)[c_idx]
        ce = r["end_ns"].to_numpy(np.int64)[c_idx]
        order = np.lexsort((-ce, cs))
        c_idx, cs, ce = c_idx[order], cs[order], ce[order]
        prev_max = np.concatenate([[np.iinfo(np.int64).min], np.maximum.accumulate(ce)[:-1]])
        root = prev_max < ce
        ri, rs, re_ = c_idx[root], cs[root], ce[root]
        s = sub["start_ns"].to_numpy(np.int64)
        e = sub["end_ns"].to_numpy(np.int64)
        j = np.searchsorted(rs, s, "right") - 1
        ok = j >= 0
        jj = np.where(ok, j, 0)
        names = r["name"].to_numpy()
        nested = (ok & (re_[jj] >= e) & (ri[jj] != idx)
                  & (names[ri[jj]] != names[idx]))
        out[idx] = ~nested
    return out


def _launch_times(calls: pd.DataFrame) -> dict[int, np.ndarray]:
    """Sorted start times of kernel- and graph-launch calls outside capture, per process."""
    if calls.empty:
        return {}
    c = calls[calls["family"].isin([L.KERNEL_LAUNCH, L.GRAPH_LAUNCH]) & ~calls["in_capture"]]
    return {int(p): np.sort(g["start_ns"].to_numpy(np.int64))
            for p, g in c.groupby("pid", sort=False)}


def _sorted_by(key: np.ndarray, start: np.ndarray, end: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Sorted by (key, start): key, start, the running maximum of end within each key, and
    where each key's block begins."""
    order = np.lexsort((start, key))
    k, s, e = key[order], start[order], end[order]
    first = np.concatenate([[True], k[1:] != k[:-1]]) if len(k) else np.zeros(0, dtype=bool)
    run = e.copy()
    bounds = np.append(np.flatnonzero(first), len(e))
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):  # few keys (threads, processes)
        run[a:b] = np.maximum.accumulate(e[a:b])
    return k, s, run, first


def _coverage(pid: np.ndarray, start: np.ndarray, end: np.ndarray,
              launches: dict[int, np.ndarray]) -> float | None:
    """Share of the instance processes' launch calls that start inside an instance."""
    k, s, run, first = _sorted_by(pid, start, end)
    # Union of the instances per process (they may overlap across threads): an interval
    # starts where the process changes or the start lies past every earlier end.
    new = first.copy()
    new[1:] |= s[1:] > run[:-1]
    heads = np.flatnonzero(new)
    u_start, u_end, u_pid = s[heads], run[np.append(heads[1:], len(s)) - 1], k[heads]
    inside = total = 0
    for p in np.unique(u_pid):
        t = launches.get(int(p))
        if t is None or not len(t):
            continue
        m = u_pid == p
        # Only calls made while the loop runs count: from the first instance's start to
        # the last one's end. Warm-up before the loop (torch.compile compiles and warms up
        # its CUDA graph trees eagerly, thousands of launches) says nothing about the step.
        total += int(np.searchsorted(t, u_end[m].max(), "right")
                     - np.searchsorted(t, u_start[m].min(), "left"))
        inside += int((np.searchsorted(t, u_end[m], "right")
                       - np.searchsorted(t, u_start[m], "left")).sum())
    return None if total == 0 else inside / total


def _overlap(gtid: np.ndarray, start: np.ndarray, end: np.ndarray) -> float:
    """Share of instances starting before an earlier instance on the same thread ended."""
    if not len(start):
        return 0.0
    _k, s, run, first = _sorted_by(gtid, start, end)
    return int((~first[1:] & (s[1:] < run[:-1])).sum()) / len(start)


def _cycles(r: pd.DataFrame, top: np.ndarray, counts: pd.Series,
            libs: dict[str, str | None]) -> dict[str, pd.DataFrame]:
    """Per thread, top-level non-library ranges that repeat in one fixed order, as cycles
    (the same cycle on several threads, e.g. one per process, is one candidate).

    The thread's sequence of top-level ranges (of names repeating on the thread) must be
    one pattern of at least 2 distinct names repeated at least twice, the last repetition
    possibly cut short (it is dropped). Each whole cycle becomes one instance."""
    out: dict[str, pd.DataFrame] = {}
    rep = r["name"].isin(counts.index).to_numpy() & top
    for gtid, g in r[rep].groupby("global_tid", sort=True):
        g = g[g["name"].map(libs).isna().to_numpy()]
        g = g.sort_values(["start_ns", "end_ns"], kind="stable")
        seq = g["name"].to_numpy()
        k = len(pd.unique(seq))
        if k < 2 or len(seq) < 2 * k:
            continue
        period = seq[:k]
        if len(set(period)) != k:
            continue
        n_cycles = len(seq) // k
        if not (seq[: n_cycles * k].reshape(n_cycles, k) == period).all():
            continue
        if not (seq[n_cycles * k:] == period[: len(seq) - n_cycles * k]).all():
            continue
        s = g["start_ns"].to_numpy(np.int64)[: n_cycles * k].reshape(n_cycles, k)
        e = g["end_ns"].to_numpy(np.int64)[: n_cycles * k].reshape(n_cycles, k)
        label = f"cycle {period[0]} .. {period[-1]} ({k} ranges)"
        first = g.iloc[::k].iloc[:n_cycles]
        found = pd.DataFrame({
            "start_ns": s[:, 0], "end_ns": e.max(axis=1),
            "dur_ns": e.max(axis=1) - s[:, 0], "event_type": S.NVTX_PUSHPOP,
            "global_tid": gtid, "pid": first["pid"].to_numpy(), "tid": first["tid"].to_numpy(),
            "payload": pd.array([pd.NA] * n_cycles, dtype="Int64"),
            "text": label, "domain": "", "name": label})
        # The same cycle on several threads (one per rank): one candidate, all instances.
        out[label] = pd.concat([out[label], found], ignore_index=True) if label in out else found
    return out


def _range_labels(ranges: pd.DataFrame) -> list[str]:
    labels = []
    for (text, domain), _ in ranges.groupby(["text", "domain"], sort=True):
        labels.append(f"{text}@{domain}" if domain else str(text))
    return labels
