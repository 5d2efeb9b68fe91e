"""JSON rendering of analysis results: every table, integers kept exact, ``schema_version``."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

import numpy as np
import pandas as pd

from cgprof import __version__


def _scalar(v: Any) -> Any:
    if v is None or v is pd.NA or v is pd.NaT:
        return None
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating, float)):
        f = float(v)
        return None if math.isnan(f) else (f if not math.isinf(f) else ("inf" if f > 0 else "-inf"))
    if isinstance(v, np.bool_):
        return bool(v)
    return v


def frame_records(df: pd.DataFrame) -> list[dict[str, Any]]:
    """DataFrame -> list of dicts with plain Python scalars (NA -> None, ints stay ints)."""
    cols = list(df.columns)
    out = []
    arrays = [df[c].astype(object).to_numpy() for c in cols]
    for i in range(len(df)):
        out.append({c: _scalar(arrays[j][i]) for j, c in enumerate(cols)})
    return out


class _Table:
    """A DataFrame to be written as a JSON array of records by pandas' C encoder.

    Building millions of Python dicts for ``json.dumps`` costs seconds and gigabytes; the
    document is dumped with placeholders and each table's JSON is spliced in after.
    """

    def __init__(self, df: pd.DataFrame) -> None:
        df = df[sorted(df.columns)]
        for c in df.columns:
            if pd.api.types.is_float_dtype(df[c].dtype):
                v = df[c].astype("float64")
                if np.isinf(v.to_numpy(na_value=np.nan)).any():
                    df = df.assign(**{c: v.astype(object).where(~np.isinf(v.fillna(0)),
                                                               v.map(_scalar))})
            elif isinstance(df[c].dtype, pd.CategoricalDtype) or df[c].dtype == object:
                df = df.assign(**{c: df[c].astype(object)})
        self.df = df

    def to_json(self) -> str:
        if self.df.empty:
            return "[]"
        return self.df.to_json(orient="records", double_precision=15, force_ascii=False)


def result_to_dict(result: Any, _lazy: bool = False) -> dict[str, Any]:
    """The document ``cgprof analyze --json`` writes for one trace, as plain Python objects.

    (``_lazy``: tables stay ``_Table`` objects for :func:`render`'s fast path.)
    """
    from cgprof.metrics import JSON_SCHEMA_VERSION

    table: Any = _Table if _lazy else frame_records

    g, r, s = result.gaps, result.replays, result.steps
    return {
        "schema_version": JSON_SCHEMA_VERSION,
        "cgprof_version": __version__,
        "trace": {k: _scalar(v) if not isinstance(v, (list, dict)) else v
                  for k, v in result.info.items()},
        "verdict": {k: _scalar(v) if not isinstance(v, (list, dict)) else v
                    for k, v in dataclasses.asdict(result.verdict).items()},
        "coverage": {
            "summary": {k: _scalar(v) for k, v in result.coverage.summary.items()},
            "eager_top": table(result.coverage.eager_top),
            "eager_per_step": {k: _scalar(v) for k, v in result.coverage.eager_per_step.items()},
            "recapture_steps": list(result.coverage.recapture_steps),
            "fallback_steps": list(result.coverage.fallback_steps),
        },
        "summaries_scope": "whole trace, as nsys stats",
        "launches": table(result.launches),
        "api_summary": table(result.api_summary),
        "kernel_summary": table(result.kernel_summary),
        "nvtx_summary": table(result.nvtx_summary),
        "gpu": {
            "devices": table(g.devices),
            "gaps_by_kind": table(g.by_kind),
            "gap_histogram": table(g.histogram),
            "streams": table(g.streams),
            "min_gap_ns": g.min_gap_ns,
            "gaps": table(g.gaps),
        },
        "replays": {
            "node_level": r.node_level,
            "summary": r.summary,
            "cost_model": r.cost_model,
            "replays": table(r.replays),
        },
        "steps": {
            "range": s.name,
            "source": s.source,
            "skipped": s.skipped,
            "total_instances": s.total_instances,
            "steps": table(s.steps),
        },
    }


def render(results: list[Any]) -> str:
    """One trace -> its document; several -> {"schema_version", "traces": [...]}."""
    from cgprof.metrics import JSON_SCHEMA_VERSION

    if len(results) == 1:
        doc: Any = result_to_dict(results[0], _lazy=True)
    else:
        doc = {"schema_version": JSON_SCHEMA_VERSION,
               "traces": [result_to_dict(r, _lazy=True) for r in results]}
    tables: list[_Table] = []

    def placeholder(obj: Any) -> Any:
        if isinstance(obj, _Table):
            tables.append(obj)
            return f"\x00table{len(tables) - 1}\x00"
        raise TypeError(f"not JSON serialisable: {type(obj).__name__}")

    text = json.dumps(doc, sort_keys=True, indent=1, allow_nan=False, default=placeholder)
    parts = text.split('"\\u0000table')
    out = [parts[0]]
    for part in parts[1:]:
        num, rest = part.split("\\u0000\"", 1)
        out.append(tables[int(num)].to_json())
        out.append(rest)
    return "".join(out) + "\n"
