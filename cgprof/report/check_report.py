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


def render_text(result: CheckResult) -> str:
    """One line per rule (status, rule, value, limit, baseline) and a summary line."""
    head = f"cgprof check {result.source}"
    if result.baseline_source:
        head += f" against {result.baseline_source}"
    lines = [head]
    width = max((len(r.rule.name) for r in result.results), default=0)
    for r in result.results:
        value = fmt(r.value, r.rule.figure)
        line = f"{r.status.upper():4}  {r.rule.name:<{width}}  {value:>10}  {_limit_text(r)}"
        if r.status == "skip":
            line += f"  ({r.message})"
        lines.append(line.rstrip())
    c = result.counts()
    verdict = "passed" if result.passed else "FAILED"
    lines.append(f"{verdict}: {len(result.results)} rules, {c['pass']} passed, "
                 f"{c['fail']} failed, {c['skip']} skipped")
    return "\n".join(lines) + "\n"


def to_dict(result: CheckResult) -> dict[str, Any]:
    """The ``cgprof check --json`` document."""
    return {
        "schema_version": CHECK_JSON_VERSION,
        "kind": "cgprof-check",
        "trace": result.source,
        "baseline": result.baseline_source,
        "passed": result.passed,
        "counts": result.counts(),
        "figures": result.figures,
        "baseline_figures": result.baseline_figures,
        "rules": [{"name": r.rule.name, "figure": r.rule.figure, "op": r.rule.op,
                   "tolerance": r.rule.tolerance, "status": r.status, "value": r.value,
                   "limit": r.limit, "baseline": r.baseline, "message": r.message}
                  for r in result.results],
    }


def render_json(result: CheckResult) -> str:
    return json.dumps(to_dict(result), sort_keys=True, indent=1, allow_nan=False) + "\n"


def render_junit(result: CheckResult) -> str:
    """JUnit XML: one testsuite, one testcase per rule (failure / skipped elements)."""
    c = result.counts()
    suites = ET.Element("testsuites", name="cgprof check", tests=str(len(result.results)),
                        failures=str(c["fail"]), errors="0", skipped=str(c["skip"]))
    suite = ET.SubElement(suites, "testsuite", name=f"cgprof check {result.source}",
                          tests=str(len(result.results)), failures=str(c["fail"]),
                          errors="0", skipped=str(c["skip"]))
    for r in result.results:
        case = ET.SubElement(suite, "testcase", classname="cgprof.check", name=r.rule.name,
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
    for r in result.failed:
        lines.append(f"::error file={_gh_prop(result.source)},"
                     f"title={_gh_prop('cgprof check ' + r.rule.name)}::"
                     f"{_gh_data(r.message + ' (limit ' + _limit_text(r) + ')')}")
    c = result.counts()
    level = "notice" if result.passed else "error"
    summary = f"{c['pass']} passed, {c['fail']} failed, {c['skip']} skipped"
    lines.append(f"::{level} title={_gh_prop('cgprof check')}::{_gh_data(summary)}")
    return "\n".join(lines) + "\n"


# --- history ---------------------------------------------------------------------------------


def _label(run: dict[str, Any]) -> str:
    commit = (run.get("commit") or "")[:8]
    return f"#{run['id']} {commit}".rstrip()


def render_history_text(runs: list[dict[str, Any]], path: str) -> str:
    """Per figure: first, previous and last value and the change of the last vs first and vs
    previous run, so a slow erosion shows as well as a sudden one."""
    lines = [f"{path}: {len(runs)} runs"
             + (f", {runs[0]['time_utc']} to {runs[-1]['time_utc']}" if runs else "")]
    if not runs:
        return "\n".join(lines) + "\n"
    lines.append(f"{'figure':<22} {'first':>10} {'previous':>10} {'last':>10} "
                 f"{'vs first':>9} {'vs prev':>9}")

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
    failed = [r for r in runs if not r.get("passed")]
    lines.append(f"runs that failed a rule: {len(failed)}"
                 + (f" (last: {_label(failed[-1])})" if failed else ""))
    return "\n".join(lines) + "\n"


def render_history_html(runs: list[dict[str, Any]], path: str) -> str:
    """One offline HTML file (plotly.js inlined): one small chart per figure over the runs."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    names = [n for n in FIGURES if any(r.get(n) is not None for r in runs)]
    fig = make_subplots(rows=max(len(names), 1), cols=1, shared_xaxes=True,
                        subplot_titles=names or ["no figures"], vertical_spacing=0.03)
    x = [_label(r) for r in runs]
    for i, name in enumerate(names, start=1):
        colors = ["#2a9d8f" if r.get("passed") else "#e63946" for r in runs]
        fig.add_trace(go.Scatter(
            x=x, y=[r.get(name) for r in runs], mode="lines+markers", name=name,
            marker={"color": colors, "size": 8}, line={"color": "#888"},
            customdata=[[r.get("time_utc"), r.get("commit") or ""] for r in runs],
            hovertemplate="%{x}<br>%{customdata[0]}<br>" + name + " %{y}<extra></extra>"),
            row=i, col=1)
    fig.update_layout(title=f"cgprof check history: {path} ({len(runs)} runs; red = a rule "
                            "failed)", showlegend=False, height=220 * max(len(names), 1) + 120,
                      template="plotly_white")
    fig.update_xaxes(type="category")
    return fig.to_html(full_html=True, include_plotlyjs=True, div_id="cgprof-history",
                       config={"displaylogo": False, "responsive": True})
