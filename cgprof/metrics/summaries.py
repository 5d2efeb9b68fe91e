"""Per-name summaries that Nsight Systems' own reports also give, computed the same way.

* :func:`kernel_summary` matches ``nsys stats -r cuda_gpu_kern_sum`` (demangled names),
* :func:`api_summary` matches ``cuda_api_sum`` (names as nsys shows them, every RUNTIME row,
  as nsys's own query counts them),
* :func:`nvtx_summary` matches ``nvtx_sum`` (ranges by "domain:text" and style; nsys writes
  the default domain's ranges as ":text", and so does cgprof here).

Columns of each: name, instances (or calls), total_ns, avg_ns, med_ns, min_ns, max_ns,
std_ns (sample standard deviation, as nsys). Totals and extremes are exact integers.

:func:`merge_summaries` adds up such tables of disjoint sets of rows (the processes of one
file) into the table of their union: what ``nsys stats`` prints for the file, without the
median and the standard deviation (:data:`MERGED_STAT_COLUMNS` says why).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from cgprof import schema as S
from cgprof.io.trace import Trace, column

STAT_COLUMNS = ["total_ns", "avg_ns", "med_ns", "min_ns", "max_ns", "std_ns"]


def category_codes(values: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Integer codes (-1: missing) and the values they stand for, of a (categorical) column."""
    if isinstance(values.dtype, pd.CategoricalDtype):  # int8/int16 codes: kept that narrow
        return values.cat.codes.to_numpy(), np.asarray(values.cat.categories, dtype=object)
    codes, uniques = pd.factorize(values)
    return codes, np.asarray(uniques, dtype=object)


def _sorted_in_groups(group: np.ndarray, dur: np.ndarray, n_groups: int) -> np.ndarray:
    """``dur`` ordered by (group, dur), as int64: one sort of ``group << bits | dur`` packed in
    32 bits when it fits (twice as fast as 64), else in 64; a two-key sort when neither does
    (negative or huge durations)."""
    lo = int(dur.min()) if len(dur) else 0
    bits = max(int(dur.max()).bit_length() if len(dur) else 0, 1)
    group_bits = max(n_groups - 1, 1).bit_length()
    if lo < 0 or bits + group_bits > 63:
        return dur[np.lexsort((dur, group))]
    kind = np.uint32 if bits + group_bits <= 32 else np.int64
    packed = group.astype(kind)  # in place from here: each 1M-row temporary costs its pages
    packed <<= kind(bits)
    packed |= dur.astype(kind, copy=False)
    packed.sort()
    packed &= kind((1 << bits) - 1)
    return packed.astype(np.int64, copy=False)


def _group_std(dur: np.ndarray, group: np.ndarray, n_groups: int) -> np.ndarray:
    """``pd.Series(dur).groupby(group).std()`` for every code in [0, n_groups) (NaN: fewer than
    two values): pandas' own Welford pass (its cython ``group_var``, called as its groupby
    std calls it), without the groupby's hashing of a million labels (~2/3 of its time).
    Any other formula differs in the last bits; where that private function is not there
    or takes other arguments, the public groupby."""
    try:
        from pandas._libs.groupby import group_var

        out = np.zeros((n_groups, 1), dtype=np.float64)
        group_var(out=out, counts=np.zeros(n_groups, dtype=np.int64),
                  values=dur.astype(np.float64).reshape(-1, 1),
                  labels=group.astype(np.intp, copy=False), min_count=-1, ddof=1, name="std")
        return out[:, 0]
    except (ImportError, TypeError, ValueError):
        std = pd.Series(dur).groupby(group, sort=True).std()
        return std.reindex(range(n_groups)).to_numpy(dtype=np.float64)


def _stats(df: pd.DataFrame, keys: list[str], count_name: str,
           labels: list[str] | None = None) -> pd.DataFrame:
    """``df.groupby(keys)["dur_ns"]`` size, sum, mean, median, min, max and std (rows with a
    missing key left out, as pandas does), most total time first.

    Over numpy, the same numbers as pandas computes them: one sort of packed (group, dur)
    puts each group's durations in order (min, max, median at known offsets; exact int64
    sums by ``np.add.reduceat``); the mean is that exact sum / count, which is what pandas'
    compensated float sum gives while sums stay below 2**53; the standard deviation is
    pandas' own (:func:`_group_std`).
    ``labels``: the keys' column names in the result (default: ``keys``); only ``keys`` and
    ``dur_ns`` of ``df`` are read, so callers pass whole frames, not narrowed copies."""
    out_keys = labels or keys
    cols = out_keys + [count_name] + STAT_COLUMNS
    if df.empty:
        return pd.DataFrame({c: pd.Series(dtype="object" if c in out_keys else "int64")
                             for c in cols})
    dur = (df["dur_ns"].to_numpy(dtype=np.int64) if "dur_ns" in df.columns
           else column(df, "dur_ns"))  # a stored kernel or API-call frame
    values = []
    group: np.ndarray | None = None
    for k in keys:  # one code per combination of the keys' codes (-1: a key is missing)
        codes, uniques = category_codes(df[k])
        values.append(uniques)
        group = codes if group is None else np.where(
            (group < 0) | (codes < 0), -1, group.astype(np.int64) * max(len(uniques), 1) + codes)
    assert group is not None
    if (group < 0).any():
        keep = group >= 0
        group, dur = group[keep], dur[keep]
    n_groups = int(np.prod([max(len(v), 1) for v in values]))
    group = group.astype(np.intp, copy=False)  # once: the counts and the std read it so
    count = np.bincount(group, minlength=n_groups)
    present = np.flatnonzero(count)
    count = count[present]
    sorted_dur = _sorted_in_groups(group, dur, n_groups)
    start = np.cumsum(count) - count
    total = np.add.reduceat(sorted_dur, start) if len(start) else np.zeros(0, np.int64)
    low = sorted_dur[start + (count - 1) // 2].astype(np.float64)
    high = sorted_dur[start + count // 2].astype(np.float64)
    min_ns, max_ns = sorted_dur[start], sorted_dur[start + count - 1]
    lo, hi = (int(min_ns.min()), int(max_ns.max())) if len(dur) else (0, 0)
    if max(-lo, hi) * len(dur) < 2**52:  # every float partial sum exact
        mean = total.astype(np.float64) / count
    else:  # a float sum could round: take pandas' own
        mean = pd.Series(dur).groupby(group, sort=True).mean().to_numpy()
    labels_of = []
    for i in range(len(out_keys)):  # decode the combined group code back into each key
        size = max(len(values[i]), 1)
        width = int(np.prod([max(len(v), 1) for v in values[i + 1:]]))
        labels_of.append([str(v) for v in values[i][(present // width) % size]])
    # most total time first, then by the keys' text: sort_values(["total_ns", *keys],
    # ascending=[False, True, ...]) (stable), as one Python sort of a few hundred groups
    # and one gather per column, not a sort of a frame
    order = np.asarray(sorted(range(len(present)), key=lambda g: (
        -int(total[g]), *(labels[g] for labels in labels_of))), dtype=np.intp)
    out: dict[str, Any] = {k: pd.Series([labels_of[i][g] for g in order], dtype=object)
                           for i, k in enumerate(out_keys)}
    out.update({
        count_name: count.astype(np.int64)[order],
        "total_ns": total.astype(np.int64)[order],
        "avg_ns": mean[order],
        "med_ns": ((low + high) / 2)[order],
        "min_ns": min_ns.astype(np.int64)[order],
        "max_ns": max_ns.astype(np.int64)[order],
        "std_ns": np.nan_to_num(_group_std(dur, group, n_groups)[present], nan=0.0)[order],
    })
    return pd.DataFrame(out, columns=cols)


#: The statistics :func:`merge_summaries` gives: the ones that parts' tables determine
#: exactly. Counts and totals add, extremes combine, and the mean is the merged total over
#: the merged count (Python's int division, correctly rounded: the exact mean as a float).
#: The median and the standard deviation are left out: the median of a union is not a
#: function of its parts' medians, and a standard deviation recombined from the parts'
#: rounded ones (or from float sums of squares) is not the one computed from the rows.
MERGED_STAT_COLUMNS = ["total_ns", "avg_ns", "min_ns", "max_ns"]

#: Each per-name summary (its name in AnalysisResult and in the JSON document): its key
#: columns and the name of its count column.
SUMMARY_KEYS: dict[str, tuple[list[str], str]] = {
    "kernel_summary": (["name"], "instances"),
    "api_summary": (["name"], "calls"),
    "nvtx_summary": (["name", "style"], "instances"),
}


def merge_summaries(kind: str, parts: Sequence[pd.DataFrame]) -> pd.DataFrame:
    """The ``kind`` summary (a key of :data:`SUMMARY_KEYS`) of the union of the rows that
    each of ``parts`` summarises (tables of :func:`kernel_summary`, :func:`api_summary` or
    :func:`nvtx_summary` of disjoint sets of rows, e.g. each process of a file): keys, the
    count, then :data:`MERGED_STAT_COLUMNS`, most total time first and then by the keys'
    text, as the parts are ordered. Exact: counts, totals and extremes are int64, the mean
    the correctly rounded quotient of the two exact integers."""
    keys, count_name = SUMMARY_KEYS[kind]
    cols = keys + [count_name] + MERGED_STAT_COLUMNS
    rows = [p[[*keys, count_name, "total_ns", "min_ns", "max_ns"]] for p in parts if len(p)]
    if not rows:
        return pd.DataFrame({c: pd.Series(dtype="object" if c in keys else
                                          "float64" if c == "avg_ns" else "int64")
                             for c in cols})
    both = pd.concat(rows, ignore_index=True)
    for k in keys:
        both[k] = both[k].astype(str)
    g = both.groupby(keys, sort=False).agg(
        n=(count_name, "sum"), total=("total_ns", "sum"), lo=("min_ns", "min"),
        hi=("max_ns", "max"))
    labels = [g.index.get_level_values(i).to_numpy(dtype=object) for i in range(len(keys))]
    total = g["total"].to_numpy(dtype=np.int64)
    count = g["n"].to_numpy(dtype=np.int64)
    # most total time first, then by the keys' text, as _stats orders a table
    order = np.asarray(sorted(range(len(g)), key=lambda i: (
        -int(total[i]), *(str(v[i]) for v in labels))), dtype=np.intp)
    if len(total) and int(np.abs(total).max()) >= 2**53:  # a float of it could round
        mean = np.asarray([int(t) / int(n) for t, n in zip(total, count, strict=True)])
    else:  # exact operands: IEEE division rounds the exact quotient
        mean = total.astype(np.float64) / count
    out: dict[str, Any] = {k: pd.Series(labels[i][order], dtype=object)
                           for i, k in enumerate(keys)}
    out.update({count_name: count[order], "total_ns": total[order], "avg_ns": mean[order],
                "min_ns": g["lo"].to_numpy(dtype=np.int64)[order],
                "max_ns": g["hi"].to_numpy(dtype=np.int64)[order]})
    return pd.DataFrame(out, columns=cols)


@dataclass
class FileSummaries:
    """The per-name summaries of one whole file, every process of it: what ``nsys stats``
    (``cuda_gpu_kern_sum``, ``cuda_api_sum``, ``nvtx_sum``) prints for the file.

    path, pids  the file (as given) and its processes, ascending
    kernel_summary, api_summary, nvtx_summary
                :func:`merge_summaries` of the processes' own tables: keys, count,
                total_ns, avg_ns, min_ns, max_ns. No med_ns and std_ns: neither is
                determined by the processes' tables (:data:`MERGED_STAT_COLUMNS`), and one
                recombined from them would pass an approximation for nsys's number.
    """

    path: str
    pids: list[int]
    kernel_summary: pd.DataFrame
    api_summary: pd.DataFrame
    nvtx_summary: pd.DataFrame


def merge_file(path: str, pids: Sequence[int], parts: Sequence[Any]) -> FileSummaries:
    """The :class:`FileSummaries` of the file at ``path`` whose processes ``pids`` the
    ``parts`` summarise, each once: objects with some of the attributes kernel_summary,
    api_summary, nvtx_summary (an analysis; the processes without GPU work have no
    kernel table)."""
    tables = {kind: merge_summaries(kind, [getattr(p, kind) for p in parts
                                           if hasattr(p, kind)]) for kind in SUMMARY_KEYS}
    return FileSummaries(path=path, pids=sorted({int(p) for p in pids}), **tables)


def kernel_summary(trace: Trace) -> pd.DataFrame:
    """Kernel instances and GPU time per demangled name (``cuda_gpu_kern_sum``)."""
    return _stats(trace.stored("kernels"), ["name"], "instances")


def api_summary(trace: Trace) -> pd.DataFrame:
    """API calls and host time per name as nsys shows it (``cuda_api_sum``)."""
    return _stats(trace.stored("runtime"), ["nsys_name"], "calls", labels=["name"])


def nvtx_ranges(trace: Trace) -> pd.DataFrame:
    """Closed NVTX ranges (push/pop and start/end), with their nsys-style name."""
    nv = trace.nvtx
    return nv[nv["event_type"].isin(S.NVTX_RANGE_TYPES) & nv["end_ns"].notna()]


def nvtx_summary(trace: Trace, ranges: pd.DataFrame | None = None) -> pd.DataFrame:
    """Range instances and host time per name and style (``nvtx_sum``). ``ranges``: the
    trace's :func:`nvtx_ranges`, when the caller has them."""
    if ranges is None:
        ranges = nvtx_ranges(trace)
    ranges = pd.DataFrame({"name": _range_names(ranges["domain"], ranges["text"]),
                           "style": ranges["style"], "dur_ns": ranges["dur_ns"]})
    return _stats(ranges, ["name", "style"], "instances")


def _range_names(domain: pd.Series, text: pd.Series) -> pd.Series:
    """``domain.astype(str) + ":" + text.fillna("").astype(str)``, as a categorical: the
    strings are made once per distinct (domain, text) pair, not once per range."""
    d_code, d_of = category_codes(domain)
    t_code, t_of = category_codes(text)
    if (d_code < 0).any():  # a missing domain: astype(str) says how it prints
        return domain.astype(str) + ":" + text.fillna("").astype(str)
    width = len(t_of) + 1  # text code + 1: 0 is a missing text, written ""
    pair_code, pairs = pd.factorize(d_code.astype(np.int64) * width + t_code + 1)
    texts = [""] + [str(t) for t in t_of]
    labels = [f"{d_of[p // width]}:{texts[p % width]}" for p in pairs]
    name_code, names = pd.factorize(np.asarray(labels, dtype=object))
    codes = name_code[pair_code] if len(pair_code) else pair_code
    return pd.Series(pd.Categorical.from_codes(codes, categories=pd.Index(names, dtype=object)),
                     index=domain.index)
