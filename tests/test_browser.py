"""The reports in a real browser: headless Chromium renders them offline without errors.

The page writes its own self-check into ``<pre id="cgprof-selfcheck">`` (figures rendered,
errors and console errors/warnings caught since the first script ran); with the URL hash
``#selftest-zoom`` it also zooms the first timeline like a drag does and records whether the
second one followed, aligned on the same step, and uses the step selector. ``--dump-dom``
reads it back; Chromium's own console log (``--enable-logging=stderr``) must stay empty.
Screenshots are kept in ``artifacts/`` (git-ignored) for a person to look at.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from conftest import SAMPLES

import cgprof
from cgprof.report import html as H

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[1]
TRACES = REPO / "traces"
ARTIFACTS = REPO / "artifacts"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--hide-scrollbars", "--enable-logging=stderr", "--v=0", "--mute-audio",
         "--virtual-time-budget=20000"]
SELFCHECK = re.compile(r'<pre id="cgprof-selfcheck"[^>]*>(.*?)</pre>', re.S)

if CHROMIUM is None:
    pytest.skip("chromium not on PATH (Debian: apt-get install chromium; .ci/run installs it)",
                allow_module_level=True)


def chromium(tmp_path: Path, url: str, *extra: str) -> tuple[str, list[str], float]:
    """Run headless Chromium once: (stdout, its console log lines, wall seconds)."""
    profile = tmp_path / f"profile-{time.monotonic_ns()}"
    t0 = time.monotonic()
    proc = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *extra, url],
                          capture_output=True, text=True, timeout=120)
    wall = time.monotonic() - t0
    console = [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]
    return proc.stdout, console, wall


def selfcheck(tmp_path: Path, page: Path, hash_: str = "") -> tuple[dict, str, list[str], float]:
    dom, console, wall = chromium(tmp_path, page.as_uri() + hash_, "--dump-dom")
    m = SELFCHECK.search(dom)
    assert m and m.group(1).strip(), f"page did not finish (console: {console})"
    return json.loads(html.unescape(m.group(1))), dom, console, wall


def screenshot(tmp_path: Path, page: Path, name: str, height: int = 3400) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    out = ARTIFACTS / name
    out.unlink(missing_ok=True)
    chromium(tmp_path, page.as_uri(), f"--screenshot={out}", f"--window-size=1400,{height}")
    assert out.is_file() and out.stat().st_size > 20_000, f"no screenshot at {out}"
    return out


def assert_clean(check: dict, console: list[str], figures: int) -> None:
    assert check["errors"] == []
    assert console == []
    assert check["figures_expected"] == figures
    assert check["figures_rendered"] == figures


def test_diff_report(tmp_path, node):
    d = cgprof.diff(node, node, labels=("eager", "graph"), modes=("eager", "graph"))
    page = tmp_path / "diff.html"
    page.write_text(H.render_diff(d), encoding="utf-8")
    check, dom, console, _ = selfcheck(tmp_path, page, "#selftest-zoom")
    assert_clean(check, console, 6)
    assert check["verdict"] == "graph is 6.63x faster per step than eager"
    # A zoom on the eager timeline moved the graph timeline to the same step, same offset.
    zoom = check["zoom"]
    assert zoom["followed"], zoom
    assert zoom["other"] != zoom["requested"]  # aligned by step, not by clock time
    assert check["step"]["aligned"], check["step"]
    assert dom.count('class="main-svg"') >= 6
    screenshot(tmp_path, page, "report-diff.png")


def test_diff_report_node_vs_graph_granularity(tmp_path, node):
    g = cgprof.analyze(SAMPLES / "mlp8_graph.sqlite")
    d = cgprof.diff(node, g, labels=("eager", "graph"), modes=("eager", "graph"))
    page = tmp_path / "diff2.html"
    page.write_text(H.render_diff(d), encoding="utf-8")
    check, _, console, _ = selfcheck(tmp_path, page, "#selftest-zoom")
    assert_clean(check, console, 6)
    assert check["verdict"] == "graph is 6.91x faster per step than eager"
    assert check["zoom"]["followed"] and check["step"]["aligned"]
    screenshot(tmp_path, page, "report-diff-node-vs-graph.png")


def test_ddp_rank_diff_report(tmp_path):
    """`cgprof diff --rank 1` of the two-GPU DDP pair: the rank's page renders cleanly, its
    timelines follow each other, and it names the rank (rank 0's page is the same code:
    test_ranks_apart.py::test_diff_html_of_a_rank_is_the_same builds it)."""
    from click.testing import CliRunner

    from cgprof.cli import main

    eager, graph = TRACES / "ddp_mlp_train_eager.sqlite", TRACES / "ddp_mlp_train_graph.sqlite"
    for rank in (1,):
        page = tmp_path / f"ddp-rank{rank}.html"
        res = CliRunner().invoke(main, ["diff", str(eager), str(graph), "--rank", str(rank),
                                        "--labels", "eager,graph", "-o", str(page)])
        assert res.exit_code == 0, res.output
        check, dom, console, _ = selfcheck(tmp_path, page, "#selftest-zoom")
        assert_clean(check, console, 6)
        assert re.fullmatch(rf"graph rank {rank} is 1\d\.\d\dx faster per step than eager "
                            rf"rank {rank}", check["verdict"]), check["verdict"]
        assert check["zoom"]["followed"] and check["step"]["aligned"]
        screenshot(tmp_path, page, f"report-ddp-rank{rank}.png")


def test_single_report(tmp_path, node):
    page = tmp_path / "single.html"
    page.write_text(H.render_single(node), encoding="utf-8")
    check, _, console, _ = selfcheck(tmp_path, page)
    assert_clean(check, console, 5)
    assert check["verdict"].startswith("Graphed steps are 6.63x faster than eager steps")
    assert check["zoom"] is None
    screenshot(tmp_path, page, "report-single.png")


def test_hostile_names_render_as_text(tmp_path, make_db):
    from test_html import EVIL, evil_trace

    r = cgprof.analyze(evil_trace(make_db))
    page = tmp_path / "evil.html"
    page.write_text(H.render_diff(cgprof.diff(r, r, labels=(EVIL, "b"))), encoding="utf-8")
    check, dom, console, _ = selfcheck(tmp_path, page, "#selftest-zoom")
    assert_clean(check, console, 6)
    assert check["zoom"]["followed"]
    assert "&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;</span></td>" in dom


def test_largest_trace_size_and_open_time(tmp_path):
    path = max(TRACES.glob("*.sqlite"), key=lambda p: p.stat().st_size)
    t0 = time.monotonic()
    result = cgprof.analyze(path)
    t1 = time.monotonic()
    text = H.render_single(result)
    t2 = time.monotonic()
    page = tmp_path / "largest.html"
    page.write_text(text, encoding="utf-8")
    check, _, console, wall = selfcheck(tmp_path, page)
    assert_clean(check, console, 5)
    timing = {
        "trace": path.name, "trace_bytes": path.stat().st_size,
        "analyze_s": round(t1 - t0, 2), "render_s": round(t2 - t1, 2),
        "html_bytes": page.stat().st_size,
        "chromium_wall_s": round(wall, 2), "page_ready_ms": check["ready_ms"],
        "plotly_loaded_ms": check["plotly_loaded_ms"], "figure_ms": check["timings_ms"],
    }
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "report-timing.json").write_text(json.dumps(timing, indent=1, sort_keys=True))
    assert check["ready_ms"] < 60_000
