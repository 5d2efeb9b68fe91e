"""Terminal rendering: a short summary a user can read in ten seconds."""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import pandas as pd

from cgprof.untraced import ms_text, node_tracing_note

HEAD_TAIL = 3  # steps shown at each end of the step table
CANDIDATES_SHOWN = 3  # step candidates listed after the chosen one


def fmt_us(ns: Any, digits: int = 1) -> str:
    """Nanoseconds -> "12.3" microseconds ("-" when unknown)."""
    if ns is None or ns is pd.NA or (isinstance(ns, float) and ns != ns):
        return "-"
    return f"{float(ns) / 1000:.{digits}f}"


def fmt_num(v: Any, digits: int = 2) -> str:
    if v is None or v is pd.NA or (isinstance(v, float) and v != v):
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def records(df: pd.DataFrame, cols: Sequence[str], at: Any = None) -> list[Any]:
    """The rows of ``df`` as objects with one attribute per column of ``cols``, holding what
    ``df.itertuples()`` holds (each column's own iteration: Python scalars, ``pd.NA``) without
    the namedtuple class and the Series of every column it makes (the step table's 37
    columns: ~3 of a small trace's ~5 ms report). ``at``: those row positions only."""
    if at is not None:
        df = df.take(at)
    columns = [list(df[c]) for c in cols]
    return [SimpleNamespace(**dict(zip(cols, values, strict=True)))
            for values in zip(*columns, strict=True)]


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], indent: str = "  ") -> str:
    """Plain aligned table: first column left-aligned, the rest right-aligned."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for n, r in enumerate(cells):
        parts = [r[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(r[1:], widths[1:],
                                                                        strict=True)]
        lines.append(indent + "  ".join(parts).rstrip())
        if n == 0:
            lines.append(indent + "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def unavailable(result: Any) -> str | None:
    """Why the result's GPU figures are not shown (its trace is incomplete:
    cgprof.metrics.completeness), None when they are recorded."""
    c = getattr(result, "completeness", None)
    return None if c is None or c.complete else c.reason


#: What stands in for a GPU figure an incomplete trace cannot support.
NOT_RECORDED = "unavailable: not recorded"


def incomplete_lines(result: Any) -> list[str]:
    """The first lines of an incomplete trace's report: that it is, and what is missing."""
    c = getattr(result, "completeness", None)
    if c is None or c.complete:
        return []
    return (["INCOMPLETE TRACE: GPU records are missing, so its GPU figures (busy, idle, "
             "replay compactness, graph coverage, the estimate) are unavailable: not recorded; "
             "the host side is shown as recorded"]
            + [f"  missing: {m}" for m in c.missing])


def render(result: Any) -> str:
    """The summary of one analysed trace."""
    info = result.info
    out: list[str] = []
    gpus = ", ".join(f"{g['device_id']}: {g['name']}" for g in info["gpus"]) or "unknown"
    mode = info["graph_trace_mode"] or "unknown"
    out.append(f"== {info['path']}")
    out.extend(incomplete_lines(result))
    out.append(
        f"nsys {info['nsys_version'] or 'unknown'} (export schema "
        f"{info['schema_version'] or 'unknown'}), --cuda-graph-trace={mode} "
        f"({info['graph_trace_mode_source']}); GPUs: {gpus}")
    out.append(
        f"{info['kernels']} kernels, {info['graph_trace_rows']} graph-replay rows, "
        f"{info['api_calls']} CUDA API calls, {info['nvtx_ranges']} NVTX ranges")
    st = result.steps
    if st.source == "whole-trace":
        out.append("steps: no NVTX range qualified as a step, so the whole trace is one step "
                   "(mark steps with cgprof.mark.step() or pass --step NAME[@DOMAIN])")
    elif st.source == "launches":
        skipped = f", first {st.skipped} skipped" if st.skipped else ""
        out.append(f"steps: {len(st.steps)} iterations found in the launch stream "
                   f"('{st.name}'{skipped}; mark steps with cgprof.mark.step() or an NVTX "
                   "range to set them yourself)")
    else:
        skipped = f", first {st.skipped} skipped" if st.skipped else ""
        out.append(f"steps: {len(st.steps)} instances of NVTX range '{st.name}' "
                   f"({st.source}{skipped})")
    out.extend(_step_choice(st))
    out.append(f"analysis window: {info['window_reason']}; every table below covers it (the "
               "per-name kernel/API/NVTX summaries in --json cover the whole trace, "
               "as nsys stats)")
    if mode == "graph":
        out.append("note: graph-granularity trace: replayed kernels are not in the kernel table; "
                   "busy time comes from whole-replay rows, and node figures are unavailable "
                   "(record with --cuda-graph-trace=node to see inside replays)")
    out.append("")
    out.append("Verdict")
    # measured, the untraced step time leads; not measured, the hint to measure it trails
    lead = getattr(result, "untraced", None) is not None
    out.extend(f"  {line}" for line in (untraced_lines(result) if lead else []))
    out.extend(f"  {line}" for line in result.verdict.lines)
    out.extend(f"  {line}" for line in ([] if lead else untraced_lines(result)))
    out.append("")
    out.append("Host launch calls (window steps, outside stream capture)")
    rows = [[r.family, r.calls, r.captured_calls, fmt_us(r.host_ns), fmt_us(r.avg_ns, 2)]
            for r in records(result.launches, ["family", "calls", "captured_calls", "host_ns",
                                                "avg_ns"])]
    out.append(table(["family", "calls", "in capture", "host us", "avg us"], rows))
    out.append("")
    out.extend(_gaps(result))
    out.append("")
    out.extend(_replays(result))
    out.append("")
    out.extend(_coverage(result))
    out.append("")
    out.extend(_steps(result))
    return "\n".join(out) + "\n"


def untraced_lines(result: Any) -> list[str]:
    """What the untraced run says of the window steps (cgprof.untraced), first in the
    verdict: the step time a user gets, then what the profiler added to it."""
    u = getattr(result, "untraced", None)
    if u is None:
        if result.steps.source == "whole-trace":
            return []
        return ["without the profiler: not measured (cgprof record --untraced runs the "
                "program once more, untraced, to time these steps)"]
    if not u.available:
        return [f"without the profiler: not measured: {u.reason}"]
    added = (u.inflation - 1) * 100 if u.inflation else None
    lines = [
        f"without the profiler: {ms_text(u.mean_ns)} per step (mean of {u.steps} steps; p50 "
        f"{ms_text(u.p50_ns)}, p90 {ms_text(u.p90_ns)}; {u.basis}, timed in an untraced run); "
        f"under it the same steps took {ms_text(u.traced_mean_ns)}"
        + (f": the profiler adds {added:+.0f}%" if added is not None else ""),
        f"timing them cost {ms_text(u.hook_ns_per_step)} per step ("
        f"{100 * (u.hook_share or 0):.2f}% of it); the untraced run took "
        f"{fmt_num(u.untraced_run_s, 1)} s, the recorded run {fmt_num(u.traced_run_s, 1)} s",
    ]
    if not u.host_paced:
        lines.append("note: no window step waits for the GPU, so the host may run ahead "
                     "of it: the untraced times are the host's and may understate the steps")
    return lines


def _step_choice(st: Any) -> list[str]:
    """Which rule chose the steps, and the next candidates, each one --step away."""
    out = [f"  chosen by {st.rule}"] if st.rule else []
    cand = getattr(st, "candidates", None)
    if cand is None or cand.empty:
        return out
    others = cand[cand["name"] != (st.name or "")].head(CANDIDATES_SHOWN)
    if others.empty:
        return out
    out.append("  other candidates:")
    for c in records(others, ["name", "kind", "text", "domain", "reasons", "count", "score"]):
        how = ("not selectable with --step" if c.kind == "cycle" else
               f"--step {c.name}" if c.kind == "launches" else
               f"--step '{c.text}@{c.domain}'" if c.domain else f"--step '{c.text}'")
        why = f"; {c.reasons}" if c.reasons else ""
        what = (f"{c.count} steps" if c.kind == "launches" else
                f"{c.count} instances, score {c.score:.2f}")
        out.append(f"    {c.name}: {what}{why} ({how})")
    return out


def _gaps(result: Any) -> list[str]:
    g = result.gaps
    out = ["GPU busy and idle (analysis window)" if result.steps.source != "whole-trace"
           else "GPU busy and idle (first to last GPU operation)"]
    if unavailable(result):
        return [out[0] + f": {NOT_RECORDED} (the trace is incomplete)"]
    if g.devices.empty:
        return out + ["  no GPU activity in the window"]
    rows = [[int(d.device_id), fmt_us(d.window_ns), fmt_us(d.busy_ns), fmt_num(d.idle_pct, 1),
             d.gap_count, fmt_us(d.gap_p50_ns, 2), fmt_us(d.gap_p95_ns, 2), fmt_us(d.gap_max_ns)]
            for d in records(g.devices, ["device_id", "window_ns", "busy_ns", "idle_pct",
                                         "gap_count", "gap_p50_ns", "gap_p95_ns", "gap_max_ns"])]
    out.append(table(["device", "window us", "busy us", "idle %", "gaps", "p50 us", "p95 us",
                      "max us"], rows))
    if len(g.by_kind):
        out.append("  idle time by cause:")
        rows = [[f"{k.kind} (device {k.device_id})", k.count, fmt_us(k.total_ns),
                 fmt_num(k.share_pct, 1)]
                for k in records(g.by_kind, ["kind", "device_id", "count", "total_ns",
                                             "share_pct"])]
        out.append(table(["cause", "gaps", "total us", "% of idle"], rows, indent="    "))
    return out


def _replays(result: Any) -> list[str]:
    r = result.replays
    n = len(r.replays)
    if n == 0:
        return ["Graph replays: none in the window (no cudaGraphLaunch calls)"]
    s = r.summary
    out = [f"Graph replays launched in window steps: {n}" + ("" if r.node_level else
                                    " (graph-granularity trace: node figures unavailable)")]
    if unavailable(result):
        m = s["api_dur_ns"]
        out.append(table(["", "p50", "p99", "min", "max"], [
            ["launch call host us", fmt_us(m["p50"]), fmt_us(m["p99"]), fmt_us(m["min"]),
             fmt_us(m["max"])]]))
        return out + [f"  replay span, busy, compactness and nodes: {NOT_RECORDED} (the trace "
                      "is incomplete)"]
    rows = []
    for key, label, conv in (
        ("api_dur_ns", "launch call host us", fmt_us), ("latency_ns", "launch to first work us",
                                                        fmt_us),
        ("span_ns", "replay span us", fmt_us), ("busy_ns", "replay busy us", fmt_us),
        ("compactness", "compactness (busy/span)", lambda v: fmt_num(v, 3)),
        ("nodes", "nodes", lambda v: fmt_num(v, 0)),
        ("median_gap_ns", "median node gap us", lambda v: fmt_us(v, 2)),
        ("max_gap_ns", "max node gap us", lambda v: fmt_us(v, 2)),
        ("mean_node_ns", "mean node us", lambda v: fmt_us(v, 2)),
    ):
        m = s[key]
        rows.append([label, conv(m["p50"]), conv(m["p99"]), conv(m["min"]), conv(m["max"])])
    out.append(table(["", "p50", "p99", "min", "max"], rows))
    if r.node_level:
        out.append(f"  {node_tracing_note(result.info['gpus'])}")
        out += _compactness_hints(r)
    if r.cost_model:
        out.append(f"  launch cost model: {fmt_us(r.cost_model['fixed_ns'], 2)} us + "
                   f"{fmt_us(r.cost_model['per_node_ns'], 3)} us per node")
    return out


#: Replay compactness below which the text report says what holds it back.
COMPACTNESS_GOAL = 0.9


def _compactness_hints(r: Any) -> list[str]:
    """Why the median replay is under COMPACTNESS_GOAL: short nodes, or a few long waits."""
    s = r.summary
    c, d, g = (s[k]["p50"] for k in ("compactness", "mean_node_ns", "median_gap_ns"))
    if c is None or c >= COMPACTNESS_GOAL or not d or not g:
        return []
    goal = COMPACTNESS_GOAL
    out = [f"  under {goal}: nodes average {fmt_us(d, 2)} us, median gap {fmt_us(g, 2)} us; "
           f"{goal} at that gap needs {fmt_us(g * goal / (1 - goal), 2)} us per node"]
    longest = s["max_gap_ns"]["p50"]
    after = r.replays["longest_gap_after"].dropna()
    if longest and longest >= 10 * g and len(after):
        counts = after.value_counts()
        kind, n = counts.index[0], int(counts.iloc[0])
        out.append(f"  longest gap {fmt_us(longest, 2)} us (p50) follows a {kind} node in {n} of "
                   f"{len(r.replays)} replays"
                   + (" (memset nodes wait microseconds)" if kind == "memset" else ""))
    return out


def _pct(share: Any) -> str:
    return "-" if share is None else f"{100.0 * share:.1f}%"


def _coverage(result: Any) -> list[str]:
    """Graph coverage of the window steps and, when some still run eagerly, what."""
    c = result.coverage
    s = c.summary
    shares = (f"kernels and GPU time inside replays {NOT_RECORDED}" if unavailable(result) else
              f"kernels inside replays {_pct(s['graph_kernel_share'])}, GPU time inside replays "
              f"{_pct(s['graph_gpu_share'])}")
    out = [f"Graph coverage (window steps): {shares}; per step p50: "
           f"{s['kernel_launches_per_step_p50']:.0f} kernel launches, "
           f"{s['graph_launches_per_step_p50']:.0f} graph launches, "
           f"{s['memcpy_calls_per_step_p50']:.0f} memcpy calls, "
           f"{s['sync_calls_per_step_p50']:.0f} sync calls; re-captures {s['recaptures']}, "
           f"fallbacks {s['fallbacks']}"]
    if s["partial_steps"] and len(c.eager_top) and not unavailable(result):
        out.append("  still eager in partially graphed steps (per window step):")
        rows = [[_short(r.name), fmt_num(float(r.kernels), 2), fmt_us(r.gpu_ns, 2), r.launch_api,
                 fmt_us(r.launch_host_ns, 2)]
                for r in records(c.eager_top, ["name", "kernels", "gpu_ns", "launch_api",
                                               "launch_host_ns"])]
        out.append(table(["kernel", "kernels", "GPU us", "launched by", "launch host us"], rows,
                         indent="    "))
    return out


def _short(name: Any, limit: int = 60) -> str:
    name = str(name)
    return name if len(name) <= limit else name[: limit - 3] + "..."


def _steps(result: Any) -> list[str]:
    df = result.steps.steps
    if df.empty:
        return ["Steps: none"]
    out = ["Steps (times in us; window: in the analysis window)"]
    cut = len(df) > 2 * HEAD_TAIL + 1
    at = [*range(HEAD_TAIL), *range(len(df) - HEAD_TAIL, len(df))] if cut else None
    shown = records(df, ["step", "group", "mode", "in_window", "dur_ns", "effective_ns",
                         "kernel_launches", "graph_launches", "kernels", "graph_kernels",
                         "gpu_busy_ns", "gpu_idle_ns", "compactness", "launch_bound",
                         "recapture", "fallback"], at)
    rows = []
    gone = unavailable(result) is not None
    if gone:
        out[0] += "; GPU busy, idle, compact, launch-bound: n/a, not recorded"
    for i, r in enumerate(shown):
        if cut and i == HEAD_TAIL:
            rows.append(["..."] + [""] * 14)
        rows.append([
            r.step, r.group or "-", r.mode, "yes" if r.in_window else "no", fmt_us(r.dur_ns),
            fmt_us(r.effective_ns), r.kernel_launches, r.graph_launches, fmt_num(r.kernels),
            fmt_num(r.graph_kernels), "n/a" if gone else fmt_us(r.gpu_busy_ns),
            "n/a" if gone else fmt_us(r.gpu_idle_ns),
            "n/a" if gone else fmt_num(r.compactness, 3),
            "n/a" if gone else "yes" if r.launch_bound else "no",
            ", ".join(x for x, on in (("recapture", r.recapture), ("fallback", r.fallback)) if on)
            or "-",
        ])
    out.append(table(["step", "group", "mode", "window", "host", "effective", "kernel launches",
                      "graph launches", "kernels", "in graphs", "GPU busy", "GPU idle",
                      "compact", "launch-bound", "note"], rows))
    return out


#: Above this many ranks the step table shows min/max/spread only, and full per-rank reports
#: only with --rank N.
RANKS_SHOWN = 8

_RANK_SOURCE = {"marker": "NVTX rank markers", "device": "the GPU each process used",
                "order": "process order"}


def render_ranks(rr: Any) -> str:
    """A multi-rank run (cgprof.ranks.RanksResult): each shown rank's usual report, then the
    cross-rank "Ranks" section."""
    out: list[str] = []
    shown = rr.shown()
    if len(shown) <= RANKS_SHOWN:
        for r in shown:
            body = render(r.result).split("\n", 1)
            devs = ",".join(str(d) for d in r.device_ids) or "-"
            out.append(f"== {r.path}: rank {r.rank_id} (pid {r.pid}, GPU {devs})")
            out.append(body[1] if len(body) > 1 else "")
    out.extend(_ranks_section(rr))
    return "\n".join(out) + "\n"


def _count(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "s")


def _ranks_section(rr: Any) -> list[str]:
    cr = rr.cross
    where = rr.paths[0] if len(rr.paths) == 1 else f"{len(rr.paths)} files"
    how = "file order" if rr.source == "order" and len(rr.paths) > 1 else _RANK_SOURCE[rr.source]
    out = [f"Ranks: {len(rr.ranks)} in {where} (ids from {how})"]
    if len(rr.shown()) > RANKS_SHOWN:
        out.append("  (full per-rank reports: --rank N, or --json)")
    files = len(rr.paths) > 1
    rows = [[r.rank] + ([r.path.replace("\\", "/").rsplit("/", 1)[-1]] if files else [])
            + [r.pid, r.devices or "-", r.steps, fmt_us(r.step_p50_ns),
               fmt_us(r.step_max_ns), r.slowest_steps, r.kernels, r.api_calls, r.collectives,
               fmt_us(r.collective_ns), fmt_num(r.collective_pct, 1), fmt_us(r.wait_ns),
               fmt_us(r.wait_p50_ns, 2)] for r in cr.per_rank.itertuples()]
    out.append(table(["rank"] + (["file"] if files else [])
                     + ["pid", "GPU", "steps", "step p50", "step max", "slowest", "kernels",
                        "API calls", "NCCL kernels", "NCCL us", "NCCL %", "wait us",
                        "wait p50"], rows))
    out.append("  (steps, step times, NCCL and waits: each rank's analysis window, effective us; "
               "kernels and API calls: whole trace; slowest: aligned window steps where it was "
               "the slowest rank; wait: last rank's start of a collective minus this rank's)")
    for o in rr.others:
        pids = ", ".join(str(p) for p in o.pids)
        where = f" of {o.path}" if files else ""
        top = ", ".join(f"{n} x{c}" for n, c in zip(o.api_summary["name"].head(3),
                                                     o.api_summary["calls"].head(3), strict=True))
        out.append(f"  not ranks (no GPU work){where}: pid {pids}: "
                   f"{_count(o.api_calls, 'API call')}" + (f" ({top})" if top else "")
                   + f", {_count(o.nvtx_ranges, 'NVTX range')}; with the ranks' they add up "
                   "to the file's (nsys stats)")
    st = cr.steps
    if st.empty:
        out.append("Step time by rank: no steps to align")
    else:
        out.append("")
        out.append("Step time by rank (effective us; step i of every rank)")
        many = len(rr.ranks) > RANKS_SHOWN
        sr = cr.step_ranks
        ids = [int(i) for i in cr.per_rank["rank"]]
        if len(st) > 2 * HEAD_TAIL + 1:
            shown, cut = pd.concat([st.head(HEAD_TAIL), st.tail(HEAD_TAIL)]), True
        else:
            shown, cut = st, False
        by = {(int(a), int(b)): (e, w) for a, b, e, w in
              zip(sr["step"], sr["rank"], sr["effective_ns"], sr["wait_ns"], strict=True)}
        lead = ["step"] + (["min", "max"] if many else [f"rank {i}" for i in ids])
        heads = lead + ["spread", "slowest", "max wait"]
        rows = []
        for n, s in enumerate(shown.itertuples()):
            if cut and n == HEAD_TAIL:
                rows.append(["..."] + [""] * (len(heads) - 1))
            vals = ([fmt_us(s.min_ns), fmt_us(s.max_ns)] if many else
                    [fmt_us(by[(s.step, i)][0]) for i in ids])
            wait = fmt_us(s.max_wait_ns) if len(cr.waits) else "-"
            rows.append([s.step] + vals + [fmt_us(s.spread_ns), f"rank {s.slowest_rank}", wait])
        out.append(table(heads, rows))
    if len(cr.waits):
        n = int(cr.waits["seq"].nunique())
        out.append(f"  {n} collectives matched across ranks (the n-th NCCL kernel of every rank)")
    for note in cr.notes:
        out.append(f"  note: {note}")
    return out
