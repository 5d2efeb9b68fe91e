"""Renderers of a :class:`cgprof.check.CheckResult` (text, JSON, JUnit XML, GitHub Actions
annotations) and of a check history (text trend, offline plotly HTML chart)."""

from __future__ import annotations

import json
from typing import Any
from xml.etree import ElementTree as ET

from cgprof.check import FIGURES, CheckResult, RuleResult, fmt

#: Version of the document ``cgprof check --json`` writes.
CHECK_JSON_VERSION = 1


def _limit_text(r: RuleResult) -> str:
    if r.rule.op == "regress":
        tol = f"{(r.rule.tolerance or 0) * 100:g}%"
        sign = "<=" if FIGURES[r.rule.figure][0] == "lower" else ">="
        worse = "+" if sign == "<=" else "-"
        f = r.rule.figure
        return f"{sign} {fmt(r.limit, f)} (baseline {fmt(r.baseline, f)} {worse}{tol})"
    return f"{'<=' if r.rule.op == 'max' else '>='} {fmt(r.limit, r.rule.figure)}"


def _rank_label(r: RuleResult, width: int = 0) -> str:
    return f"rank {r.rank}".ljust(width) if r.rank is not None else ""


def _ranks_text(result: CheckResult) -> str:
    ids = sorted(result.ranks or {})
    return f"rank {ids[0]}" if len(ids) == 1 else f"ranks {', '.join(map(str, ids))}"


def render_text(result: CheckResult) -> str:
    """One line per rule (status, rule, value, limit, baseline) and a summary line; for a run
    of several ranks one line per rank and rule (``PASS  rank 0  max_...``), the counts over
    all of them."""
    head = f"cgprof check {result.source}"
    if result.multi:
        head += f" ({_ranks_text(result)})"
    if result.baseline_source:
        head += f" against {result.baseline_source}"
    lines = [head] + incomplete_lines(result) + [f"note: {n}" for n in result.notes]
    width = max((len(r.rule.name) for r in result.results), default=0)
    rank_w = max((len(_rank_label(r)) for r in result.results), default=0)
    for r in result.results:
        value = fmt(r.value, r.rule.figure)
        rank = f"{_rank_label(r, rank_w)}  " if r.rank is not None else ""
        line = (f"{r.status.upper():4}  {rank}{r.rule.name:<{width}}  {value:>10}  "
                f"{_limit_text(r)}")
        if r.status == "skip":
            line += f"  ({r.message})"
        lines.append(line.rstrip())
    c = result.counts()
    verdict = "passed" if result.passed else "FAILED"
    if result.multi:
        n_ranks = len(result.ranks or {})
        n_rules = len(result.results) // max(n_ranks, 1)
        what = f"{n_rules} rules x {n_ranks} rank{'' if n_ranks == 1 else 's'}"
    else:
        what = f"{len(result.results)} rules"
    lines.append(f"{verdict}: {what}, {c['pass']} passed, "
                 f"{c['fail']} failed, {c['skip']} skipped")
    return "\n".join(lines) + "\n"


def incomplete_lines(result: CheckResult) -> list[str]:
    """The first lines of a check of an incomplete trace: that it fails (or is judged on its
    host side, with --allow-incomplete), and what each incomplete rank lacks."""
    out = []
    for rank, missing in result.incomplete.items():
        who = f" (rank {rank})" if result.multi else ""
        how = ("judged on what it recorded (--allow-incomplete): rules on its GPU figures "
               "are skipped" if result.allow_incomplete else
               "the check fails (--allow-incomplete judges what it recorded)")
        out.append(f"INCOMPLETE TRACE{who}: GPU records are missing; {how}")
        out += [f"  missing: {m}" for m in missing]
    return out


def _rule_dict(r: RuleResult) -> dict[str, Any]:
    d = {"name": r.rule.name, "figure": r.rule.figure, "op": r.rule.op,
         "tolerance": r.rule.tolerance, "status": r.status, "value": r.value,
         "limit": r.limit, "baseline": r.baseline, "message": r.message}
    if r.rank is not None:
        d["rank"] = r.rank
    return d


def to_dict(result: CheckResult) -> dict[str, Any]:
    """The ``cgprof check --json`` document. A run of several ranks has ``figures`` and
    ``baseline_figures`` null, ``ranks`` ({"0": {"figures", "baseline_figures"}, ...}),
    ``notes``, and a ``rank`` in every rule."""
    doc: dict[str, Any] = {
        "schema_version": CHECK_JSON_VERSION,
        "kind": "cgprof-check",
        "trace": result.source,
        "baseline": result.baseline_source,
        "passed": result.passed,
        "counts": result.counts(),
        "figures": result.figures if not result.multi else None,
        "baseline_figures": result.baseline_figures,
        "rules": [_rule_dict(r) for r in result.results],
        "incomplete": {str(k): v for k, v in result.incomplete.items()},
        "allow_incomplete": result.allow_incomplete,
    }
    if result.ranks is not None:
        base = result.baseline_ranks or {}
        doc["ranks"] = {str(i): {"figures": figs, "baseline_figures": base.get(i)}
                        for i, figs in result.ranks.items()}
        doc["notes"] = list(result.notes)
    return doc


def render_json(result: CheckResult) -> str:
    return json.dumps(to_dict(result), sort_keys=True, indent=1, allow_nan=False) + "\n"


def render_junit(result: CheckResult) -> str:
    """JUnit XML: one testsuite, one testcase per rule (per rank and rule, named
    ``rank N: RULE``, for a run of several ranks), with failure / skipped elements."""
    c = result.counts()
    suites = ET.Element("testsuites", name="cgprof check", tests=str(len(result.results)),
                        failures=str(c["fail"]), errors="0", skipped=str(c["skip"]))
    suite = ET.SubElement(suites, "testsuite", name=f"cgprof check {result.source}",
                          tests=str(len(result.results)), failures=str(c["fail"]),
                          errors="0", skipped=str(c["skip"]))
    for rank, missing in result.incomplete.items():
        case = ET.SubElement(suite, "testcase", classname="cgprof.check",
                             name=f"rank {rank}: completeness" if result.multi
                             else "completeness", file=result.source)
        text = "; ".join(missing)
        if result.allow_incomplete:
            ET.SubElement(case, "skipped", message=f"incomplete trace: {text}")
        else:
            ET.SubElement(case, "failure", message=f"incomplete trace: {text}",
                          type="TraceIncomplete").text = text
    for r in result.results:
        name = r.rule.name if r.rank is None else f"rank {r.rank}: {r.rule.name}"
        case = ET.SubElement(suite, "testcase", classname="cgprof.check", name=name,
                             file=result.source)
        detail = f"value {fmt(r.value, r.rule.figure)}, limit {_limit_text(r)}"
        if r.status == "fail":
            ET.SubElement(case, "failure", message=r.message, type="RuleFailed").text = detail
        elif r.status == "skip":
            ET.SubElement(case, "skipped", message=r.message)
        else:
            ET.SubElement(case, "system-out").text = detail
    ET.indent(suites)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suites, "unicode") + "\n"


def _gh_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _gh_prop(text: str) -> str:
    return _gh_data(text).replace(":", "%3A").replace(",", "%2C")


def render_github(result: CheckResult) -> str:
    """GitHub Actions workflow commands: one ``::error`` per failed rule, then a notice."""
    lines = []
    if result.incomplete and not result.allow_incomplete:
        for rank_id, missing in result.incomplete.items():
            who = f"rank {rank_id}: " if result.multi else ""
            lines.append(f"::error file={_gh_prop(result.source)},"
                         f"title={_gh_prop('cgprof check: incomplete trace')}::"
                         f"{_gh_data(who)}"
                         f"{_gh_data('; '.join(missing))}")
    for r in result.failed:
        rank = "" if r.rank is None else f"rank {r.rank}: "
        lines.append(f"::error file={_gh_prop(result.source)},"
                     f"title={_gh_prop('cgprof check ' + rank + r.rule.name)}::"
                     f"{_gh_data(rank + r.message + ' (limit ' + _limit_text(r) + ')')}")
    c = result.counts()
    level = "notice" if result.passed else "error"
    summary = f"{c['pass']} passed, {c['fail']} failed, {c['skip']} skipped"
    lines.append(f"::{level} title={_gh_prop('cgprof check')}::{_gh_data(summary)}")
    return "\n".join(lines) + "\n"


# --- history ---------------------------------------------------------------------------------


def _label(run: dict[str, Any]) -> str:
    commit = (run.get("commit") or "")[:8]
    return f"#{run['id']} {commit}".rstrip()


def _rank_groups(runs: list[dict[str, Any]]) -> list[tuple[Any, list[dict[str, Any]]]]:
    """Runs grouped by their ``rank`` (None for single-rank runs and databases from before
    the column), single-rank runs first, then by rank id; each group oldest first."""
    groups: dict[Any, list[dict[str, Any]]] = {}
    for r in runs:
        groups.setdefault(r.get("rank"), []).append(r)
    return sorted(groups.items(), key=lambda kv: -1 if kv[0] is None else int(kv[0]))


def _trend_lines(runs: list[dict[str, Any]]) -> list[str]:
    lines = [f"{'figure':<22} {'first':>10} {'previous':>10} {'last':>10} "
             f"{'vs first':>9} {'vs prev':>9}"]

    def change(a: Any, b: Any) -> str:
        if a is None or b is None:
            return "n/a"
        if a == 0:
            return "+0.0%" if b == 0 else "n/a"
        return f"{(b - a) / abs(a) * 100:+.1f}%"

    for name in FIGURES:
        vals = [r.get(name) for r in runs]
        if all(v is None for v in vals):
            continue
        first, last = vals[0], vals[-1]
        prev = vals[-2] if len(vals) > 1 else None
        lines.append(f"{name:<22} {fmt(first, name):>10} {fmt(prev, name):>10} "
                     f"{fmt(last, name):>10} "
                     f"{change(first, last):>9} {change(prev, last):>9}")
    return lines


def render_history_text(runs: list[dict[str, Any]], path: str) -> str:
    """Per figure: first, previous and last value and the change of the last vs first and vs
    previous run, so a slow erosion shows as well as a sudden one. Runs of a multi-rank
    trace (one row per rank, with ``rank``) get one such table per rank."""
    checks = _checks(runs)
    rows = f" ({len(runs)} rows, one per rank of a multi-rank run)" if len(checks) != len(
        runs) else ""
    lines = [f"{path}: {len(checks)} runs{rows}"
             + (f", {runs[0]['time_utc']} to {runs[-1]['time_utc']}" if runs else "")]
    if not runs:
        return "\n".join(lines) + "\n"
    groups = _rank_groups(runs)
    if len(groups) == 1 and groups[0][0] is None:
        lines += _trend_lines(runs)
    else:
        for rank, group in groups:
            label = "single-rank runs" if rank is None else f"rank {rank}"
            lines.append(f"{label}: {len(group)} runs")
            lines += _trend_lines(group)
    failed = [rs for rs in checks.values() if not all(r.get("passed") for r in rs)]
    lines.append(f"runs that failed a rule: {len(failed)}"
                 + (f" (last: {_label(failed[-1][-1])})" if failed else ""))
    return "\n".join(lines) + "\n"


def _checks(runs: list[dict[str, Any]]) -> dict[tuple[Any, ...], list[dict[str, Any]]]:
    """Rows grouped into the checks that wrote them: one row per single-rank check, one row
    per rank of a multi-rank check (same time, commit, trace and baseline), in order."""
    out: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in runs:
        key: tuple[Any, ...] = (r.get("time_utc"), r.get("commit"), r.get("source"),
                                r.get("baseline"))
        if r.get("rank") is None:
            key = ("row", r["id"])
        out.setdefault(key, []).append(r)
    return out


def render_history_html(runs: list[dict[str, Any]], path: str) -> str:
    """One offline HTML file (plotly.js inlined): one small chart per figure over the runs."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    names = [n for n in FIGURES if any(r.get(n) is not None for r in runs)]
    fig = make_subplots(rows=max(len(names), 1), cols=1, shared_xaxes=True,
                        subplot_titles=names or ["no figures"], vertical_spacing=0.03)
    groups = _rank_groups(runs)
    ranked = not (len(groups) == 1 and groups[0][0] is None)
    line_colors = ["#888", "#264653", "#e9c46a", "#8d99ae", "#6d597a", "#b5838d"]
    for i, name in enumerate(names, start=1):
        for g, (rank, group) in enumerate(groups):
            label = name if not ranked else (
                "single-rank" if rank is None else f"rank {rank}")
            colors = ["#2a9d8f" if r.get("passed") else "#e63946" for r in group]
            fig.add_trace(go.Scatter(
                x=[_label(r) for r in group], y=[r.get(name) for r in group],
                mode="lines+markers", name=label, legendgroup=label, showlegend=i == 1,
                marker={"color": colors, "size": 8},
                line={"color": line_colors[g % len(line_colors)]},
                customdata=[[r.get("time_utc"), r.get("commit") or ""] for r in group],
                hovertemplate="%{x}<br>%{customdata[0]}<br>" + label + " " + name
                              + " %{y}<extra></extra>"), row=i, col=1)
    fig.update_layout(title=f"cgprof check history: {path} ({len(runs)} runs; red = a rule "
                            "failed)", showlegend=ranked,
                      height=220 * max(len(names), 1) + 120, template="plotly_white")
    # the runs in id order on every axis, whichever rank's trace names a run first
    fig.update_xaxes(type="category", categoryorder="array",
                     categoryarray=[_label(r) for r in runs])
    return fig.to_html(full_html=True, include_plotlyjs=True, div_id="cgprof-history",
                       config={"displaylogo": False, "responsive": True})
