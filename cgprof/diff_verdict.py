"""The verdict of a diff in words (``DiffResult.lines``): the headline, without the profiler
first when both runs were timed untraced, then launch calls, idle and compactness, the kernel
work check and the notes on what the two windows compare."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cgprof.diff_options import STEADY_MODES
from cgprof.untraced import ms_text

if TYPE_CHECKING:  # pragma: no cover
    from cgprof.diff import DiffResult

def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def untraced_lines(d: DiffResult, traced: str) -> list[str]:
    """The headline without the profiler and then ``traced`` (the traced headline), when both
    runs were timed untraced; a note when one was; ``[traced]`` when neither was."""
    la, lb = d.labels
    ha, hb = d.headline["baseline"], d.headline["candidate"]
    ua, ub = ha.get("untraced_step_mean_ns"), hb.get("untraced_step_mean_ns")
    if ua is None and ub is None:
        return [traced]
    if ua is None or ub is None:
        timed, other = (la, lb) if ua is not None else (lb, la)
        return [traced, f"without the profiler: only {timed} was timed untraced, so the "
                        f"speedup above is the profiler's (record {other} with cgprof record "
                        "--untraced)"]
    ta, tb = ha["traced_step_mean_ns"], hb["traced_step_mean_ns"]
    s = ratio(ua, ub)
    if s is None or abs(s - 1) < 0.005:
        how = "takes the same time per step as"
    else:
        how = f"is {s:.2f}x faster per step than" if s >= 1 else \
            f"is {1 / s:.2f}x slower per step than"
    return [f"{lb} {how} {la} without the profiler: {ms_text(ua)} -> {ms_text(ub)} (mean, "
            "untraced runs of the analysis windows)",
            f"under the profiler: {traced} (the same steps' means: {ms_text(ta)} -> "
            f"{ms_text(tb)}, {_times(ratio(ta, tb))})"]


def _times(s: float | None) -> str:
    if s is None:
        return "n/a"
    return f"{s:.2f}x faster" if s >= 1 else f"{1 / s:.2f}x slower"


def _us(ns: float | None) -> str:
    return "n/a" if ns is None else f"{ns / 1000:.1f} us"


def _num(v: float | None, fmt: str = "{:.0f}") -> str:
    return "n/a" if v is None else fmt.format(v)


def work_summary(d: DiffResult) -> str:
    """'16 kernels per step, same in both' / '2 missing, 1 slower' / 'unknown (...)'."""
    w = d.work
    if w.empty:
        return "no kernels in either window"
    counts = w["status"].value_counts()
    problems = [f"{int(counts[s])} {s}" for s in ("missing", "extra", "fewer", "more", "slower")
                if s in counts]
    unknown = int(counts.get("unknown", 0))
    parts = problems[:]
    if unknown:
        hidden = [v.label for v in d.views if v.hidden_steps]
        parts.append(f"{unknown} unknown (replayed kernels not in the "
                     f"{' and '.join(hidden)} trace: graph-granularity)")
    if not parts:
        return f"same kernels per step in both ({len(w)} kernel names)"
    return ", ".join(parts) + f" of {len(w)} kernel names"


def verdict_lines(d: DiffResult) -> list[str]:
    """The verdict in words; the first line is the headline."""
    la, lb = d.labels
    ha, hb = d.headline["baseline"], d.headline["candidate"]
    s = d.headline["speedup"]
    if s is None:
        traced = f"{lb} vs {la}: step time unknown"
    elif abs(s - 1) < 0.005:
        traced = (f"{lb} takes the same time per step as {la}: "
                  f"{_us(ha['step_p50_ns'])} -> {_us(hb['step_p50_ns'])} (p50)")
    elif s >= 1:
        traced = (f"{lb} is {s:.2f}x faster per step than {la}: "
                  f"{_us(ha['step_p50_ns'])} -> {_us(hb['step_p50_ns'])} (p50)")
    else:
        traced = (f"{lb} is {1 / s:.2f}x slower per step than {la}: "
                  f"{_us(ha['step_p50_ns'])} -> {_us(hb['step_p50_ns'])} (p50)")
    lines = untraced_lines(d, traced)
    lines.append(f"launch calls per step {_num(ha['launch_calls_per_step'])} -> "
                 f"{_num(hb['launch_calls_per_step'])}; GPU idle "
                 f"{_num(ha['gpu_idle_pct'], '{:.1f}%')} -> {_num(hb['gpu_idle_pct'], '{:.1f}%')}"
                 f" of step time; replay compactness p50 {compactness_text(ha)} -> "
                 f"{compactness_text(hb)}")
    lines.append(f"work check: {work_summary(d)}")
    ia, ib = (v.result.info for v in d.views)
    if ia["step_source"] == ib["step_source"] == "launches":
        lines.append(f"note: neither run marks its steps; both are cut into iterations found in "
                     f"the launch stream ({la}: {ia['step_range']}, {lb}: {ib['step_range']}) "
                     f"and compared iteration by iteration")
    elif ia["step_range"] != ib["step_range"]:
        lines.append(f"note: the runs' steps are different NVTX ranges ({la}: "
                     f"{ia['step_range'] or 'whole trace'} ({ia['step_source']}), {lb}: "
                     f"{ib['step_range'] or 'whole trace'} ({ib['step_source']})); per-step "
                     f"figures compare unlike things: pass --step NAME[@DOMAIN]")
    for v in d.views:
        if set(v.steps["mode"]) >= set(STEADY_MODES):
            lines.append(f"note: the {v.label} window mixes eager and graphed steps; compare like "
                         f"with like with --mode eager,graph or --steps A:B,C:D")
    return lines


def compactness_text(h: dict[str, Any], short: bool = False) -> str:
    """A run's replay compactness p50 as words: 0.932, 'no replays' or 'unknown (...)'."""
    if h.get("incomplete"):
        return "not recorded" if short else "unavailable: not recorded (incomplete trace)"
    if h["replay_compactness_p50"] is not None:
        return f"{h['replay_compactness_p50']:.3f}"
    if h["replays"] == 0:
        return "no replays"
    return "unknown" if short else "unknown (graph-granularity trace)"
