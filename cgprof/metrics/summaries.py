"""Per-name summaries that Nsight Systems' own reports also give, computed the same way.

* :func:`kernel_summary` matches ``nsys stats -r cuda_gpu_kern_sum`` (demangled names),
* :func:`api_summary` matches ``cuda_api_sum`` (names as nsys shows them, every RUNTIME row,
  as nsys's own query counts them),
* :func:`nvtx_summary` matches ``nvtx_sum`` (ranges by "domain:text" and style; nsys writes
  the default domain's ranges as ":text", and so does cgprof here).

Columns of each: name, instances (or calls), total_ns, avg_ns, med_ns, min_ns, max_ns,
std_ns (sample standard deviation, as nsys). Totals and extremes are exact integers.
"""

from __future__ import annotations

import pandas as pd

from cgprof import schema as S
from cgprof.trace import Trace

STAT_COLUMNS = ["total_ns", "avg_ns", "med_ns", "min_ns", "max_ns", "std_ns"]


def _stats(df: pd.DataFrame, keys: list[str], count_name: str) -> pd.DataFrame:
    cols = keys + [count_name] + STAT_COLUMNS
    if df.empty:
        return pd.DataFrame({c: pd.Series(dtype="object" if c in keys else "int64") for c in cols})
    df = df.assign(dur_ns=df["dur_ns"].astype("int64"))
    g = df.groupby(keys, sort=False, observed=True)["dur_ns"]
    out = g.agg(["size", "sum", "mean", "median", "min", "max", "std"]).reset_index()
    out.columns = cols
    for k in keys:  # group keys may be categorical: plain strings in the result
        out[k] = out[k].astype(str).astype(object)
    out["std_ns"] = out["std_ns"].fillna(0.0)
    out = out.astype({count_name: "int64", "total_ns": "int64", "min_ns": "int64",
                      "max_ns": "int64"})
    out = out.sort_values(["total_ns"] + keys, ascending=[False] + [True] * len(keys))
    return out.reset_index(drop=True)


def kernel_summary(trace: Trace) -> pd.DataFrame:
    """Kernel instances and GPU time per demangled name (``cuda_gpu_kern_sum``)."""
    return _stats(trace.kernels[["name", "dur_ns"]], ["name"], "instances")


def api_summary(trace: Trace) -> pd.DataFrame:
    """API calls and host time per name as nsys shows it (``cuda_api_sum``)."""
    rt = trace.runtime[["nsys_name", "dur_ns"]].rename(columns={"nsys_name": "name"})
    return _stats(rt, ["name"], "calls")


def nvtx_ranges(trace: Trace) -> pd.DataFrame:
    """Closed NVTX ranges (push/pop and start/end), with their nsys-style name."""
    nv = trace.nvtx
    return nv[nv["event_type"].isin(S.NVTX_RANGE_TYPES) & nv["end_ns"].notna()]


def nvtx_summary(trace: Trace) -> pd.DataFrame:
    """Range instances and host time per name and style (``nvtx_sum``)."""
    ranges = nvtx_ranges(trace)
    ranges = pd.DataFrame({
        "name": ranges["domain"].astype(str) + ":" + ranges["text"].fillna("").astype(str),
        "style": ranges["style"], "dur_ns": ranges["dur_ns"]})
    return _stats(ranges, ["name", "style"], "instances")
