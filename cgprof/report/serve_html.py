"""`cgprof run serve --html`: one offline page, p99 latency against QPS, one curve per mode.

Like the analyze and diff reports: plotly.js inlined once, a fixed div id, one sorted-keys
JSON payload, every string escaped, no timestamps (same result, same bytes). The page writes
a self-check (figure drawn, errors seen) into ``<pre id="cgprof-selfcheck">`` for the
browser test. No torch here: it renders a :class:`~cgprof.runners.serving.ServeResult`.
"""

from __future__ import annotations

import math
import re
from typing import Any

from cgprof.report.html import PLOTLY_CONFIG, _plotlyjs, _template, esc, script_json
from cgprof.runners.serving import ServeResult
from cgprof.version import __version__

FIG_ID = "cgprof-serve-qps-p99"
COLORS = {"eager": "#d62728", "graph": "#1f77b4"}

_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="cgprof @@VERSION@@">
<title>@@TITLE@@</title>
<script>
window.__cgprof = {errors: []};
window.addEventListener("error", function (e) {
  window.__cgprof.errors.push("error: " + (e && e.message ? e.message : String(e)));
});
</script>
<style>
@@CSS@@
</style>
</head>
<body>
@@BODY@@
<pre id="cgprof-selfcheck" hidden></pre>
<script id="cgprof-data" type="application/json">@@DATA@@</script>
<script>window.PlotlyConfig = {MathJaxConfig: "local"};</script>
<script>
@@PLOTLYJS@@
</script>
<script>
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("cgprof-data").textContent);
  var out = {figures: 0, errors: window.__cgprof.errors};
  Plotly.newPlot(data.id, data.figure.data, data.figure.layout, data.config).then(function () {
    out.figures = 1;
  }).catch(function (e) {
    out.errors.push("plot: " + e);
  }).then(function () {
    document.getElementById("cgprof-selfcheck").textContent = JSON.stringify(out);
  });
})();
</script>
</body>
</html>
"""


def figure(result: ServeResult) -> dict[str, Any]:
    """The chart as a plotly figure dict: x = QPS, y = p99 latency (ms), one curve per mode,
    the SLO as a dashed line; each point is labelled with its level (clients or rate)."""
    data = []
    for mode, levels in result.by_mode().items():
        pts = sorted(levels, key=lambda lv: lv.level)
        unit = "/s" if result.open_loop else " clients"
        data.append({
            "type": "scatter",
            "mode": "lines+markers+text",
            "name": mode,
            "x": [round(lv.qps, 3) for lv in pts],
            "y": [None if math.isnan(lv.p99_ms) else round(lv.p99_ms, 4) for lv in pts],
            "text": [f"{lv.level:g}" for lv in pts],
            "textposition": "top center",
            "customdata": [
                [f"{lv.level:g}{unit}", None if math.isnan(lv.p50_ms) else round(lv.p50_ms, 4),
                 round(lv.mean_batch, 2)]
                for lv in pts
            ],
            "hovertemplate": (
                f"{mode}, %{{customdata[0]}}<br>%{{x:.1f}} QPS<br>p99 %{{y:.3f}} ms<br>"
                "p50 %{customdata[1]:.3f} ms<br>mean batch %{customdata[2]}<extra></extra>"
            ),
            "line": {"color": COLORS.get(mode, "#555555")},
        })
    layout = {
        "title": {"text": f"{result.model}: p99 latency against throughput"},
        "xaxis": {"title": {"text": "requests per second (QPS)"}, "rangemode": "tozero"},
        "yaxis": {"title": {"text": "p99 latency (ms)"}, "rangemode": "tozero"},
        "shapes": [{
            "type": "line", "xref": "paper", "x0": 0, "x1": 1, "yref": "y",
            "y0": result.slo_ms, "y1": result.slo_ms,
            "line": {"dash": "dash", "color": "#888888"},
        }],
        "annotations": [{
            "xref": "paper", "x": 1, "yref": "y", "y": result.slo_ms, "showarrow": False,
            "xanchor": "right", "yanchor": "bottom", "text": f"SLO {result.slo_ms:g} ms",
        }],
        "height": 520,
        "margin": {"t": 60, "l": 70, "r": 30, "b": 60},
    }
    return {"data": data, "layout": layout}


def _table(result: ServeResult) -> str:
    head = ("rate" if result.open_loop else "clients", "mode", "QPS", "p50 ms", "p90 ms",
            "p99 ms", "mean batch", "mean bucket", "GPU busy", "host ms/batch", "batch ms",
            "generator CPU")
    rows = []
    for lv in sorted(result.levels, key=lambda lv: (lv.level, lv.mode)):
        busy = "n/a" if lv.gpu_busy_pct is None else f"{lv.gpu_busy_pct:.1f}%"
        cells = (f"{lv.level:g}", lv.mode, f"{lv.qps:.1f}", f"{lv.p50_ms:.3f}",
                 f"{lv.p90_ms:.3f}", f"{lv.p99_ms:.3f}", f"{lv.mean_batch:.2f}",
                 f"{lv.mean_bucket:.2f}", busy, f"{lv.host_ms_per_batch:.3f}",
                 f"{lv.batch_ms:.3f}", f"{lv.loadgen_cpu_pct:.1f}%")
        rows.append("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in cells) + "</tr>")
    return ("<table><thead><tr>" + "".join(f"<th>{esc(h)}</th>" for h in head)
            + "</tr></thead><tbody>" + "".join(rows) + "</tbody></table>")


def render_serve(result: ServeResult) -> str:
    """The whole page as a string (deterministic)."""
    gain = result.graph_gain
    best = "; ".join(
        f"{m}: {q:.1f} QPS" if (q := result.best_qps(m)) is not None else f"{m}: none"
        for m in result.by_mode()
    )
    headline = f"highest QPS with p99 &le; {esc(f'{result.slo_ms:g}')} ms &mdash; {esc(best)}"
    if gain is not None:
        headline += f"; graph gain {esc(f'{gain:.2f}')}x"
    kind = "open loop (Poisson arrivals)" if result.open_loop else "closed-loop clients"
    body = (
        f"<h1>cgprof run serve: {esc(result.model)} ({esc(result.size)})</h1>"
        f"<p>{esc(kind)}, max batch {result.max_batch} (buckets "
        f"{esc(','.join(map(str, result.buckets)))}), max wait {esc(f'{result.max_wait_ms:g}')} "
        f"ms, {esc(f'{result.duration_s:g}')} s per level after "
        f"{esc(f'{result.warmup_s:g}')} s warm-up; {esc(result.device)} "
        f"({esc(result.device_name)}), torch {esc(result.torch_version)}, "
        f"seed {result.seed}</p>"
        f"<p><b>{headline}</b></p>"
        f'<div id="{FIG_ID}" class="fig"></div>'
        f"{_table(result)}"
        f"<footer>cgprof {esc(__version__)} &middot; one self-contained file: plotly.js is "
        "inlined, nothing is fetched.</footer>"
    )
    parts = {
        "VERSION": esc(__version__),
        "TITLE": esc(f"cgprof serve: {result.model}"),
        "CSS": _template("report.css"),
        "BODY": body,
        "DATA": script_json({"id": FIG_ID, "figure": figure(result), "config": PLOTLY_CONFIG}),
        "PLOTLYJS": _plotlyjs(),
    }
    return re.sub(r"@@([A-Z]+)@@", lambda m: parts[m.group(1)], _PAGE)
