"""Seeded damaged copies of a real nsys SQLite export: GPU records deleted as recordings lose
them, for the completeness tests (tests/test_completeness.py, docs/bad_input.md).

    python3 scripts/damage_trace.py traces/mlp_train_graph.sqlite /tmp/d.sqlite \\
        --table kernel --how block --fraction 0.1 --seed 3

The input is copied to a new file (never written; an existing output is refused) and rows
of one GPU table are deleted from the copy:

- ``block``: one contiguous run of rows (by rowid), as a CUPTI buffer that overflowed drops
  consecutive records;
- ``random``: rows drawn at random;
- ``replay``: every row of one graph replay (the replayed kernels and memsets of one
  ``cudaGraphLaunch`` in a node-level trace, its row in a graph-level one);
- ``replays``: the replays of 2 of every 3 graph launches (the launch's index among the
  trace's replays % 3 != 0);
- ``tail``: the rows that start last, as a recording stopped before its buffers were flushed.

``--table kernel`` deletes CUPTI_ACTIVITY_KIND_KERNEL rows (with a node-level trace's
replayed memsets for ``replay``/``replays``); ``--table graph_trace`` deletes
CUPTI_ACTIVITY_KIND_GRAPH_TRACE rows. The printed (and returned) manifest says what went: the
deleted eager kernels' launches, and per replay its kernels + memsets before and after, so
that a test can work out what a completeness check must find without running one.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sqlite3
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

HOWS = ("block", "random", "replay", "replays", "tail")
TABLES = {"kernel": "CUPTI_ACTIVITY_KIND_KERNEL", "graph_trace": "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"}
_RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
_MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
_PID = "(globalTid & -16777216)"  # a RUNTIME row's globalPid


@dataclass
class Damage:
    """What :func:`damage` deleted from the copy.

    table, how, seed, fraction   as asked
    rows                          rows deleted from ``table`` (and memsets, for replays)
    eager_launches                kernel launch calls whose (only) kernel was deleted
    replays                       per graph launch (its correlationId as text): [nodes before,
                                  nodes after] (kernels + memsets of a node-level replay;
                                  the GRAPH_TRACE row, 1 or 0, of a graph-level one)
    """

    table: str
    how: str
    seed: int
    fraction: float
    rows: int = 0
    eager_launches: int = 0
    replays: dict[str, list[int]] = field(default_factory=dict)


def _tables(conn: sqlite3.Connection) -> set[str]:
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def _graph_launches(conn: sqlite3.Connection) -> list[tuple[int, int]]:
    """(pid-bits globalPid, correlationId) of every graph launch call, in start order."""
    return conn.execute(
        f"SELECT {_PID}, r.correlationId FROM {_RUNTIME} r JOIN StringIds s ON s.id = r.nameId "
        "WHERE r.eventClass IN (0, 1) AND (s.value LIKE 'cudaGraphLaunch%' OR s.value LIKE "
        "'cuGraphLaunch%') ORDER BY r.start").fetchall()


def _replay_rows(conn: sqlite3.Connection, table: str, tables: set[str]) -> list[
        tuple[str, int, int, int]]:
    """(table, rowid, globalPid, correlationId) of each replay row: GRAPH_TRACE rows, or a
    node-level trace's kernels and memsets with a graph node id."""
    if table == TABLES["graph_trace"]:
        return [(table, *r) for r in conn.execute(
            f"SELECT rowid, globalPid, correlationId FROM {table}")]
    out = []
    for t in (table, _MEMSET):
        if t in tables:
            out += [(t, *r) for r in conn.execute(
                f"SELECT rowid, globalPid, correlationId FROM {t} WHERE graphNodeId IS NOT NULL")]
    return out


def damage(src: Path, dst: Path, table: str = "kernel", how: str = "block", seed: int = 0,
           fraction: float = 0.1) -> Damage:
    """Copy ``src`` to ``dst`` (a new file) and delete rows of ``table`` (a key of TABLES)
    from the copy as ``how`` says (HOWS; ``fraction``: the share of the table's rows that
    ``block``, ``random`` and ``tail`` delete). Returns the manifest."""
    src, dst = Path(src), Path(dst)
    if how not in HOWS or table not in TABLES:
        raise ValueError(f"how must be one of {HOWS}, table one of {sorted(TABLES)}")
    if dst.exists():
        raise FileExistsError(f"{dst} exists; will not overwrite it")
    if src.resolve() == dst.resolve():
        raise ValueError("the output must be a new file, not the input")
    shutil.copyfile(src, dst)
    dst.chmod(0o644)
    name = TABLES[table]
    rng = random.Random(seed)
    out = Damage(table=table, how=how, seed=seed, fraction=fraction)
    conn = sqlite3.connect(dst)
    try:
        tables = _tables(conn)
        if name not in tables:
            raise ValueError(f"{src} has no table {name}")
        launches = _graph_launches(conn)
        replay_rows = _replay_rows(conn, name, tables)
        before: dict[tuple[int, int], int] = {}
        for _, _, pid, corr in replay_rows:
            before[(pid, corr)] = before.get((pid, corr), 0) + 1
        launch_keys = {k for k in launches}
        doomed: list[tuple[str, int]] = []
        if how in ("replay", "replays"):
            replayed = [k for k in launches if k in before]
            if how == "replay":
                chosen = {rng.choice(replayed)} if replayed else set()
            else:
                chosen = {k for i, k in enumerate(replayed) if i % 3 != 0}
            doomed = [(t, rowid) for t, rowid, pid, corr in replay_rows if (pid, corr) in chosen]
        else:
            rowids = [r[0] for r in conn.execute(f"SELECT rowid FROM {name} ORDER BY start, rowid")]
            n = max(1, round(fraction * len(rowids)))
            if how == "tail":
                picked = rowids[-n:]
            elif how == "random":
                picked = rng.sample(rowids, n)
            else:  # a contiguous run of rowids
                ordered = sorted(rowids)
                first = rng.randrange(0, len(ordered) - n + 1)
                picked = ordered[first:first + n]
            doomed = [(name, r) for r in picked]
        # what goes, before it goes: eager kernels' launch calls, replay rows per launch
        eager: set[tuple[int, int]] = set()
        after = dict(before)
        by_table: dict[str, list[int]] = {}
        for t, rowid in doomed:
            by_table.setdefault(t, []).append(rowid)
        for t, rowids in by_table.items():
            for i in range(0, len(rowids), 500):
                part = rowids[i:i + 500]
                marks = ",".join("?" * len(part))
                node = "graphNodeId" if t != TABLES["graph_trace"] else "1"
                for pid, corr, in_graph in conn.execute(
                        f"SELECT globalPid, correlationId, {node} IS NOT NULL FROM {t} "
                        f"WHERE rowid IN ({marks})", part):
                    if t == TABLES["graph_trace"] or in_graph:
                        if (pid, corr) in after:
                            after[(pid, corr)] -= 1
                    else:
                        eager.add((pid, corr))
                conn.execute(f"DELETE FROM {t} WHERE rowid IN ({marks})", part)
        out.rows = len(doomed)
        kernel_launch = {tuple(r) for r in conn.execute(
            f"SELECT {_PID}, r.correlationId FROM {_RUNTIME} r JOIN StringIds s "
            "ON s.id = r.nameId WHERE r.eventClass IN (0, 1) AND (s.value LIKE 'cudaLaunchKernel%'"
            " OR s.value LIKE 'cuLaunchKernel%' OR s.value LIKE 'cudaLaunchCooperativeKernel%')")}
        out.eager_launches = len(eager & kernel_launch)
        out.replays = {str(corr): [before[(pid, corr)], after[(pid, corr)]]
                       for pid, corr in launches if (pid, corr) in before
                       and (pid, corr) in launch_keys}
        conn.commit()
    finally:
        conn.close()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src", type=Path, help="a shipped SQLite export (read only)")
    ap.add_argument("dst", type=Path, help="the damaged copy to write (a new file)")
    ap.add_argument("--table", choices=sorted(TABLES), default="kernel")
    ap.add_argument("--how", choices=HOWS, default="block")
    ap.add_argument("--fraction", type=float, default=0.1,
                    help="share of the table's rows block, random and tail delete")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    try:
        d = damage(args.src, args.dst, args.table, args.how, args.seed, args.fraction)
    except (ValueError, FileExistsError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(asdict(d), sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
