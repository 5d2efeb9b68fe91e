"""The `cgprof run serve --html` page in headless Chromium: the chart draws offline, no errors."""

from __future__ import annotations

import pytest

pytest.importorskip("plotly")

from test_browser import selfcheck  # noqa: E402  (skips this module without chromium)
from test_serve import _result  # noqa: E402

pytestmark = pytest.mark.browser


def test_serve_page_renders(tmp_path):
    from cgprof.report.serve_html import render_serve

    page = tmp_path / "serve.html"
    page.write_text(render_serve(_result()), encoding="utf-8")
    check, dom, console, _ = selfcheck(tmp_path, page)
    assert check == {"figures": 1, "errors": []}
    assert console == []
    assert dom.count('class="main-svg"') >= 1
    # both curves drawn: plotly writes one scatter trace group per mode
    assert dom.count('class="trace scatter') == 2
