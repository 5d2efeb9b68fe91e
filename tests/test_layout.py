"""The package's data flow is one way: trace -> metrics -> diff -> report, never back."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "cgprof"

#: Which cgprof sub-packages a layer may not import (directly or lazily, inside a function).
FORBIDDEN = {
    "trace.py": ("cgprof.metrics", "cgprof.diff", "cgprof.report"),
    "io": ("cgprof.metrics", "cgprof.diff", "cgprof.report", "cgprof.plan", "cgprof.ranks",
           "cgprof.check", "cgprof.parallel", "cgprof.runners", "cgprof.commands", "cgprof.cli",
           "cgprof.record", "cgprof.nsys"),
    "metrics": ("cgprof.diff", "cgprof.report"),
}


def _imports(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def _files(part: str) -> list[Path]:
    p = PKG / part
    return sorted(p.rglob("*.py")) if p.is_dir() else [p] if p.is_file() else []


@pytest.mark.parametrize("part", sorted(FORBIDDEN))
def test_no_import_against_the_flow(part):
    bad = [f"{f.relative_to(PKG.parent)} imports {m}" for f in _files(part)
           for m in sorted(_imports(f)) if m.startswith(FORBIDDEN[part])]
    assert bad == []


def test_json_document_is_made_on_the_report_side(traces_dir):
    import cgprof
    from cgprof.report.json_report import JSON_SCHEMA_VERSION, result_to_dict

    path = traces_dir / "mlp_infer_graph.sqlite"
    doc = result_to_dict(cgprof.analyze(path))
    assert doc["schema_version"] == JSON_SCHEMA_VERSION == 2
    assert doc["trace"]["kernels"] == len(cgprof.load(path).kernels)
