"""Host-side CUDA API calls grouped into launch families.

A *family* is what a performance engineer counts: eager kernel launches vs graph launches,
copies, memsets, synchronisations, graph setup (capture/instantiate) and everything else.
Calls made while a stream was being captured (between ``cudaStreamBeginCapture`` and
``cudaStreamEndCapture`` on the same thread) are real CPU calls that launch nothing on the GPU;
they are flagged ``in_capture`` and counted apart.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from cgprof.trace import Trace, map_categories

KERNEL_LAUNCH = "kernel_launch"
GRAPH_LAUNCH = "graph_launch"
MEMCPY = "memcpy"
MEMSET = "memset"
SYNC = "sync"
GRAPH_SETUP = "graph_setup"
OTHER = "other"
FAMILIES = (KERNEL_LAUNCH, GRAPH_LAUNCH, MEMCPY, MEMSET, SYNC, GRAPH_SETUP, OTHER)

_RULES: list[tuple[str, re.Pattern[str]]] = [
    (GRAPH_LAUNCH, re.compile(r"^(cudaGraphLaunch|cuGraphLaunch)")),
    # cudaLaunchKernel, cudaLaunchKernelExC, cudaLaunchCooperativeKernel(MultiDevice),
    # cuLaunchKernel(Ex), cuLaunchCooperativeKernel, cuLaunchGrid*; not cudaLaunchHostFunc.
    (KERNEL_LAUNCH, re.compile(
        r"^(cudaLaunchKernel|cudaLaunchCooperativeKernel|cuLaunchKernel|cuLaunchCooperativeKernel"
        r"|cuLaunchGrid|cudaLaunch$|cudaLaunch_ptsz)")),
    (GRAPH_SETUP, re.compile(
        r"^(cudaStreamBeginCapture|cudaStreamEndCapture|cuStreamBeginCapture|cuStreamEndCapture"
        r"|cudaGraphInstantiate|cuGraphInstantiate|cudaGraphUpload|cuGraphUpload"
        r"|cudaGraphExecUpdate|cuGraphExecUpdate|cudaGraphExecDestroy|cuGraphExecDestroy"
        r"|cudaGraphDestroy|cuGraphDestroy)")),
    (MEMCPY, re.compile(r"^(cudaMemcpy|cuMemcpy)")),
    (MEMSET, re.compile(r"^(cudaMemset|cuMemset|cuMemsetD)")),
    (SYNC, re.compile(r"Synchronize")),
]


def family_of(name: str) -> str:
    """Launch family of a CUDA API name (version suffix already stripped or not)."""
    for family, pattern in _RULES:
        if pattern.search(name):
            return family
    return OTHER


def api_calls(trace: Trace) -> pd.DataFrame:
    """Real API calls (eventClass runtime/driver) with ``family`` and ``in_capture`` added.

    Columns: start_ns end_ns dur_ns pid tid global_tid corr_id name_raw name nsys_name
    family in_capture (bool). Sorted by start_ns.
    """
    calls = trace.api_calls  # a filtered frame already: no second full copy
    if calls.empty:
        return calls.assign(family=pd.Series(dtype="object"), in_capture=pd.Series(dtype="bool"))
    return calls.assign(family=_families(calls["name"]), in_capture=_in_capture(calls))


def _families(names: pd.Series) -> pd.Series:
    """``names.map(family_of per category).astype("category")``, through the codes."""
    return map_categories(names, family_of)


def name_contains(names: pd.Series, text: str) -> np.ndarray:
    """``names.str.contains(text)`` for a categorical column, computed once per category."""
    if not isinstance(names.dtype, pd.CategoricalDtype):
        return names.astype(str).str.contains(text, regex=False).to_numpy(dtype=bool)
    per_cat = np.asarray([text in str(c) for c in names.cat.categories] + [False], dtype=bool)
    return per_cat[names.cat.codes.to_numpy()]  # code -1 (missing) picks the final False


def _in_capture(calls: pd.DataFrame) -> np.ndarray:
    """True for calls on a thread between its BeginCapture and EndCapture calls.

    Per thread in time order, depth = begins so far - ends before this call; on a call that is
    neither, that is the running sum of (begin - end). Only the threads that began a capture
    are looked at (one or two of a trace's threads), in one stable sort by a small thread
    number: the rows are in start order already (Trace tables are), so it keeps each thread's
    calls in time order, ties in frame order, as ``lexsort((start, tid))`` would."""
    begin = name_contains(calls["name"], "StreamBeginCapture")
    end = name_contains(calls["name"], "StreamEndCapture")
    out = np.zeros(len(calls), dtype=bool)
    if not begin.any():
        return out
    tids = calls["global_tid"].to_numpy()
    capturing = np.unique(tids[begin])
    if len(capturing) <= 8:  # np.isin sorts; a few compares are cheaper
        mine = tids == capturing[0]
        for tid in capturing[1:]:
            mine |= tids == tid
        rows = np.flatnonzero(mine)
    else:
        rows = np.flatnonzero(np.isin(tids, capturing))
    thread = np.searchsorted(capturing, tids[rows]) if len(capturing) > 1 else np.zeros(
        len(rows), dtype=np.intp)
    start = calls["start_ns"].to_numpy()[rows]
    if not (start[1:] >= start[:-1]).all():
        order = np.lexsort((start, thread))
    elif len(capturing) > 1:
        order = np.argsort(thread.astype(np.min_scalar_type(len(capturing))), kind="stable")
    else:
        order = None  # one thread, in time order already
    if order is not None:
        rows, thread = rows[order], thread[order]
    b, e = begin[rows], end[rows]
    depth = np.cumsum(b.astype(np.int64) - e)
    counts = np.bincount(thread, minlength=len(capturing))  # rows per thread, in order
    depth -= np.repeat(np.concatenate(([0], depth[np.cumsum(counts)[:-1] - 1])), counts)
    out[rows] = (depth > 0) & ~b & ~e
    return out


def launch_summary(calls: pd.DataFrame) -> pd.DataFrame:
    """Calls and host time per family.

    Columns: family, calls (outside stream capture), captured_calls (recorded during stream
    capture: they launch nothing), host_ns (host time of the uncaptured calls), avg_ns,
    names (the distinct suffix-stripped API names in the family, sorted, ';'-joined).
    """
    rows = []
    for family in FAMILIES:
        fam = calls[calls["family"] == family]
        live = fam[~fam["in_capture"]]
        if fam.empty:
            continue
        host = int(live["dur_ns"].sum())
        rows.append({
            "family": family,
            "calls": int(len(live)),
            "captured_calls": int(len(fam) - len(live)),
            "host_ns": host,
            "avg_ns": float(host / len(live)) if len(live) else None,
            "names": ";".join(sorted({str(n) for n in fam["name"].unique()})),
        })
    return pd.DataFrame(rows, columns=["family", "calls", "captured_calls", "host_ns", "avg_ns",
                                       "names"])
