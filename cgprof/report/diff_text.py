"""Terminal rendering of a :class:`~cgprof.diff.DiffResult`: the comparison table of
``cgprof diff``, readable in ten seconds."""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from cgprof.diff import DiffResult
from cgprof.diff_verdict import compactness_text
from cgprof.report.text import fmt_num, fmt_us, table

HEAD_TAIL = 3  # aligned steps shown at each end
WORK_ROWS = 12  # work-check rows shown (problems first)
NAME_CHARS = 70


def _isna(v: Any) -> bool:
    return v is None or v is pd.NA or (isinstance(v, float) and v != v)


def _ratio(a: Any, b: Any) -> str:
    """How the candidate value b compares with the baseline value a (smaller is better)."""
    if _isna(a) or _isna(b) or not a or not b:
        return ""
    r = float(a) / float(b)
    return f"{r:.2f}x faster" if r >= 1 else f"{1 / r:.2f}x slower"


def _short(name: str) -> str:
    return name if len(name) <= NAME_CHARS else name[: NAME_CHARS - 3] + "..."


def render(d: DiffResult) -> str:
    """The comparison as plain text (what ``cgprof diff`` prints)."""
    la, lb = d.labels
    a, b = d.baseline, d.candidate
    ha, hb = a.headline, b.headline
    out = [f"== {la}: {a.path}, {a.describe()}",
           f"== {lb}: {b.path}, {b.describe()}", *d.incomplete_lines(), ""]
    out.append(d.lines[0])
    out.append("")
    rows = [
        ["step time p50 us", fmt_us(ha["step_p50_ns"]), fmt_us(hb["step_p50_ns"]),
         _ratio(ha["step_p50_ns"], hb["step_p50_ns"])],
        ["launch calls per step", fmt_num(ha["launch_calls_per_step"], 0),
         fmt_num(hb["launch_calls_per_step"], 0), ""],
        ["API calls per step", fmt_num(ha["api_calls_per_step"], 0),
         fmt_num(hb["api_calls_per_step"], 0), ""],
        ["GPU idle % of step time", fmt_num(ha["gpu_idle_pct"], 1),
         fmt_num(hb["gpu_idle_pct"], 1), ""],
        ["replay compactness p50", compactness_text(ha, True), compactness_text(hb, True), ""],
        ["kernels per step", fmt_num(ha["kernels_per_step"], 0),
         fmt_num(hb["kernels_per_step"], 0), ""],
    ]
    out.append(table(["", la, lb, "change"], rows))
    out.extend(f"  {line}" for line in d.lines[1:])
    out.append("")
    out.append("Launch calls per step by family")
    rows = [[f.family, fmt_num(f.base_per_step), fmt_num(f.cand_per_step), fmt_us(f.base_host_ns),
             fmt_us(f.cand_host_ns)] for f in d.families.itertuples()]
    out.append(table(["family", f"{la}/step", f"{lb}/step", f"{la} host us", f"{lb} host us"],
                     rows))
    out.append("")
    out.extend(_work(d))
    out.append("")
    out.extend(_steps(d))
    return "\n".join(out) + "\n"


def _work(d: DiffResult) -> list[str]:
    la, lb = d.labels
    w = d.work
    if w.empty:
        return ["Work check: no kernels in either window"]
    out = ["Work check (kernel instances per step and average duration, by name)"]
    shown = w.head(WORK_ROWS)
    names = [_short(str(n)) for n in shown["name"]]
    width = max(len(n) for n in names + ["kernel"])
    # table() right-aligns every column after the first: pad names to read left-aligned.
    rows = [[r.status, fmt_num(r.base_per_step), fmt_num(r.cand_per_step),
             fmt_us(r.base_avg_ns, 2), fmt_us(r.cand_avg_ns, 2), n.ljust(width)]
            for r, n in zip(shown.itertuples(), names, strict=True)]
    out.append(table(["status", f"{la}/step", f"{lb}/step", f"{la} avg us", f"{lb} avg us",
                      "kernel".ljust(width)], rows))
    if len(w) > len(shown):
        out.append(f"  ... {len(w) - len(shown)} more (all in --json and the HTML report)")
    return out


def _steps(d: DiffResult) -> list[str]:
    la, lb = d.labels
    df = d.steps
    out = ["Steps aligned by position (times in us)"]
    if len(df) > 2 * HEAD_TAIL + 1:
        shown, cut = pd.concat([df.head(HEAD_TAIL), df.tail(HEAD_TAIL)]), True
    else:
        shown, cut = df, False
    rows = []
    for n, r in enumerate(shown.itertuples()):
        if cut and n == HEAD_TAIL:
            rows.append(["..."] + [""] * 8)
        rows.append([
            r.i, fmt_num(r.base_step), fmt_num(r.cand_step), fmt_us(r.base_effective_ns),
            fmt_us(r.cand_effective_ns),
            "-" if _isna(r.delta_ns) else f"{r.delta_ns / 1000:+.1f}",
            "-" if _isna(r.speedup) else f"{r.speedup:.2f}x",
            fmt_num(r.base_launch_calls), fmt_num(r.cand_launch_calls),
        ])
    out.append(table(["i", f"{la} step", f"{lb} step", f"{la} us", f"{lb} us", "delta",
                      "speedup", f"{la} launches", f"{lb} launches"], rows))
    return out


def render_json(d: DiffResult) -> str:
    """``cgprof diff --json``: the DiffResult as a sorted-keys document with schema_version."""
    return json.dumps(d.to_dict(), sort_keys=True, indent=1, allow_nan=False) + "\n"


def render_ranks(d: Any) -> str:
    """A :class:`cgprof.ranks.RanksDiff` as plain text."""
    la, lb = d.labels
    out = [f"== {la}: {', '.join(d.base.paths)} ({len(d.base.ranks)} ranks)",
           f"== {lb}: {', '.join(d.cand.paths)} ({len(d.cand.ranks)} ranks)", "", d.lines[0], ""]
    oa, ob = d.overall["base"], d.overall["cand"]
    rows = [["job step time p50 us", fmt_us(oa["step_p50_ns"]), fmt_us(ob["step_p50_ns"]),
             _ratio(oa["step_p50_ns"], ob["step_p50_ns"])],
            ["rank spread p50 us", fmt_us(oa["spread_p50_ns"]), fmt_us(ob["spread_p50_ns"]), ""],
            ["collective wait us", fmt_us(oa["wait_ns"]), fmt_us(ob["wait_ns"]), ""]]
    out.append(table(["", la, lb, "change"], rows))
    out.extend(f"  {line}" for line in d.lines[1:])
    out.append("")
    out.append("By rank (steady-state steps; times in us)")
    rows = [[str(int(r.rank)), fmt_us(r.base_step_p50_ns), fmt_us(r.cand_step_p50_ns),
             _ratio(r.base_step_p50_ns, r.cand_step_p50_ns),
             fmt_num(r.base_launch_calls_per_step, 0), fmt_num(r.cand_launch_calls_per_step, 0),
             fmt_us(r.base_collective_ns), fmt_us(r.cand_collective_ns), fmt_us(r.base_wait_ns),
             fmt_us(r.cand_wait_ns)] for r in d.per_rank.itertuples()]
    out.append(table(["rank", f"{la} step p50", f"{lb} step p50", "change",
                      f"{la} launches", f"{lb} launches", f"{la} NCCL", f"{lb} NCCL",
                      f"{la} wait", f"{lb} wait"], rows))
    return "\n".join(out) + "\n"


def render_ranks_json(d: Any) -> str:
    return json.dumps(d.to_dict(), sort_keys=True, indent=1, allow_nan=False) + "\n"
