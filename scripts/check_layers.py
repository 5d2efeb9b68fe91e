"""Hold cgprof's package to its layers: imports point down, no circle, short chains, small modules.

    python3 scripts/check_layers.py            # exit 1 and one line per problem
    python3 scripts/check_layers.py --graph    # also print every module's layer and imports

The data flows one way (record -> read -> plan -> metrics -> diff/ranks/check -> report ->
commands), and so do the imports: a module may import its own layer's modules and those
below it, never one above. The one stage out of that order is recording: ``cgprof.record``
and ``cgprof.nsys`` run nsys, which the reading layer (``cgprof.io``) never does, so they sit
above it; the reading layer has an ``.nsys-rep`` exported through the callable
``cgprof.io.report_export``, which ``cgprof/__init__.py`` sets.
:data:`LAYERS` lists them from the top down; every module of
``cgprof/`` must be in one. Imports inside functions count the same as those at the top of a
file: they hide an upward arrow, they do not remove it (``if TYPE_CHECKING:`` imports, which
never run, do not count).

Besides the direction, it checks that no two modules import each other through any chain (a
circle), that the longest chain of imports between cgprof's files is at most
:data:`MAX_CHAIN`, and that no module is longer than :data:`MAX_LINES` lines.
:data:`KNOWN` lists the upward imports that are still there, each with what should replace
it; an import that is no longer made must leave the list (the check fails on a stale entry),
so the list only shrinks.
"""

from __future__ import annotations

import argparse
import ast
import sys
from fnmatch import fnmatch
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "cgprof"

#: From the top down: (layer name, module patterns).
LAYERS: list[tuple[str, list[str]]] = [
    ("cli", ["cgprof", "cgprof.__main__", "cgprof.cli", "cgprof.commands", "cgprof.commands.*",
             "cgprof._worker"]),
    ("report", ["cgprof.report", "cgprof.report.*"]),
    ("runs", ["cgprof.parallel", "cgprof.runners", "cgprof.runners.*"]),
    ("compare", ["cgprof.diff", "cgprof.diff_options", "cgprof.diff_verdict", "cgprof.ranks",
                 "cgprof.check", "cgprof.check_history"]),
    ("metrics", ["cgprof.metrics", "cgprof.metrics.*"]),
    ("plan", ["cgprof.plan"]),
    ("record", ["cgprof.record", "cgprof.nsys"]),
    ("io", ["cgprof.io", "cgprof.io.*", "cgprof.untraced"]),
    ("base", ["cgprof.settings", "cgprof.scratch", "cgprof.schema", "cgprof.mark",
              "cgprof.records", "cgprof.version", "cgprof.bootstrap", "cgprof.bootstrap.*"]),
    ("errors", ["cgprof.errors"]),
]

#: The longest chain of imports between cgprof's files allowed (sqlite-utils: 8, memray: 11,
#: pyinstrument: 14).
MAX_CHAIN = 14
#: The longest module allowed, in lines.
MAX_LINES = 800

#: Upward imports still made, (importer, imported): each is a piece of code in the wrong
#: layer, to be moved to where its callers can import it from below.
KNOWN: dict[tuple[str, str], str] = {
}


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer_of(module: str) -> int | None:
    for i, (_, patterns) in enumerate(LAYERS):
        if any(fnmatch(module, p) for p in patterns):
            return i
    return None


def _in_type_checking(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            return True
    return False


def imports_of(path: Path, modules: set[str], me: str | None = None) -> set[str]:
    """The cgprof modules ``path`` (the module ``me``, by default named by its place in the
    repository) imports, at the top or inside functions."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    me = module_name(path) if me is None else me
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Import, ast.ImportFrom)) or _in_type_checking(node, parents):
            continue
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            # `from cgprof.io import cache` imports the module cgprof.io.cache
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                     for a in node.names]
        for name in names:
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name and name != me and name.startswith("cgprof"):
                out.add(name)
    return out


def graph() -> tuple[dict[str, set[str]], dict[str, int]]:
    files = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
    modules = set(files)
    lines = {m: len(p.read_text(encoding="utf-8").splitlines()) for m, p in files.items()}
    return {m: imports_of(p, modules) for m, p in files.items()}, lines


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    sys.setrecursionlimit(10_000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def longest_chain(edges: dict[str, set[str]]) -> list[str]:
    """The longest path of imports (modules in circles counted once)."""
    memo: dict[str, list[str]] = {}

    def walk(v: str, seen: frozenset[str]) -> list[str]:
        if v in memo:
            return memo[v]
        best: list[str] = []
        for w in sorted(edges.get(v, ())):
            if w in seen:
                continue
            path = walk(w, seen | {w})
            if len(path) > len(best):
                best = path
        memo[v] = [v, *best]
        return memo[v]

    return max((walk(v, frozenset({v})) for v in sorted(edges)), key=len, default=[])


def problems() -> list[tuple[str, str]]:
    """(kind, line) for each problem; kind is ``layer`` (a module in no layer, an upward
    import, a stale :data:`KNOWN` entry), ``circle``, ``chain`` or ``size``."""
    edges, lines = graph()
    out: list[tuple[str, str]] = []
    for m in sorted(edges):
        if layer_of(m) is None:
            out.append(("layer", f"{m}: in no layer (add it to LAYERS)"))
    upward: set[tuple[str, str]] = set()
    for m, deps in sorted(edges.items()):
        lm = layer_of(m)
        for d in sorted(deps):
            ld = layer_of(d)
            if lm is not None and ld is not None and ld < lm:
                upward.add((m, d))
                if (m, d) not in KNOWN:
                    out.append(("layer", f"{m} imports {d}: layer {LAYERS[lm][0]} imports "
                                         f"{LAYERS[ld][0]}, above it"))
    for pair in sorted(set(KNOWN) - upward):
        out.append(("layer", f"KNOWN lists {pair[0]} -> {pair[1]}, which is no longer "
                             f"imported: remove it"))
    for group in circles(edges):
        out.append(("circle", f"circle: {', '.join(group)}"))
    chain = longest_chain(edges)
    if len(chain) > MAX_CHAIN:
        out.append(("chain", f"longest chain of imports is {len(chain)} files (at most "
                             f"{MAX_CHAIN}): {' -> '.join(chain)}"))
    for m, n in sorted(lines.items()):
        if n > MAX_LINES:
            out.append(("size", f"{m}: {n} lines (at most {MAX_LINES})"))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graph", action="store_true", help="print every module's imports")
    args = ap.parse_args(argv)
    if args.graph:
        edges, lines = graph()
        for m in sorted(edges):
            layer = layer_of(m)
            name = "?" if layer is None else LAYERS[layer][0]
            print(f"{name:8} {m} ({lines[m]} lines): {', '.join(sorted(edges[m]))}")
        print(f"longest chain: {' -> '.join(longest_chain(edges))}")
    found = problems()
    for _, line in found:
        print(line)
    print(f"{len(found)} problem(s)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
