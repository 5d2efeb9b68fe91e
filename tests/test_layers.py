"""The package's layers (scripts/check_layers.py): imports point down, no circle."""

from __future__ import annotations

from pathlib import Path

from conftest import load_script

REPO = Path(__file__).resolve().parents[1]


def _checker():
    return load_script("check_layers")


#: Modules still over the size limit, each to be split by subject: none may join them.
OVERSIZED: set[str] = set()


def test_every_module_is_in_a_layer_and_imports_only_below_it():
    L = _checker()
    found = L.problems()
    assert [line for kind, line in found if kind in ("layer", "circle")] == []
    oversized = {line.split(":")[0] for kind, line in found if kind == "size"}
    assert oversized <= OVERSIZED
    edges, _ = L.graph()
    assert len(L.longest_chain(edges)) <= L.MAX_CHAIN


def test_an_upward_import_inside_a_function_is_found(tmp_path):
    L = _checker()
    modules = {"cgprof.errors", "cgprof.report.html"}
    f = tmp_path / "errors.py"
    f.write_text("def f():\n    from cgprof.report import html\n"
                 "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                 "    from cgprof.report.html import x\n")
    assert L.imports_of(f, modules, me="cgprof.errors") == {"cgprof.report.html"}
    assert L.layer_of("cgprof.report.html") < L.layer_of("cgprof.errors")


def test_a_circle_and_the_longest_chain():
    L = _checker()
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set()}
    assert L.circles(edges) == [["a", "b", "c"]]
    assert L.longest_chain(edges) == ["a", "b", "c", "d"]
