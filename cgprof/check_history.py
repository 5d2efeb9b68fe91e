"""A SQLite log of checked runs (``cgprof check --history FILE``): one row per run and rank,
with its figures, verdict and commit, read back by ``cgprof check --show-history``."""

from __future__ import annotations

import re
import sqlite3
import subprocess
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from cgprof.check import FIGURES, CheckConfigError, CheckResult


def git_commit(cwd: Path | None = None) -> str | None:
    """``git rev-parse HEAD`` in ``cwd``, or None outside a repository / without git."""
    try:
        proc = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True,
                              text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    out = proc.stdout.strip()
    return out if proc.returncode == 0 and re.fullmatch(r"[0-9a-f]{7,64}", out) else None


def _history_tables(conn: sqlite3.Connection) -> set[str]:
    try:
        rows = conn.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall()
    except sqlite3.DatabaseError:
        return {"<not sqlite>"}
    return {r[0] for r in rows}


def _open_read_only(path: Path) -> sqlite3.Connection:
    """A read-only connection to a history database, or one line saying why not."""
    try:
        return sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise CheckConfigError(f"{path}: cannot open: {exc}") from None


def check_history_file(path: Path) -> None:
    """Refuse a file that exists but is not a cgprof history database (e.g. a trace)."""
    if not path.exists():
        if not path.parent.is_dir():
            raise CheckConfigError(f"{path}: folder {path.parent} does not exist")
        return
    if not path.is_file():
        raise CheckConfigError(f"{path}: not a file")
    if path.stat().st_size == 0:
        return
    conn = _open_read_only(path)
    try:
        tables = _history_tables(conn)
    finally:
        conn.close()
    if tables and "runs" not in tables:
        raise CheckConfigError(
            f"{path}: not a cgprof history database (no 'runs' table); give a new file")


def append_history(path: Path, result: CheckResult, commit: str | None,
                   when: datetime | None = None) -> int:
    """Append one run (figures, pass/fail counts) and its rule results; returns the run id.

    Tables: ``runs`` (id, time_utc, commit, source, baseline, passed, failed, FIGURE...) and
    ``rules`` (run_id, rule, figure, op, status, value, limit, baseline), one transaction.

    A check of several ranks appends one ``runs`` row per rank, with consecutive ids (the
    first is returned) and the rank in a ``rank`` column, each with that rank's figures, its
    rules' pass/fail counts and its ``rules`` rows. The column is added to an older database
    on the first such run (``ALTER TABLE ... ADD COLUMN``); single-rank runs leave it NULL, so
    old databases stay readable and old rows keep their meaning.
    """
    import sqlite_utils

    check_history_file(path)
    when = when or datetime.now(timezone.utc)
    parts = ([(rank, result.for_rank(rank)) for rank in result.ranks]
             if result.ranks is not None else [(None, result)])
    columns = {"id": int, "time_utc": str, "commit": str, "source": str, "baseline": str,
               "passed": int, "rules_failed": int, "rules_passed": int,
               **{k: float for k in FIGURES}}
    if result.ranks is not None:
        columns["rank"] = int
    db = sqlite_utils.Database(path)
    ids: list[int] = []
    try:
        with db.conn:
            runs = db.table("runs")
            if not runs.exists():
                runs.create(columns, pk="id")
            for rank, part in parts:
                counts = part.counts()
                row: dict[str, Any] = {
                    "time_utc": when.strftime("%Y-%m-%dT%H:%M:%SZ"),
                    "commit": commit,
                    "source": result.source,
                    "baseline": result.baseline_source,
                    "passed": int(part.passed),
                    "rules_failed": counts["fail"],
                    "rules_passed": counts["pass"],
                }
                row.update({k: part.figures.get(k) for k in FIGURES})
                if rank is not None:
                    row["rank"] = rank
                run_id = int(runs.insert(row, alter=True).last_pk or 0)
                ids.append(run_id)
                db.table("rules").insert_all(
                    [{"run_id": run_id, "rule": r.rule.name, "figure": r.rule.figure,
                      "op": r.rule.op, "status": r.status, "value": r.value, "limit": r.limit,
                      "baseline": r.baseline} for r in part.results],
                    columns={"run_id": int, "rule": str, "figure": str, "op": str,
                             "status": str, "value": float, "limit": float,
                             "baseline": float},
                    foreign_keys=([("run_id", "runs", "id")] if not db["rules"].exists()
                                  else None))
    finally:
        db.close()
    return ids[0]


def read_history(path: Path) -> list[dict[str, Any]]:
    """Every run in a history database, oldest first (opened read-only)."""
    import sqlite_utils

    if not path.is_file():
        raise CheckConfigError(f"{path}: history database not found")
    conn = _open_read_only(path)
    try:
        tables = _history_tables(conn)
        if "runs" not in tables:
            raise CheckConfigError(
                f"{path}: not a cgprof history database (no 'runs' table)")
        db = sqlite_utils.Database(conn)
        return list(db.query("SELECT * FROM runs ORDER BY id"))
    except sqlite3.DatabaseError as exc:
        raise CheckConfigError(f"{path}: cannot read: {exc}") from None
    finally:
        conn.close()
