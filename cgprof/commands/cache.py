"""`cgprof cache info|clear`: the columnar copies cgprof keeps of analysed traces."""

from __future__ import annotations

import json

import click


@click.group("cache")
def command() -> None:
    """Show or clear cgprof's columnar cache ($CGPROF_CACHE, else the user cache folder)."""


@command.command("info")
@click.option("--json", "as_json", is_flag=True, help="One JSON document on stdout.")
def info(as_json: bool) -> None:
    """Where the cache is, and one line per cached trace."""
    from cgprof.io import cache

    rows = cache.entries()
    total = sum(r["bytes"] for r in rows)
    if as_json:
        click.echo(json.dumps({"path": str(cache.cache_dir()), "entries": rows,
                               "bytes": total}, sort_keys=True))
        return
    click.echo(f"cache: {cache.cache_dir()}")
    click.echo(f"{len(rows)} trace(s), {total / 1e6:.1f} MB")
    for r in rows:
        click.echo(f"  {r['key']}  {r['bytes'] / 1e6:8.1f} MB  {r['created'] or '?'}  "
                   f"{r['source'] or '?'}" + (f" ({r['part']})" if r.get("part") else "")
                   + (" (nsys columns, from a run within --memory-limit: the next whole run"
                      " adds its tables as built)" if r.get("columns_only") else ""))


@command.command("clear")
def clear() -> None:
    """Remove every cached trace."""
    from cgprof.io import cache

    n = cache.clear()
    click.echo(f"removed {n} cached trace(s) from {cache.cache_dir()}")
