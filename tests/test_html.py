"""The HTML pages: escaping of trace strings, determinism, offline, and the data behind them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from nsysdb import K, N, R
from plotly.offline import get_plotlyjs

import cgprof
from cgprof.cli import main
from cgprof.report import html as H

TRACES = Path(__file__).resolve().parents[1] / "traces"
EVIL = "</script><script>alert(1)</script>"
EVIL_THREAD = '<img src=x onerror="alert(2)">'
DATA_RE = re.compile(r'<script id="cgprof-data" type="application/json">(.*?)</script>', re.S)


def evil_trace(make_db, steps: int = 3) -> Path:
    """Kernel names, NVTX text and a thread name that try to break out of the page."""
    ks, rs, ns = [], [], []
    for s in range(steps):
        t = 1_000_000 + s * 100_000
        ns.append(N(t, t + 90_000, "step", domain="cgprof"))
        ns.append(N(t + 500, t + 80_000, EVIL, domain="cgprof"))
        for j, name in enumerate((EVIL, "gemm<float, 128>", EVIL + "&amp;'\"")):
            corr = 1 + s * 3 + j
            rs.append(R(t + 1000 + 3000 * j, t + 3000 + 3000 * j, "cudaLaunchKernel_v7000",
                        corr=corr))
            ks.append(K(t + 5000 + 4000 * j, t + 7000 + 4000 * j, name, corr=corr))
    return make_db(kernels=ks, runtime=rs, nvtx=ns, gpus=[(0, "GPU <0>")],
                   threads=[(100, 100, EVIL_THREAD)], graph_trace_mode="node")


@pytest.fixture(scope="module")
def diff_page(node):
    d = cgprof.diff(node, node, labels=("eager", "graph"), modes=("eager", "graph"))
    return H.render_diff(d)


def _payload(page: str) -> dict:
    m = DATA_RE.search(page)
    assert m, "no data script"
    raw = m.group(1)
    assert "<" not in raw and ">" not in raw and "&" not in raw
    return json.loads(raw)


def _without_plotly(page: str) -> str:
    js = get_plotlyjs()
    assert page.count(js) == 1, "plotly.js must be inlined exactly once"
    return page.replace(js, "")


# --- escaping ---------------------------------------------------------------------------------


def test_trace_strings_cannot_break_out(make_db):
    r = cgprof.analyze(evil_trace(make_db))
    pages = [H.render_single(r), H.render_diff(cgprof.diff(r, r, labels=(EVIL, "b")))]
    for page in pages:
        rest = _without_plotly(page)
        assert EVIL not in rest
        assert EVIL_THREAD not in rest
        assert "alert(1)</script>" not in rest
        # Exactly our five script elements, each closed once.
        assert rest.count("<script") == 5
        assert rest.count("</script>") == 5
        # As text in the tables and titles...
        assert "&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in rest
        # ...and, escaped once more for plotly's markup, inside the JSON payload.
        data = _payload(page)
        blob = json.dumps(data)
        assert "&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in blob
        assert "&lt;img src=x onerror=\\\"alert(2)\\\"&gt;" in blob
    single = pages[0]
    # The kernel table: full name in a title attribute (quotes escaped) and as text.
    assert ('title="&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;&amp;amp;&#x27;&quot;"'
            in single)
    assert "GPU &lt;0&gt;" in single


def test_script_json_escapes_markup():
    text = H.script_json({"b": EVIL, "a": "x & y > z"})
    assert text == ('{"a":"x \\u0026 y \\u003e z","b":"\\u003c/script\\u003e\\u003cscript'
                    '\\u003ealert(1)\\u003c/script\\u003e"}')
    assert json.loads(text) == {"a": "x & y > z", "b": EVIL}


def test_labels_are_escaped_in_the_page(node):
    d = cgprof.diff(node, node, labels=("<i>a</i>", "b&c"), steps=slice(0, 2))
    rest = _without_plotly(H.render_diff(d))
    assert "<i>a</i>" not in rest
    assert "&lt;i&gt;a&lt;/i&gt;" in rest and "b&amp;c" in rest


# --- determinism, offline -------------------------------------------------------------------


def test_same_inputs_same_bytes():
    a1, a2 = (cgprof.analyze(TRACES / "mlp_train_graph_graphtrace.sqlite") for _ in range(2))
    n1, n2 = (cgprof.analyze(TRACES / "mlp_infer_eager.sqlite") for _ in range(2))
    assert H.render_single(a1) == H.render_single(a2)
    assert H.render_diff(cgprof.diff(n1, a1)) == H.render_diff(cgprof.diff(n2, a2))


def test_offline_single_file(diff_page):
    rest = _without_plotly(diff_page)
    assert "http://" not in rest and "https://" not in rest
    assert not re.search(r"<(script|img|iframe)[^>]*\ssrc=", rest)
    assert "<link" not in rest
    assert "@@" not in rest  # every placeholder filled
    assert rest.startswith("<!DOCTYPE html>")


def test_no_timestamps(diff_page):
    rest = _without_plotly(diff_page)
    assert not re.search(r"20\d\d-\d\d-\d\d", rest)


# --- the page's structure and data --------------------------------------------------------------


def test_diff_page_structure(diff_page):
    assert ('<h1 id="cgprof-verdict" class="verdict good">graph is 6.63x faster per step than '
            'eager</h1>') in diff_page
    for fid in ("cgprof-timeline-0", "cgprof-timeline-1", "cgprof-steps", "cgprof-gaps",
                "cgprof-families", "cgprof-compactness"):
        assert diff_page.count(f'<div id="{fid}" class="fig"></div>') == 1
    assert '<select id="cgprof-step">' in diff_page
    assert diff_page.count("<option ") == 21
    assert '<pre id="cgprof-selfcheck" hidden></pre>' in diff_page
    assert "Timeline: every step of the window drawn" in diff_page
    assert '<span class="b">16</span><span class="arrow">\u2192</span><span class="c">1</span>' \
        in diff_page


def test_diff_page_data(node):
    d = cgprof.diff(node, node, labels=("eager", "graph"), modes=("eager", "graph"))
    data = H.diff_page_data(d)
    assert data["order"] == ["cgprof-timeline-0", "cgprof-timeline-1", "cgprof-steps",
                             "cgprof-gaps", "cgprof-families", "cgprof-compactness"]
    assert sorted(data["figures"]) == sorted(data["order"])
    assert all("template" not in f["layout"] for f in data["figures"].values())
    assert data["template"]["layout"]
    assert data["config"]["displaylogo"] is False
    tl = data["timelines"]
    assert [t["id"] for t in tl] == ["cgprof-timeline-0", "cgprof-timeline-1"]
    assert [t["label"] for t in tl] == ["eager", "graph"]
    assert [len(t["steps"]) for t in tl] == [20, 20]
    assert tl[0]["steps"][0]["x0"] == 0.0 and tl[1]["steps"][0]["step"] == 20
    for t in tl:
        assert t["initial_range"] == list(data["figures"][t["id"]]["layout"]["xaxis"]["range"])
    # Everything drawn at one scale: the eager run's 20 steps set the width of both.
    assert tl[0]["full_range"] == tl[1]["full_range"]
    assert tl[0]["full_range"][0] < 0 < tl[0]["steps"][-1]["x1"] < tl[0]["full_range"][1]
    dw = data["draw_window"]
    assert (dw["first"], dw["stop"], dw["total"], dw["max_events"]) == (0, 20, 20, 20000)
    assert dw["drawn"] == [1164, 722]


def test_capped_page_says_what_to_do(node):
    d = cgprof.diff(node, node, labels=("eager", "graph"), modes=("eager", "graph"))
    page = H.render_diff(d, max_events=500)
    assert "window positions 0-7 of 20 drawn" in page
    assert "Next steps: <code>--steps 8:16</code>." in page
    assert page.count("<option ") == 9
    d = cgprof.diff(node, node, steps=(slice(0, 20), slice(20, 40)))
    assert "Next steps: <code>--steps 8:16,28:36</code>." in H.render_diff(d, max_events=500)


def test_single_page_mixed_trace(node):
    page = H.render_single(node)
    assert ('<h1 id="cgprof-verdict" class="verdict good">Graphed steps are 6.63x faster than '
            'eager steps: 410.1 us \u2192 61.9 us per step</h1>') in page
    assert "charts compare its <span class=\"b\">eager steps</span>" in page
    data = _payload(page)
    assert data["order"] == ["cgprof-timeline-0", "cgprof-steps", "cgprof-gaps",
                             "cgprof-families", "cgprof-compactness"]
    fam = data["figures"]["cgprof-families"]["data"]
    assert [t["name"] for t in fam] == ["eager steps", "graph steps"]


def test_single_page_graph_granularity():
    page = H.render_single(cgprof.analyze(TRACES / "mlp_train_graph_graphtrace.sqlite"))
    assert "graph-granularity trace (--cuda-graph-trace=graph): each replay is one bar" in page
    assert "gaps inside" in page


def test_analyze_html_command(tmp_path):
    out = tmp_path / "r.html"
    trace = TRACES / "mlp_train_graph_graphtrace.sqlite"
    res = CliRunner().invoke(main, ["analyze", str(trace), "--html", str(out)])
    assert res.exit_code == 0, res.output
    assert res.output.endswith(f"wrote {out}\n")
    page = out.read_text()
    assert page == H.render_single(cgprof.analyze(TRACES / "mlp_train_graph_graphtrace.sqlite"))
