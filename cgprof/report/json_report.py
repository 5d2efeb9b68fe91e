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


def result_to_dict(result: Any) -> dict[str, Any]:
    """The document ``cgprof analyze --json`` writes for one trace."""
    from cgprof.metrics import JSON_SCHEMA_VERSION

    g, r, s = result.gaps, result.replays, result.steps
    return {
        "schema_version": JSON_SCHEMA_VERSION,
        "cgprof_version": __version__,
        "trace": {k: _scalar(v) if not isinstance(v, (list, dict)) else v
                  for k, v in result.info.items()},
        "verdict": {k: _scalar(v) if not isinstance(v, (list, dict)) else v
                    for k, v in dataclasses.asdict(result.verdict).items()},
        "launches": frame_records(result.launches),
        "api_summary": frame_records(result.api_summary),
        "kernel_summary": frame_records(result.kernel_summary),
        "nvtx_summary": frame_records(result.nvtx_summary),
        "gpu": {
            "devices": frame_records(g.devices),
            "gaps_by_kind": frame_records(g.by_kind),
            "gap_histogram": frame_records(g.histogram),
            "streams": frame_records(g.streams),
            "min_gap_ns": g.min_gap_ns,
            "gaps": frame_records(g.gaps),
        },
        "replays": {
            "node_level": r.node_level,
            "summary": r.summary,
            "cost_model": r.cost_model,
            "replays": frame_records(r.replays),
        },
        "steps": {
            "range": s.name,
            "source": s.source,
            "skipped": s.skipped,
            "total_instances": s.total_instances,
            "steps": frame_records(s.steps),
        },
    }


def render(results: list[Any]) -> str:
    """One trace -> its document; several -> {"schema_version", "traces": [...]}."""
    from cgprof.metrics import JSON_SCHEMA_VERSION

    if len(results) == 1:
        doc: Any = result_to_dict(results[0])
    else:
        doc = {"schema_version": JSON_SCHEMA_VERSION,
               "traces": [result_to_dict(r) for r in results]}
    return json.dumps(doc, sort_keys=True, indent=1, allow_nan=False) + "\n"
