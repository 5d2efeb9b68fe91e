#!/usr/bin/env python3
"""Prove a refactor kept every cgprof output byte for byte: run the same matrix of real CLI
commands on a base commit and on the working tree, and compare what each printed and wrote.

    python3 scripts/compare_outputs.py BASE_COMMIT [--traces GLOB ...] [--big PATH ...]
                                       [--keep DIR] [--jobs N] [--cases GLOB ...]

The base is a detached ``git worktree`` of BASE_COMMIT in a temporary folder; the current side
is a copy of the working tree's ``cgprof/`` taken at the start (a run of every shipped trace
takes ~18 min on 2 cores: edits made meanwhile must not mix into it). Both go at the end unless
``--keep DIR``, which keeps them, the inputs and every case's files and streams. Each side runs
``python3 -m cgprof ...`` (or a ``-c`` snippet of the public API) with PYTHONPATH = its own tree
(its own ``cgprof`` is imported, never the editable install: checked first), its own fresh
CGPROF_CACHE (no cache leaks between sides), COLUMNS=100, no other CGPROF_* variable, and cwd =
a fresh folder per case with a link ``in`` to one shared read-only folder of inputs: a trace is
named by the same relative string (``in/mlp_train_eager.sqlite``) on both sides, so no path in
any output depends on the side. Compared per case: each command's stdout, stderr and exit status
and the bytes of every file left in the case's folder. One line per case (``--jobs N``: N cases
at a time, printed in order), ``same`` or ``DIFFERENT`` with a unified diff (<= 20 lines) of the
first stream or file that differs, then ``N same, M different``; exit 1 when any differ.
``--cases GLOB``: only the cases printed so.

The matrix, per trace (every shipped ``traces/*.sqlite``, or those matching ``--traces``):
``analyze T`` as text, ``--json out.json``, ``--json -``, ``--html out.html``, the four again
with ``--memory-limit 100MB`` (every whole analysis is estimated above 200 MB: multi-process
traces are read rank by rank, one-process traces a chunk of steps at a time), ``--all-gaps
--json out.json``; ``check T --json out.json`` with a --max and a --min rule and ``check T
--save-baseline base.json``, both also capped; ``cgprof.analyze("in/T.sqlite")`` rendered by
``cgprof.report.json_report.render`` (or, where the base has no such function, each table's
``to_csv``). Multi-process traces (``ddp_*``): ``--rank 0`` and ``--rank 1 --html out.html``.
Each ``X_eager`` with its ``X_graph``: ``diff A B`` as text, ``--json out.json``, ``-o
out.html``, ``check A --save-baseline base.json`` then ``check B --baseline base.json``, each
also capped. One ``diff T T --mode warmup,graph`` on a graph trace (no shipped trace has both
eager and graph steps), only where the base's ``diff --help`` lists ``--mode``. The first two
one-process traces as the ranks of one folder: ``analyze in/ranks --json out.json`` with
``--jobs 1``, ``--jobs 2`` and ``--dask`` (a LocalCluster per side, on that side's PYTHONPATH;
skipped, with the reason printed, when none starts within a minute). Each ``--big PATH``
(linked, not copied, into the inputs): ``analyze --json`` whole and with ``--memory-limit
1GB``, and ``diff BIG BIG --json``. A case that fails, or that the base rejects (a usage
error: exit 2, "Usage:"), is the same only where the other side fails with the same bytes;
its line says so (``exit 1 on both: Error: ...``): the multi-rank ``--html`` and ``-o`` cases,
the ``check`` cases whose rule fails. (Hidden ``--side-b DIR``: compare DIR's ``cgprof/``
instead of the working tree's; the tests use it.)

Masks (applied to both sides alike; the summary counts what each replaced). The only run-time
measurement found in any output of the matrix: analyze/check/diff under ``--memory-limit``
print ``cgprof: note: this run held 0.18 GB at its peak, above --memory-limit 100MB, ...``, the
process's peak RSS (``ru_maxrss``), which differs run to run: ``held <peak> GB at its peak``.
Whether that note is printed is still compared. No wall-clock figure occurs: the progress bar
that shows seconds is drawn only on a terminal (stderr here is a pipe). Absolute paths of a
side's tree or case folder are never masked: a case whose output holds one is flagged
``PATH LEAK`` with the stream named.
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

REPO = Path(__file__).resolve().parents[1]
CAP, BIG_CAP = "100MB", "1GB"
RULES = ["--max", "launch_calls_per_step=2", "--min", "graph_kernel_share=0.5"]
STEP_TIMEOUT_S = 1800
MASKS = [(re.compile(rb"held \d+(?:\.\d+)? GB at its peak"), b"held <peak> GB at its peak")]
DASK_START_S = 60

API = """import json, cgprof
r = cgprof.analyze({path!r})
if {render}:
    from cgprof.report import json_report
    print(json_report.render([r]))
else:  # the tables, top level and one down
    import pandas as pd
    for k, v in sorted(vars(r).items()):
        inner = sorted(vars(v).items()) if hasattr(v, "__dict__") else []
        for n, t in [(k, v), *((k + "." + a, b) for a, b in inner)]:
            if isinstance(t, pd.DataFrame):
                print(n, t.to_csv(), sep="\\n")
"""

DASK = """import sys, distributed
c = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                             dashboard_address=None)
print(c.scheduler_address, flush=True)
sys.stdin.read()
c.close()
"""


@dataclass
class Case:
    name: str
    steps: list[list[str]]  # argv after the interpreter; "{dask}" is the side's scheduler


@dataclass
class Side:
    label: str
    tree: Path
    scratch: Path
    cache: Path
    origin: Path | None = None  # the tree copied into ``tree`` (the working tree)
    dask: str | None = None
    dask_proc: subprocess.Popen | None = None

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CGPROF_")}
        env.update(PYTHONPATH=str(self.tree), CGPROF_CACHE=str(self.cache), COLUMNS="100")
        return env

    def run(self, argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, *argv], cwd=cwd, env=self.env(),
                              capture_output=True, timeout=STEP_TIMEOUT_S)


class Outcome(NamedTuple):
    same: bool
    note: str = ""
    detail: list[str] = []  # never mutated


masked: Counter[str] = Counter()
_lock = threading.Lock()


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(REPO), *args], check=True, capture_output=True,
                          text=True).stdout


def cg(*args: str) -> list[str]:
    return ["-m", "cgprof", *args]


def build_cases(traces: list[str], big: list[str], ranks: str | None, has_mode: bool,
                render: bool) -> list[Case]:
    cases: list[Case] = []

    def add(*args: str, capped: bool = False) -> None:
        cases.append(Case(" ".join(args), [cg(*args)]))
        if capped:
            cases.append(Case(" ".join(args) + f" --memory-limit {CAP}",
                              [cg(*args, "--memory-limit", CAP)]))

    for t in traces:
        for extra in ([], ["--json", "out.json"], ["--json", "-"], ["--html", "out.html"]):
            add("analyze", t, *extra, capped=True)
        add("analyze", t, "--all-gaps", "--json", "out.json")
        if Path(t).name.startswith("ddp_"):
            add("analyze", t, "--rank", "0")
            add("analyze", t, "--rank", "1", "--html", "out.html")
        add("check", t, "--json", "out.json", *RULES, capped=True)
        add("check", t, "--save-baseline", "base.json", capped=True)
        cases.append(Case(f"api cgprof.analyze({t!r})",
                          [["-c", API.format(path=t, render=render)]]))
    for a in traces:
        b = a.replace("_eager.sqlite", "_graph.sqlite")
        if not a.endswith("_eager.sqlite") or b not in traces:
            continue
        add("diff", a, b, capped=True)
        add("diff", a, b, "--json", "out.json", capped=True)
        add("diff", a, b, "-o", "out.html", capped=True)
        for cap in ([], ["--memory-limit", CAP]):
            steps = [cg("check", a, "--save-baseline", "base.json", *cap),
                     cg("check", b, "--baseline", "base.json", *cap)]
            cases.append(Case(" && ".join(" ".join(s[2:]) for s in steps), steps))
    graphs = [t for t in traces if t.endswith("_graph.sqlite") and "ddp_" not in t]
    if has_mode and graphs:
        add("diff", graphs[0], graphs[0], "--mode", "warmup,graph")
    if ranks:
        for jobs in ("1", "2"):
            add("analyze", ranks, "--json", "out.json", "--jobs", jobs)
        cases.append(Case(f"analyze {ranks} --json out.json --dask ADDRESS",
                          [cg("analyze", ranks, "--json", "out.json", "--dask", "{dask}")]))
    for t in big:
        add("analyze", t, "--json", "out.json")
        add("analyze", t, "--json", "out.json", "--memory-limit", BIG_CAP)
        add("diff", t, t, "--json", "out.json")
    return cases


def record(case: Case, side: Side, inputs: Path, n: int, keep: bool) -> dict[str, bytes]:
    """Run the case's commands on one side; every stream and file left, by name."""
    cwd = side.scratch / f"case{n:03d}"
    cwd.mkdir(parents=True)
    (cwd / "in").symlink_to(inputs)
    got: dict[str, bytes] = {}
    for i, argv in enumerate(case.steps):
        argv = [a.replace("{dask}", side.dask or "") for a in argv]
        tag = f"[{i + 1}] " if len(case.steps) > 1 else ""
        try:
            p = side.run(argv, cwd)
            out, err, rc = p.stdout, p.stderr, str(p.returncode)
        except subprocess.TimeoutExpired as exc:
            out, err, rc = exc.stdout or b"", exc.stderr or b"", f"timeout {STEP_TIMEOUT_S} s"
        got[f"{tag}exit status"], got[f"{tag}stdout"], got[f"{tag}stderr"] = rc.encode(), out, err
    for dirpath, dirs, files in os.walk(cwd):
        dirs[:] = sorted(d for d in dirs if not (Path(dirpath) == cwd and d == "in"))
        for f in sorted(files):
            got[f"file {Path(dirpath, f).relative_to(cwd)}"] = Path(dirpath, f).read_bytes()
    if keep:  # the streams beside the files, for a look afterwards
        for key, data in got.items():
            if not key.startswith("file "):
                Path(cwd, "_" + re.sub(r"\W+", "_", key).strip("_")).write_bytes(data)
    else:
        shutil.rmtree(cwd)
    for key, data in got.items():
        for pattern, repl in MASKS:
            data, hits = pattern.subn(repl, data)
            if hits:
                with _lock:
                    masked[repl.decode()] += hits
        got[key] = data
    return got


def leaks(got: dict[str, bytes], side: Side) -> list[str]:
    roots = {str(p) for p in (side.tree, side.origin, side.scratch, side.cache) if p}
    return [f"PATH LEAK: {side.label} {key} holds {root}" for key, data in got.items()
            for root in sorted(roots) if root.encode() in data]


def first(x: list[str] | str, y: list[str] | str) -> int:
    """Index of the first item that differs (the shorter length if one is a prefix)."""
    return next((k for k, (p, q) in enumerate(zip(x, y, strict=False)) if p != q),
                min(len(x), len(y)))


def snippet(key: str, a: bytes | None, b: bytes | None) -> list[str]:
    """At most 20 lines of unified diff around the first line that differs."""
    if a is None or b is None:
        return [f"{key}: only in {'current' if a is None else 'base'}"]
    la = a.decode("utf-8", "replace").splitlines()
    lb = b.decode("utf-8", "replace").splitlines()
    i = first(la, lb)
    col = first(la[i] if i < len(la) else "", lb[i] if i < len(lb) else "")
    lo = max(0, col - 80)

    def clip(s: str) -> str:
        return s if len(s) <= 200 else ("..." if lo else "") + s[lo:lo + 200] + "..."

    lines = [f"--- base {key}", f"+++ current {key}",
             f"@@ first difference: line {i + 1}, column {col + 1} @@"]
    lines += [" " + clip(s) for s in la[max(0, i - 2):i]]
    minus = [f"-{clip(s)}" for s in la[i:i + 4]]
    plus = [f"+{clip(s)}" for s in lb[i:i + 4]]
    return (lines + minus + plus)[:20]


def run_case(case: Case, n: int, sides: tuple[Side, Side], inputs: Path,
             keep: bool) -> Outcome:
    dask = "{dask}" in str(case.steps)  # a LocalCluster per side, for this case only
    try:
        why = dask and (start_dask(sides[0]) or start_dask(sides[1]))
        if why:
            return Outcome(True, f"skipped: {why}")
        a, b = (record(case, s, inputs, n, keep) for s in sides)
    finally:
        for s in sides if dask else ():
            stop_dask(s)
    notes = leaks(a, sides[0]) + leaks(b, sides[1])
    if a == b:
        tag = f"[{len(case.steps)}] " if len(case.steps) > 1 else ""
        rc, err = a.get(f"{tag}exit status", b"0").decode(), a.get(f"{tag}stderr", b"").decode()
        why = (err.strip().splitlines() or [""])[-1][:160]
        usage = "usage error, " if rc == "2" and "Usage:" in err else ""
        return Outcome(True, f"{usage}exit {rc} on both{': ' * bool(why)}{why}" * (rc != "0"),
                       notes)
    key = next(k for k in [*a, *b] if a.get(k) != b.get(k))
    if key.endswith("exit status"):  # and why: each side's last line of stderr
        err = key.replace("exit status", "stderr")
        notes += [f"{s.label} {err}: {(g.get(err) or b'').decode().strip().splitlines()[-1:]}"
                  for s, g in zip(sides, (a, b), strict=True)]
    return Outcome(False, "", notes + snippet(key, a.get(key), b.get(key)))


def start_dask(side: Side) -> str | None:
    """A LocalCluster on the side's PYTHONPATH; None (and a printed reason) when none starts."""
    try:
        p = subprocess.Popen([sys.executable, "-c", DASK], env=side.env(), cwd=side.scratch,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    except OSError as exc:
        return f"cannot start python: {exc}"
    side.dask_proc = p
    line: list[str] = []
    reader = threading.Thread(target=lambda: line.append(p.stdout.readline()), daemon=True)
    reader.start()
    reader.join(DASK_START_S)
    if line and line[0].startswith("tcp://"):
        side.dask = line[0].strip()
        return None
    return f"{side.label}: no LocalCluster within {DASK_START_S} s (exit {p.poll()})"


def stop_dask(side: Side) -> None:
    p, side.dask_proc, side.dask = side.dask_proc, None, None
    if p is not None and p.poll() is None:
        try:
            p.stdin.close()
            p.wait(30)
        except (OSError, subprocess.TimeoutExpired):
            os.killpg(p.pid, 9)  # the session this script started for it
            p.wait()


def prepare_inputs(inputs: Path, traces: list[Path], big: list[str]) -> tuple[Any, ...]:
    """The shared inputs: the traces, a folder of two of them, links to the big ones."""
    inputs.mkdir(parents=True)
    for t in traces:
        shutil.copyfile(t, inputs / t.name)
    ones = [t for t in traces if not t.name.startswith("ddp_")][:2]
    ranks = None
    if len(ones) == 2:
        (inputs / "ranks").mkdir()
        for t in ones:
            shutil.copyfile(t, inputs / "ranks" / t.name)
        ranks = "in/ranks"
    bigs = []
    for i, b in enumerate(big):
        (inputs / "big").mkdir(exist_ok=True)
        link = inputs / "big" / f"{i}_{Path(b).name}"
        link.symlink_to(Path(b).resolve())
        bigs.append(f"in/big/{link.name}")
    subprocess.run(["chmod", "-R", "a-w", str(inputs)], check=True)  # read-only on both sides
    return [f"in/{t.name}" for t in traces], ranks, bigs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("base", metavar="BASE_COMMIT")
    ap.add_argument("--traces", nargs="+", action="extend", metavar="GLOB",
                    help="shipped traces to use (file-name globs; default all)")
    ap.add_argument("--big", nargs="+", action="extend", default=[], metavar="PATH",
                    help="extra large traces: analyze --json whole and capped, diff with itself")
    ap.add_argument("--keep", metavar="DIR", help="work in DIR (new) and keep it")
    ap.add_argument("--jobs", type=int, default=1, metavar="N", help="cases run at once")
    ap.add_argument("--cases", nargs="+", action="extend", metavar="GLOB",
                    help="only the cases whose printed command matches one of these globs")
    ap.add_argument("--side-b", help=argparse.SUPPRESS)  # a tree to compare instead of REPO
    args = ap.parse_args(argv)
    try:
        base = git("rev-parse", "--verify", "--quiet", f"{args.base}^{{commit}}").strip()
    except subprocess.CalledProcessError:
        ap.error(f"{args.base}: not a commit")
    shipped = sorted((REPO / "traces").glob("*.sqlite"))
    traces = [t for t in shipped if not args.traces
              or any(fnmatch.fnmatch(t.name, g) or fnmatch.fnmatch(f"traces/{t.name}", g)
                     for g in args.traces)]
    if not traces and not args.big:
        ap.error(f"no shipped trace matches {args.traces}")
    if args.keep:
        root = Path(args.keep).resolve()
        if root.exists():
            ap.error(f"--keep {args.keep}: exists (give a new folder)")
        root.mkdir(parents=True)
    else:
        root = Path(tempfile.mkdtemp(prefix="cgprof-compare-"))
    tree_a, origin = root / "base", Path(args.side_b or REPO).resolve()
    sides = (Side("base", tree_a, root / "a", root / "cache-a"),
             Side("current", root / "current", root / "b", root / "cache-b", origin))
    worktree = False
    try:
        git("worktree", "add", "--detach", str(tree_a), base)
        worktree = True
        shutil.copytree(origin / "cgprof", root / "current" / "cgprof",
                        ignore=shutil.ignore_patterns("__pycache__"))
        names, ranks, bigs = prepare_inputs(root / "in", traces, args.big)
        for s in sides:
            s.scratch.mkdir()
            got = s.run(["-c", "import cgprof; print(cgprof.__file__)"], s.scratch)
            where = got.stdout.decode().strip()
            if got.returncode or not Path(where).resolve().is_relative_to(s.tree.resolve()):
                print(f"{s.label}: imports cgprof from {where or got.stderr.decode()!r}, not "
                      f"from {s.tree}", file=sys.stderr)
                return 2
        has_mode = "--mode" in sides[0].run(cg("diff", "--help"), root).stdout.decode()
        src = git("show", f"{base}:cgprof/report/json_report.py")
        render = re.search(r"^def render\(results", src, re.M) is not None
        cases = build_cases(names, bigs, ranks, has_mode, render)
        if args.cases:
            cases = [c for c in cases if any(fnmatch.fnmatch(c.name, g) for g in args.cases)]
        print(f"base {base[:12]} ({tree_a}) against {origin}'s cgprof/ as it was at the start "
              f"({sides[1].tree}): {len(cases)} cases"
              f", {len(traces)} traces{'' if has_mode else '; base diff has no --mode'}"
              f"{'' if render else '; api: to_csv (base has no json_report.render)'}")
        with ThreadPoolExecutor(max(1, args.jobs)) as pool:
            results = pool.map(lambda nc: run_case(nc[1], nc[0], sides, root / "in", bool(
                args.keep)), enumerate(cases))
            same = diff = 0
            for case, res in zip(cases, results, strict=True):
                same, diff = same + res.same, diff + (not res.same)
                note = f"  ({res.note})" if res.note else ""
                print(f"{'same' if res.same else 'DIFFERENT':9}  {case.name}{note}", flush=True)
                for line in res.detail:
                    print(f"    {line}", flush=True)
        for repl, hits in sorted(masked.items()):
            print(f"masked {hits}x: {repl}")
        print(f"{same} same, {diff} different")
        return 1 if diff else 0
    finally:
        for s in sides:
            stop_dask(s)
        if args.keep:
            print(f"kept {root} (git worktree remove --force {tree_a})")
        else:
            subprocess.run(["chmod", "-R", "u+w", str(root)], check=False)  # the inputs
            if worktree:
                git("worktree", "remove", "--force", str(tree_a))
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
