"""scripts/bench_diff.py: a real run on a small synthetic trace (whole and capped, first and
cached: the same JSON, the capped runs read in chunks), and its verdict failing where the
documents differ or a capped run was read whole."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import REPO, load_script

SCRIPT = REPO / "scripts" / "bench_diff.py"


@pytest.mark.timeout(240)
def test_bench_diff_runs_the_four_ways():
    r = subprocess.run([sys.executable, str(SCRIPT), "--n-kernels", "30000", "--n-runtime",
                        "30000", "--n-steps", "300", "--memory-limit", "150MB"],
                       capture_output=True, text=True, cwd=REPO, timeout=230)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(r.stdout.strip().splitlines()[-1])
    assert doc["same_json"] is True and doc["trace"]["kernels"] == 30000
    res = doc["results"]
    assert {k: res[k]["chunked"] for k in res} == {
        "whole, first": False, "whole, cached": False, "capped, first": True,
        "capped, cached": True}
    assert all(v["work_s"] > 0 and v["rss_mb"] > 50 for v in res.values())
    assert "the same bytes" in r.stdout


def _bench():
    return load_script("bench_diff")


def test_the_verdict_fails_on_a_difference():
    bench = _bench()
    trace = {"path": "t.sqlite", "bytes": 1, "kernels": 1, "runtime": 1}
    good = {name: {"work_s": 1.0, "rss_mb": 100.0, "chunked": capped, "json_md5": "a"}
            for name, capped, _ in bench.WAYS}
    assert bench.report(trace, good, "1GB")[2] is False
    differ = {**good, "capped, cached": {**good["capped, cached"], "json_md5": "b"}}
    assert bench.report(trace, differ, "1GB")[2] is True
    whole = {**good, "capped, first": {**good["capped, first"], "chunked": False}}
    assert bench.report(trace, whole, "1GB")[2] is True
    broke = {**good, "whole, first": {**good["whole, first"], "error": "exit 1: x"}}
    assert bench.report(trace, broke, "1GB")[2] is True
