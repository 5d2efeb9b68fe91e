#!/usr/bin/env python3
"""Damage copies of a shipped trace and check that `cgprof analyze COPY --json -` copes.

Every damaged copy must give one of two outcomes, never a third:

* exit 0 with valid JSON on stdout (and nothing on stderr), or
* a non-zero exit with nothing on stdout and exactly one line on stderr that starts with
  ``Error: `` and names the file (no traceback);

and the copy's bytes must be unchanged afterwards (cgprof opens traces read-only).

Kinds of damage (seeded, so a failure is reproducible with the same ``--seed``): random
bytes, random pages overwritten, truncation, a dropped table, NULLs, negative numbers,
duplicated rows, text in number columns. The last four change cells of the tables cgprof
reads; where nsys declared a column NOT NULL (or a key), the table is first rebuilt without
the constraint, as a damaged or hand-edited export could be.

    python3 scripts/fuzz_traces.py --n 300 --seed 1             # in-process (click's runner)
    python3 scripts/fuzz_traces.py --n 40 --seed 1 --subprocess # real `python3 -m cgprof`

Prints one line per failing copy and a summary (outcomes per kind of damage); exit 1 when
any copy failed. tests/test_fuzz.py runs a few dozen copies of the same generator in CI.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TRACE = REPO / "traces" / "mlp_infer_graph.sqlite"
KINDS = ("bytes", "pages", "truncate", "drop_table", "nulls", "negative", "duplicate", "text")
PAGE = 4096


@dataclass
class Outcome:
    """What one damaged copy did. ``problem`` is None when the outcome is acceptable."""

    index: int
    kind: str
    detail: str
    exit_code: int
    result: str  # "json" (analysed), "error" (one clean line), or "bad"
    problem: str | None
    first_line: str


# ---------------------------------------------------------------------------------------------
# damage


def _tables(path: Path) -> dict[str, list[tuple[str, str]]]:
    """Tables cgprof reads that exist in ``path``: name -> [(column, declared type)]."""
    sys.path.insert(0, str(REPO))
    from cgprof.schema import TABLES_READ

    with sqlite3.connect(path) as conn:
        names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        out = {}
        for t in names:
            if t in TABLES_READ:
                out[t] = [(r[1], str(r[2]).upper())
                          for r in conn.execute(f'PRAGMA table_info("{t}")')]
    conn.close()
    return out


def _loosen(conn: sqlite3.Connection, table: str) -> None:
    """Rebuild ``table`` without NOT NULL, keys or indexes (CREATE TABLE AS keeps none)."""
    conn.execute(f'CREATE TABLE "_loose" AS SELECT * FROM "{table}"')
    conn.execute(f'DROP TABLE "{table}"')
    conn.execute(f'ALTER TABLE "_loose" RENAME TO "{table}"')


def _cells(conn: sqlite3.Connection, rng: random.Random, tables, want_int: bool
           ) -> tuple[str, str, list[int]]:
    """A random (table, column, rowids) to change: a non-empty table, a column of it."""
    candidates = [t for t in tables
                  if conn.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] > 0]
    events = [t for t in candidates if t.startswith(("CUPTI_", "NVTX_"))]
    # Half the time aim at the cells every analysis depends on: event times and join keys.
    if want_int and events and rng.random() < 0.5:
        table = rng.choice(sorted(events))
        col = rng.choice([c for c, _ in tables[table]
                          if c in ("start", "end", "correlationId", "globalTid", "globalPid")])
    else:
        table = rng.choice(sorted(candidates))
        cols = [c for c, decl in tables[table] if "INT" in decl] if want_int else []
        col = rng.choice(cols or [c for c, _ in tables[table]])
    rowids = [r[0] for r in conn.execute(f'SELECT rowid FROM "{table}"')]
    k = rng.choice([1, 1, 2, 5, max(1, len(rowids) // 10), len(rowids)])
    return table, col, rng.sample(rowids, min(k, len(rowids)))


def _update(conn, table: str, col: str, rowids: list[int], expr: str) -> None:
    marks = ",".join("?" * len(rowids))
    sql = f'UPDATE "{table}" SET "{col}" = {expr} WHERE rowid IN ({marks})'
    try:
        conn.execute(sql, rowids)
    except sqlite3.IntegrityError:  # NOT NULL / UNIQUE / PRIMARY KEY
        _loosen(conn, table)
        conn.execute(sql, rowids)


def damage(src: Path, dst: Path, kind: str, rng: random.Random) -> str:
    """Write a damaged copy of ``src`` to ``dst``; return a short description of the damage."""
    shutil.copyfile(src, dst)
    dst.chmod(0o644)
    size = dst.stat().st_size
    if kind in ("bytes", "pages", "truncate"):
        data = bytearray(dst.read_bytes())
        if kind == "bytes":
            n = rng.choice([1, 4, 16, 64])
            offsets = sorted(rng.randrange(size) for _ in range(n))
            for off in offsets:
                data[off] = rng.randrange(256)
            detail = f"{n} random bytes from offset {offsets[0]}"
        elif kind == "pages":
            pages = rng.sample(range(size // PAGE), rng.choice([1, 2, 3]))
            for p in pages:
                data[p * PAGE:(p + 1) * PAGE] = rng.randbytes(PAGE)
            detail = f"pages {sorted(pages)} overwritten"
        else:
            keep = rng.randrange(0, size)
            del data[keep:]
            detail = f"truncated to {keep} of {size} bytes"
        dst.write_bytes(bytes(data))
        return detail
    tables = _tables(dst)
    conn = sqlite3.connect(dst)
    try:
        if kind == "drop_table":
            table = rng.choice(sorted(tables))
            conn.execute(f'DROP TABLE "{table}"')
            detail = f"dropped {table}"
        elif kind == "duplicate":
            table, _, rowids = _cells(conn, rng, tables, want_int=False)
            marks = ",".join("?" * len(rowids))
            sql = f'INSERT INTO "{table}" SELECT * FROM "{table}" WHERE rowid IN ({marks})'
            try:
                conn.execute(sql, rowids)
            except sqlite3.IntegrityError:
                _loosen(conn, table)
                conn.execute(sql, rowids)
            detail = f"{len(rowids)} rows of {table} duplicated"
        else:
            table, col, rowids = _cells(conn, rng, tables, want_int=True)
            expr = {"nulls": "NULL", "negative": f'-abs("{col}") - {rng.choice([1, 1000])}',
                    "text": "'x'"}[kind]
            _update(conn, table, col, rowids, expr)
            detail = f"{table}.{col} = {expr} in {len(rowids)} rows"
        conn.commit()
    finally:
        conn.close()
    return detail


# ---------------------------------------------------------------------------------------------
# running cgprof on a copy and judging the outcome


def _md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


def judge(path: Path, code: int, stdout: str, stderr: str) -> tuple[str, str | None]:
    """("json" | "error" | "bad", problem or None) for one run's exit code and streams."""
    if "Traceback" in stdout or "Traceback" in stderr:
        last = (stderr.strip().splitlines() or ["?"])[-1]
        return "bad", f"traceback: {last[:200]}"
    if code == 0:
        try:
            json.loads(stdout)
        except ValueError as exc:
            return "bad", f"exit 0 but stdout is not JSON ({exc})"
        if stderr:
            return "bad", f"exit 0 with stderr {stderr[:200]!r}"
        return "json", None
    if stdout:
        return "bad", f"exit {code} with stdout {stdout[:200]!r}"
    if not stderr.endswith("\n") or stderr.count("\n") != 1:
        return "bad", f"exit {code}, stderr is not one line: {stderr[:300]!r}"
    if not stderr.startswith("Error: "):
        return "bad", f"exit {code}, stderr does not start with 'Error: ': {stderr[:200]!r}"
    if str(path) not in stderr:
        return "bad", f"exit {code}, the error does not name the file: {stderr[:200]!r}"
    return "error", None


def run_cli(path: Path, subprocess_mode: bool, timeout_s: float = 120) -> tuple[int, str, str]:
    """`cgprof analyze PATH --json -`: (exit code, stdout, stderr)."""
    args = ["analyze", str(path), "--json", "-"]
    if subprocess_mode:
        env = dict(os.environ)
        env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
        try:
            proc = subprocess.run([sys.executable, "-m", "cgprof", *args], capture_output=True,
                                  text=True, timeout=timeout_s, env=env, cwd=REPO)
        except subprocess.TimeoutExpired:
            return -1, "", f"timed out after {timeout_s} s\n"
        return proc.returncode, proc.stdout, proc.stderr
    sys.path.insert(0, str(REPO))
    from click.testing import CliRunner

    from cgprof.cli import main

    res = CliRunner().invoke(main, args)
    stderr = res.stderr
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        import traceback

        stderr += "".join(traceback.format_exception(res.exception))
    return res.exit_code, res.stdout, stderr


def fuzz_one(src: Path, folder: Path, index: int, seed: int, subprocess_mode: bool,
             kind: str | None = None) -> Outcome:
    """Damage copy number ``index`` (kind and damage drawn from ``seed`` and ``index``)."""
    rng = random.Random(f"{seed}:{index}")
    kind = kind or KINDS[index % len(KINDS)]
    copy = folder / f"copy{index:04d}.sqlite"
    detail = damage(src, copy, kind, rng)
    before = _md5(copy)
    code, out, err = run_cli(copy, subprocess_mode)
    result, problem = judge(copy, code, out, err)
    if problem is None and _md5(copy) != before:
        result, problem = "bad", "the input copy was changed"
    first = (err.splitlines() or [""])[0] if code else "ok"
    copy.unlink()
    return Outcome(index, kind, detail, code, result, problem, first)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=300, help="damaged copies to make [300]")
    ap.add_argument("--seed", type=int, default=0, help="random seed [0]")
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE, help="trace to damage")
    ap.add_argument("--subprocess", action="store_true",
                    help="run each copy through a real `python3 -m cgprof` (slower)")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    outcomes = []
    with tempfile.TemporaryDirectory(prefix="cgprof-fuzz-") as tmp:
        for i in range(args.n):
            o = fuzz_one(args.trace, Path(tmp), i, args.seed, args.subprocess)
            outcomes.append(o)
            if o.problem:
                print(f"FAIL copy {i} ({o.kind}: {o.detail}): {o.problem}", flush=True)
    by_kind: dict[str, Counter[str]] = {k: Counter() for k in KINDS}
    for o in outcomes:
        by_kind[o.kind][o.result] += 1
    bad = sum(o.problem is not None for o in outcomes)
    print(f"{args.n} damaged copies of {args.trace.name} (seed {args.seed}, "
          f"{'subprocess' if args.subprocess else 'in-process'}) in "
          f"{time.perf_counter() - t0:.0f} s: "
          f"{sum(o.result == 'json' for o in outcomes)} analysed, "
          f"{sum(o.result == 'error' for o in outcomes)} refused in one line, {bad} bad")
    print(f"  {'damage':<11} {'analysed':>8} {'refused':>8} {'bad':>4}")
    for k in KINDS:
        c = by_kind[k]
        print(f"  {k:<11} {c['json']:>8} {c['error']:>8} {c['bad']:>4}")
    errors = Counter(o.first_line.split(": ", 2)[-1][:70] for o in outcomes if o.result == "error")
    print("  most common refusals:")
    for msg, n in errors.most_common(8):
        print(f"    {n:>4}  {msg}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
