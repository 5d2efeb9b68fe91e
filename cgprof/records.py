"""Table rows as plain Python records, as every JSON document cgprof writes holds them."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd


def scalar(v: Any) -> Any:
    """A plain Python value for JSON: NA/NaT/NaN -> None, numpy ints/floats/bools -> Python's,
    infinities -> ``"inf"``/``"-inf"``."""
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
        out.append({c: scalar(arrays[j][i]) for j, c in enumerate(cols)})
    return out
