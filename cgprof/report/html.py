"""One self-contained, offline, deterministic HTML page per report.

``render_single(result)`` is ``cgprof analyze TRACE --html``; ``render_diff(diff_result)`` is
``cgprof diff A B -o diff.html``. The page holds plotly.js once (inlined, no CDN), the figures
of :mod:`cgprof.report.figures` as one sorted-keys JSON payload with fixed div ids, tables
rendered here with every trace string escaped, and a small script (templates/report.js) that
keeps the run timelines aligned step by step while zooming and writes a self-check into
``<pre id="cgprof-selfcheck">``. Same inputs, same bytes: no timestamps, no random ids.

The data behind a page is reachable without HTML: :func:`single_page_data`,
:func:`diff_page_data`.
"""

from __future__ import annotations

import json
import re
from html import escape
from importlib import resources
from pathlib import Path
from typing import Any

import pandas as pd
from plotly.utils import PlotlyJSONEncoder

from cgprof.diff import SLOWER_RATIO, DiffResult, RunView, view
from cgprof.diff_verdict import compactness_text, work_summary
from cgprof.metrics import AnalysisResult
from cgprof.report import figures as F
from cgprof.report.text import untraced_lines
from cgprof.version import __version__

__all__ = ["render_single", "render_diff", "single_page_data", "diff_page_data",
           "script_json", "MAX_TABLE_ROWS"]

#: Step-table rows shown at most (first and last half); charts still cover every step.
MAX_TABLE_ROWS = 200
#: Work-check rows with status "same" shown at most (problems are always all listed).
MAX_SAME_ROWS = 60

PLOTLY_CONFIG = {
    "displaylogo": False,
    "responsive": True,
    "scrollZoom": False,
    "modeBarButtonsToRemove": ["lasso2d", "select2d", "autoScale2d"],
    "toImageButtonOptions": {"format": "png", "scale": 2},
}


def esc(value: Any) -> str:
    return escape("" if value is None else str(value), quote=True)


def script_json(obj: Any) -> str:
    """JSON safe inside a ``<script>`` element: sorted keys, and ``<``, ``>``, ``&`` written as
    ``\\u003c`` etc. so that ``</script>`` in a kernel name cannot close the element."""
    text = json.dumps(obj, cls=PlotlyJSONEncoder, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=True, allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _template(name: str) -> str:
    return resources.files("cgprof.report").joinpath(f"templates/{name}").read_text("utf-8")


def _plotlyjs() -> str:
    from plotly.offline import get_plotlyjs

    return get_plotlyjs()


def _page(title: str, body: str, data: dict[str, Any]) -> str:
    parts = {
        "VERSION": esc(__version__),
        "TITLE": esc(title),
        "CSS": _template("report.css"),
        "BODY": body,
        "DATA": script_json(data),
        "PLOTLYJS": _plotlyjs(),
        "APPJS": _template("report.js"),
    }
    # One pass, so nothing inserted (plotly.js, trace text) is scanned for placeholders.
    return re.sub(r"@@([A-Z]+)@@", lambda m: parts[m.group(1)], _template("report.html"))


def _figure_payload(figs: dict[str, Any], views: tuple[RunView, ...],
                    w: F.DrawWindow) -> dict[str, Any]:
    out: dict[str, Any] = {}
    template = None
    for fid, fig in figs.items():
        spec = fig.to_plotly_json()
        layout = dict(spec["layout"])
        template = layout.pop("template", template)
        out[fid] = {"data": spec["data"], "layout": layout}
    marks = [F.step_marks(v, w) for v in views]
    full = max(max(m["x1"] for m in mk) - mk[0]["x0"] for mk in marks)
    timelines = [{
        "id": F.TIMELINE_IDS[n], "label": v.label, "steps": marks[n],
        "initial_range": list(out[F.TIMELINE_IDS[n]]["layout"]["xaxis"]["range"]),
        # "Show all drawn steps": every run from its first drawn step, at one scale.
        "full_range": [round(marks[n][0]["x0"] - 0.01 * full, 3),
                       round(marks[n][0]["x0"] + 1.01 * full, 3)],
    } for n, v in enumerate(views)]
    return {
        "config": PLOTLY_CONFIG,
        "figures": out,
        "order": list(figs),
        "template": template,
        "timelines": timelines,
        "draw_window": {"first": w.first, "stop": w.stop, "total": w.total,
                        "lengths": w.lengths,
                        "max_events": w.max_events, "drawn": w.drawn,
                        "available": w.available, "truncated": w.truncated,
                        "note": w.note(views)},
    }


def _figures(views: tuple[RunView, ...], max_events: int,
             parts: tuple[RunView, ...] | None = None):
    return F._figure_set(views, max_events, parts)


def single_page_data(result: AnalysisResult, max_events: int = F.DEFAULT_MAX_EVENTS,
                     steps: slice | None = None) -> dict[str, Any]:
    """The JSON payload of the single-run page (figures, timeline step marks, draw window)."""
    v = _single_view(result, steps)
    figs, w = _figures((v,), max_events, _mode_parts(result, v, steps))
    return _figure_payload(figs, (v,), w)


def _mode_parts(result: AnalysisResult, v: RunView,
                steps: slice | None) -> tuple[RunView, ...] | None:
    """The eager and the graphed steps apart, when a whole trace holds both."""
    if steps is not None or set(v.steps["mode"]) != {"eager", "graph"}:
        return None
    return tuple(view(result, label=f"{m} steps", mode=m) for m in ("eager", "graph"))


def single_page_runs(path: Any, steps: slice | None) -> list[tuple[str, slice | None,
                                                                   str | None]]:
    """The views (label, steps, mode) the single-run page of the trace at ``path`` makes
    (:func:`_single_view`, :func:`_mode_parts`): what a chunked analysis gathers totals
    and the timeline for (cgprof.metrics.chunked.analyze_path's ``windows``)."""
    return [(_stem(path), steps, None), *((f"{m} steps", None, m) for m in ("eager", "graph"))]


def _stem(path: Any) -> str:
    return Path(str(path)).stem or "run"


def diff_page_data(d: DiffResult, max_events: int = F.DEFAULT_MAX_EVENTS) -> dict[str, Any]:
    """The JSON payload of the diff page."""
    figs, w = _figures(d.views, max_events)
    return _figure_payload(figs, d.views, w)


def _single_view(result: AnalysisResult, steps: slice | None) -> RunView:
    """The page's view; of a chunked analysis (no trace), with the timeline it gathered."""
    v = view(result, label=_stem(result.info["path"]), steps=steps)
    return v if result.trace is not None else F.chunked_timeline(result, v)


# ---------------------------------------------------------------------------------------
# formatting


def _isna(v: Any) -> bool:
    return v is None or v is pd.NA or (isinstance(v, float) and v != v)


def _us(ns: Any, digits: int = 1) -> str:
    return "-" if _isna(ns) else f"{float(ns) / 1000:,.{digits}f}"


def _n(v: Any, digits: int = 0) -> str:
    if _isna(v):
        return "-"
    return f"{float(v):,.{digits}f}"


def _table(headers: list[tuple[str, str]], rows: list[list[tuple[str, str]]],
           cls: str = "t") -> str:
    """headers/rows of (html, css class); cell html must already be escaped."""
    head = "".join(f'<th class="{c}">{h}</th>' for h, c in headers)
    body = []
    for r in rows:
        if len(r) == 1 and r[0][1] == "gap":
            body.append(f'<tr class="gap"><td colspan="{len(headers)}">{r[0][0]}</td></tr>')
        else:
            body.append("<tr>" + "".join(f'<td class="{c}">{h}</td>' for h, c in r) + "</tr>")
    return (f'<div class="scroll"><table class="{cls}"><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table></div>')


def _cut(df: pd.DataFrame, limit: int = MAX_TABLE_ROWS) -> tuple[pd.DataFrame, int]:
    """First and last limit/2 rows, and how many were left out between them."""
    if len(df) <= limit:
        return df, 0
    half = limit // 2
    return pd.concat([df.head(half), df.tail(half)]), len(df) - limit


def _card(key: str, value: str, detail: str = "", cls: str = "") -> str:
    return (f'<div class="card {cls}"><div class="k">{key}</div><div class="v">{value}</div>'
            f'<div class="d">{detail}</div></div>')


def _arrow(a: str, b: str) -> str:
    return f'<span class="b">{a}</span><span class="arrow">\u2192</span><span class="c">{b}</span>'


def _footer() -> str:
    return (f"<footer>cgprof {esc(__version__)} \u00b7 one self-contained file: plotly.js is "
            f"inlined, nothing is fetched from the network. Times are microseconds (us) unless "
            f"marked; step time is the longer of a step's host range and its GPU span.</footer>")


def _controls(views: tuple[RunView, ...], w: F.DrawWindow) -> str:
    opts = ['<option value="">all drawn steps</option>']
    for k in range(w.first, w.stop):
        names = " / ".join(f"{esc(v.label)} {int(v.steps['step'].iloc[k])}" for v in views)
        opts.append(f'<option value="{k - w.first}">position {k}: {names}</option>')
    follow = ("; the other run follows, aligned on the same step and offset"
              if len(views) > 1 else "")
    return (f'<div class="controls"><label>Jump to step <select id="cgprof-step">'
            f'{"".join(opts)}</select></label><button id="cgprof-reset" type="button">'
            f'Show all drawn steps</button><span class="hint">Drag to zoom, shift-drag to '
            f'pan, double-click to reset{follow}. Hover a bar for name, start, duration, '
            f'stream and correlation id. Zoomed out, a bar narrower than a pixel still takes '
            f'one: zoom in to see the gaps between kernels.</span></div>')


def _notes(views: tuple[RunView, ...], w: F.DrawWindow) -> str:
    out = [f'<p class="note{" plain" if w.complete else ""}" id="cgprof-note">'
           f'{esc(w.note(views))}{_next_window(views, w)}</p>']
    for v in views:
        k = F.leading_outliers(v)
        if k:
            eff = v.steps["effective_ns"]
            slow = ", ".join(f"{x / 1e6:,.1f} ms" for x in eff.iloc[:k])
            out.append(
                f'<p class="note">{esc(v.label)}: the first {k} step{"s" if k > 1 else ""} '
                f'took {slow}, over {F.OUTLIER_FACTOR:g}x the median step '
                f'({_us(eff.median())} us): warm-up? The timelines open after '
                f'{"them" if k > 1 else "it"}; leave {"them" if k > 1 else "it"} out of every '
                f'number with <code>--skip {k}</code>.</p>')
    for v in views:
        if v.result.info["graph_trace_mode"] == "graph" and len(v.replays):
            out.append(f'<p class="note plain">{esc(v.label)}: graph-granularity trace '
                       f'(--cuda-graph-trace=graph): each replay is one bar; its kernels and '
                       f'the gaps between them are not in the trace.</p>')
    return "".join(out)


def _next_window(views: tuple[RunView, ...], w: F.DrawWindow) -> str:
    if w.complete or w.stop >= w.total:
        return ""
    n = w.stop - w.first
    spans = [f"{v.first + w.stop}:{v.first + w.stop + n}" for v in views]
    arg = spans[0] if len(set(spans)) == 1 else ",".join(spans)
    return f" Next steps: <code>--steps {esc(arg)}</code>."


def _runs_table(views: tuple[RunView, ...]) -> str:
    rows = []
    for n, v in enumerate(views):
        info = v.result.info
        cls = "b" if n == 0 and len(views) > 1 else ("c" if len(views) > 1 else "")
        skipped = f", {info['steps_skipped']} skipped" if info["steps_skipped"] else ""
        rows.append([
            (f'<b class="{cls}">{esc(v.label)}</b>', "l"), (f"<code>{esc(v.path)}</code>", "l"),
            (esc(v.describe()), "l"),
            (esc(f"{info['step_range'] or 'whole trace'} ({info['step_source']}{skipped})"),
             "l"),
            (esc(info["graph_trace_mode"] or "unknown"), "l"),
            (esc(", ".join(g["name"] for g in info["gpus"]) or "unknown"), "l"),
            (esc(info["nsys_version"] or "unknown"), "l"),
        ])
    return _table([("run", "l"), ("trace", "l"), ("window", "l"), ("step range", "l"),
                   ("graph trace", "l"), ("GPU", "l"), ("nsys", "l")], rows)


def _step_table_single(v: RunView) -> str:
    df, cut = _cut(v.steps)
    rows = []
    for n, r in enumerate(df.itertuples()):
        if cut and n == MAX_TABLE_ROWS // 2:
            rows.append([(f"\u2026 {cut} steps not listed (all are in the chart) \u2026", "gap")])
        rows.append([(str(r.step), ""), (esc(r.mode), "l"), (_us(r.dur_ns), ""),
                     (_us(r.effective_ns), ""), (str(r.launch_calls), ""),
                     (str(r.api_calls), ""), (_n(r.kernels), ""), (_us(r.gpu_busy_ns), ""),
                     (_n(r.idle_pct, 1), ""), (_n(r.compactness, 3), "")])
    return _table([("step", ""), ("mode", "l"), ("host us", ""), ("step us", ""),
                   ("launch calls", ""), ("API calls", ""), ("kernels", ""),
                   ("GPU busy us", ""), ("GPU idle %", ""), ("compactness", "")], rows)


def _step_table_diff(d: DiffResult) -> str:
    la, lb = (esc(x) for x in d.labels)
    df, cut = _cut(d.steps)
    rows = []
    for n, r in enumerate(df.itertuples()):
        if cut and n == MAX_TABLE_ROWS // 2:
            rows.append([(f"\u2026 {cut} steps not listed (all are in the chart) \u2026", "gap")])
        delta = "-" if _isna(r.delta_ns) else f"{r.delta_ns / 1000:+,.1f}"
        dcls = "" if _isna(r.delta_ns) else ("pos" if r.delta_ns > 0 else "neg")
        rows.append([
            (str(r.i), ""), (_n(r.base_step), ""), (_n(r.cand_step), ""),
            (esc(r.base_mode or "-"), "l"), (esc(r.cand_mode or "-"), "l"),
            (_us(r.base_effective_ns), ""), (_us(r.cand_effective_ns), ""), (delta, dcls),
            ("-" if _isna(r.speedup) else f"{r.speedup:.2f}x", ""),
            (_n(r.base_launch_calls), ""), (_n(r.cand_launch_calls), ""),
            (_n(r.base_kernels), ""), (_n(r.cand_kernels), ""),
            (_n(r.base_idle_pct, 1), ""), (_n(r.cand_idle_pct, 1), ""),
        ])
    return _table([
        ("position", ""), (f"{la} step", ""), (f"{lb} step", ""), (f"{la} mode", "l"),
        (f"{lb} mode", "l"), (f"{la} us", ""), (f"{lb} us", ""), ("delta us", ""),
        ("speedup", ""), (f"{la} launch calls", ""), (f"{lb} launch calls", ""),
        (f"{la} kernels", ""), (f"{lb} kernels", ""), (f"{la} GPU idle %", ""),
        (f"{lb} GPU idle %", "")], rows)


def _families_table(views: tuple[RunView, ...]) -> str:
    fams: list[str] = []
    for v in views:
        fams += [f for f in v.families["family"] if f not in fams]
    heads = [("family", "l")]
    for v in views:
        heads += [(f"{esc(v.label)} calls", ""), (f"{esc(v.label)} per step", ""),
                  (f"{esc(v.label)} host us", "")]
    rows = []
    for f in fams:
        row = [(esc(f), "l")]
        for v in views:
            t = v.families.set_index("family")
            if f in t.index:
                row += [(str(int(t.at[f, "calls"])), ""), (_n(t.at[f, "calls_per_step"], 2), ""),
                        (_us(t.at[f, "host_ns"]), "")]
            else:
                row += [("0", ""), ("0", ""), ("-", "")]
        rows.append(row)
    return _table(heads, rows)


def _name_cell(name: str) -> tuple[str, str]:
    return f'<span title="{esc(name)}">{esc(name)}</span>', "name"


def _work_table(d: DiffResult) -> str:
    la, lb = (esc(x) for x in d.labels)
    w = d.work
    problems = w[w["status"] != "same"]
    same = w[w["status"] == "same"]
    left = max(len(same) - MAX_SAME_ROWS, 0)
    shown = pd.concat([problems, same.head(MAX_SAME_ROWS)])
    rows = []
    for r in shown.itertuples():
        rows.append([
            (f'<span class="st {esc(r.status)}">{esc(r.status)}</span>', "l"),
            (_n(r.base_per_step, 2), ""), (_n(r.cand_per_step, 2), ""),
            (_us(r.base_avg_ns, 2), ""), (_us(r.cand_avg_ns, 2), ""),
            ("-" if _isna(r.avg_ratio) else f"{r.avg_ratio:.2f}x", ""), _name_cell(r.name),
        ])
    if left:
        rows.append([(f"\u2026 {left} more kernels with status same \u2026", "gap")])
    return _table([("status", "l"), (f"{la} per step", ""), (f"{lb} per step", ""),
                   (f"{la} avg us", ""), (f"{lb} avg us", ""), ("avg ratio", ""),
                   ("kernel", "l")], rows)


def _kernel_table(v: RunView, limit: int = 40) -> str:
    k = v.kernels.head(limit)
    rows = [[(_n(r.per_step, 2), ""), (str(int(r.instances)), ""), (_us(r.avg_ns, 2), ""),
             (_us(r.total_ns), ""), _name_cell(r.name)] for r in k.itertuples()]
    more = len(v.kernels) - len(k)
    if more > 0:
        rows.append([(f"\u2026 {more} more kernel names \u2026", "gap")])
    return _table([("per step", ""), ("instances", ""), ("avg us", ""), ("total us", ""),
                   ("kernel", "l")], rows)


def _gap_kind_table(result: AnalysisResult) -> str:
    bk = result.gaps.by_kind
    rows = [[(str(int(r.device_id)), ""), (esc(r.kind), "l"), (str(int(r.count)), ""),
             (_us(r.total_ns), ""), (_n(r.share_pct, 1), "")] for r in bk.itertuples()]
    return _table([("GPU", ""), ("cause", "l"), ("gaps", ""), ("total us", ""),
                   ("% of idle", "")], rows)


def _graph_granularity(views: tuple[RunView, ...]) -> list[str]:
    return [v.label for v in views
            if v.result.info["graph_trace_mode"] == "graph" and len(v.replays)]


def _idle_detail(views: tuple[RunView, ...]) -> str:
    hidden = _graph_granularity(views)
    if hidden:
        return (f"gaps inside {esc(' and '.join(hidden))} replays are not in the trace "
                f"(graph granularity)")
    return "time the GPU waited inside a step"


def _hidden_detail(views: tuple[RunView, ...]) -> str:
    hidden = _graph_granularity(views)
    return f"; unknown: {esc(' and '.join(hidden))} is graph-granularity" if hidden else ""


def _fig(fid: str) -> str:
    return f'<div id="{fid}" class="fig"></div>'


# ---------------------------------------------------------------------------------------
# pages


def _single_headline(result: AnalysisResult) -> tuple[str, str]:
    """(headline text, css class) from the analysis verdict."""
    v = result.verdict
    if v.gpu_unavailable is not None:
        return ("Incomplete trace: GPU records are missing, so its GPU figures are "
                "unavailable: not recorded", "bad")
    if v.measured_speedup is not None:
        good = v.measured_speedup >= 1
        return (f"Graphed steps are {v.measured_speedup:.2f}x "
                f"{'faster' if good else 'slower'} than eager steps: "
                f"{_us(v.eager_step_p50_ns)} us \u2192 {_us(v.graph_step_p50_ns)} us per step",
                "good" if good else "bad")
    if v.kind == "launch-bound":
        return (f"Launch-bound: the GPU is busy {v.eager_busy_pct_p50 or 0:.0f}% of each step; "
                f"graphed it could take ~{_us(v.estimated_graph_step_ns)} us "
                f"(~{v.estimated_speedup or 0:.1f}x, estimate)", "bad")
    if v.kind == "not launch-bound":
        return (f"Not launch-bound: the GPU is busy {v.eager_busy_pct_p50 or 0:.0f}% of each "
                f"step; graphs would give ~{v.estimated_speedup or 0:.1f}x (estimate)", "")
    if v.kind == "graphed":
        return (f"Graphed: {v.graph_launches_per_step or 0:.0f} launch call(s) per step, step "
                f"p50 {_us(v.graph_step_p50_ns)} us", "good")
    return "No steps to judge", ""


def render_single(result: AnalysisResult, max_events: int = F.DEFAULT_MAX_EVENTS,
                  steps: slice | None = None) -> str:
    """The report of one analysed trace (``cgprof analyze TRACE --html``)."""
    v = _single_view(result, steps)
    parts = _mode_parts(result, v, steps)
    figs, w = _figures((v,), max_events, parts)
    data = _figure_payload(figs, (v,), w)
    head, cls = _single_headline(result)
    c = result.completeness
    banner = "" if c is None or c.complete else _incomplete_banner({"": c.missing})
    if parts is None:
        h = v.headline
        cards = "".join([
            _card("Step time p50", f"{_us(h['step_p50_ns'])} us",
                  f"{h['steps']} steps, {esc(h['mode'])}"),
            _card("Launch calls per step", _n(h["launch_calls_per_step"]),
                  "kernel + graph launch calls (p50)"),
            _card("GPU idle", f"{_n(h['gpu_idle_pct'], 1)}%", _idle_detail((v,))),
            _card("Replay compactness p50", esc(compactness_text(h, True)),
                  "GPU busy / replay span" + _hidden_detail((v,))),
            _card("Kernels per step", _n(h["kernels_per_step"]),
                  "p50" + (f"; {h['hidden_steps']} steps hide replayed kernels"
                           if h["hidden_steps"] else "")),
        ])
    else:
        ha, hb = parts[0].headline, parts[1].headline
        cards = "".join([
            _card("Step time p50, eager → graph",
                  _arrow(_us(ha["step_p50_ns"]), _us(hb["step_p50_ns"])) + " us",
                  f"{ha['steps']} eager, {hb['steps']} graphed steps"),
            _card("Launch calls per step", _arrow(_n(ha["launch_calls_per_step"]),
                                                  _n(hb["launch_calls_per_step"])),
                  "kernel + graph launch calls (p50)"),
            _card("GPU idle, % of step time", _arrow(_n(ha["gpu_idle_pct"], 1),
                                                     _n(hb["gpu_idle_pct"], 1)) + "%",
                  _idle_detail(parts)),
            _card("Replay compactness p50", _arrow(esc(compactness_text(ha, True)),
                                                   esc(compactness_text(hb, True))),
                  "GPU busy / replay span" + _hidden_detail(parts)),
            _card("Kernels per step", _arrow(_n(ha["kernels_per_step"]),
                                             _n(hb["kernels_per_step"])),
                  "p50" + (" (replayed kernels hidden: graph-granularity trace)"
                           if hb["hidden_steps"] else "")),
        ])
    measured = getattr(result, "untraced", None) is not None
    said = [*(untraced_lines(result) if measured else []), *result.verdict.lines]
    lines = "".join(f"<li>{esc(line)}</li>" for line in said)
    kicker = ("" if parts is None else ' \u00b7 this trace holds both: charts compare its '
              '<span class="b">eager steps</span> with its <span class="c">graphed steps</span>')
    body = f"""<header class="top">
{banner}<div class="kicker">cgprof analyze \u00b7 {esc(v.path)}{kicker}</div>
<h1 id="cgprof-verdict" class="verdict {cls}">{esc(head)}</h1>
<ul class="sub">{lines}</ul>
<div class="cards">{cards}</div>
{_runs_table((v,))}
</header>
<section id="sec-timeline"><h2>Timeline</h2>
{_controls((v,), w)}
{_notes((v,), w)}
{_fig(F.TIMELINE_IDS[0])}
</section>
<section id="sec-steps"><h2>Per step</h2>
{_fig("cgprof-steps")}
<details open><summary>step table</summary>{_step_table_single(v)}</details>
</section>
<section id="sec-gpu" class="grid2">
<div><h2>GPU idle gaps</h2>{_fig("cgprof-gaps")}
<p class="hint">Idle time by cause (analysis window: {esc(result.info["window_reason"])}):</p>
{_gap_kind_table(result)}</div>
<div><h2>Launch calls</h2>{_fig("cgprof-families")}{_families_table(parts or (v,))}</div>
</section>
<section id="sec-replays"><h2>Graph replays</h2>
{_fig("cgprof-compactness")}
{_coverage_block(result)}
</section>
<section id="sec-kernels"><h2>Kernels per step</h2>
{_kernel_table(v)}
</section>
{_footer()}"""
    return _page(f"cgprof: {v.path}", body, data)


def _incomplete_banner(missing: dict[str, list[str]]) -> str:
    """The banner atop the page of an incomplete trace (label -> what is missing; label ""
    for the one run of an analysis page)."""
    items = []
    for label, lines in missing.items():
        who = f" ({esc(label)})" if label else ""
        items.append(f"<p><b>Incomplete trace{who}</b>: GPU records are missing, so its GPU "
                     "figures (busy, idle, replay compactness, graph coverage, the estimate) "
                     "are unavailable: not recorded; the host side is shown as recorded.</p>"
                     + "<ul>" + "".join(f"<li>{esc(m)}</li>" for m in lines) + "</ul>")
    return f'<div id="cgprof-incomplete" class="banner">{"".join(items)}</div>\n'


def _share(v: Any) -> str:
    return "-" if v is None else f"{100.0 * float(v):.1f}%"


def _coverage_block(result: AnalysisResult) -> str:
    """Graph coverage of the analysis window and what partially graphed steps still run eagerly."""
    c = result.coverage
    s = c.summary
    if result.completeness is not None and not result.completeness.complete:
        return (f'<p id="cgprof-coverage" class="hint">Graph coverage of the {s["steps"]} '
                "window steps: unavailable: not recorded (the trace is incomplete).</p>")
    text = (f"Graph coverage of the {s['steps']} window steps: kernels inside replays "
            f"{_share(s['graph_kernel_share'])}, GPU time inside replays "
            f"{_share(s['graph_gpu_share'])}; re-captures {s['recaptures']}, fallbacks "
            f"{s['fallbacks']}.")
    out = f'<p id="cgprof-coverage" class="hint">{esc(text)}</p>'
    if s["partial_steps"] and len(c.eager_top):
        rows = [[(_n(r.kernels, 2), ""), (_us(r.gpu_ns, 2), ""), (esc(r.launch_api), "l"),
                 (_us(r.launch_host_ns, 2), ""), _name_cell(str(r.name))]
                for r in c.eager_top.itertuples()]
        out += ('<p class="hint">Still eager in partially graphed steps (per window step):</p>'
                + _table([("kernels", ""), ("GPU us", ""), ("launched by", "l"),
                          ("launch host us", ""), ("kernel", "l")], rows))
    return out


def render_diff(d: DiffResult, max_events: int = F.DEFAULT_MAX_EVENTS) -> str:
    """The step-aligned comparison page of two runs (``cgprof diff A B -o diff.html``)."""
    figs, w = _figures(d.views, max_events)
    data = _figure_payload(figs, d.views, w)
    la, lb = d.labels
    ha, hb = d.headline["baseline"], d.headline["candidate"]
    s = d.headline["speedup"]
    head, _, sub = d.lines[0].partition(": ")
    lead = d.headline.get("untraced_speedup") or s  # the headline's: untraced when measured
    cls = "" if lead is None else ("good" if lead >= 1.05 else ("bad" if lead < 0.95 else ""))
    counts = d.work["status"].value_counts() if len(d.work) else pd.Series(dtype=int)
    bad = sum(int(counts.get(k, 0)) for k in ("missing", "extra", "fewer", "more", "slower"))
    unknown = int(counts.get("unknown", 0))
    su = d.headline.get("untraced_speedup")
    untraced = [] if su is None else [_card(
        "Without the profiler", _arrow(_us(ha["untraced_step_mean_ns"]),
                                       _us(hb["untraced_step_mean_ns"])) + " us",
        (f"{su:.2f}x faster" if su >= 1 else f"{1 / su:.2f}x slower")
        + " (mean step, untraced runs)")]
    cards = "".join([
        *untraced,
        _card("Step time p50", _arrow(_us(ha["step_p50_ns"]), _us(hb["step_p50_ns"])) + " us",
              "-" if s is None else (f"{s:.2f}x faster" if s >= 1 else f"{1 / s:.2f}x slower")),
        _card("Launch calls per step", _arrow(_n(ha["launch_calls_per_step"]),
                                              _n(hb["launch_calls_per_step"])),
              "kernel + graph launch calls (p50)"),
        _card("GPU idle, % of step time", _arrow(_n(ha["gpu_idle_pct"], 1),
                                                 _n(hb["gpu_idle_pct"], 1)) + "%",
              _idle_detail(d.views)),
        _card("Replay compactness p50", _arrow(esc(compactness_text(ha, True)),
                                               esc(compactness_text(hb, True))),
              "GPU busy / replay span" + _hidden_detail(d.views)),
        _card("Work check", "same kernels" if not bad and not unknown
              else (f"{bad} differ" if bad else "unknown"),
              esc(work_summary(d)), "warn" if bad else ("" if unknown else "ok")),
    ])
    more = "".join(f"<li>{esc(line)}</li>" for line in d.lines[1:])
    gone = d.incomplete()
    banner = _incomplete_banner(gone) if gone else ""
    body = f"""<header class="top">
{banner}<div class="kicker">cgprof diff \u00b7 <span class="b">{esc(la)}</span> (baseline) vs
<span class="c">{esc(lb)}</span> (candidate), aligned step by step</div>
<h1 id="cgprof-verdict" class="verdict {cls}">{esc(head)}</h1>
<div class="sub">{esc(sub)} \u00b7 step time = the longer of host range and GPU span</div>
<div class="cards">{cards}</div>
<ul class="sub">{more}</ul>
{_runs_table(d.views)}
</header>
<section id="sec-timeline"><h2>Timelines, aligned by step</h2>
{_controls(d.views, w)}
{_notes(d.views, w)}
{_fig(F.TIMELINE_IDS[0])}
{_fig(F.TIMELINE_IDS[1])}
</section>
<section id="sec-steps"><h2>Per step</h2>
{_fig("cgprof-steps")}
<details open><summary>step table (position i of each window side by side)</summary>
{_step_table_diff(d)}</details>
</section>
<section id="sec-gpu" class="grid2">
<div><h2>GPU idle gaps</h2>{_fig("cgprof-gaps")}</div>
<div><h2>Launch calls</h2>{_fig("cgprof-families")}{_families_table(d.views)}</div>
</section>
<section id="sec-replays"><h2>Graph replays</h2>
{_fig("cgprof-compactness")}
</section>
<section id="sec-work"><h2>Work check: do both runs execute the same kernels per step?</h2>
<p class="hint">Kernel instances per step of each window (by demangled name) and average
duration; "slower" means more than {SLOWER_RATIO:g}x the baseline's average.
Graph-granularity traces do not hold replayed kernels: those counts are "unknown",
never "missing".</p>
{_work_table(d)}
</section>
{_footer()}"""
    return _page(f"cgprof diff: {la} vs {lb}", body, data)
