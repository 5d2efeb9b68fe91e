"""How much of each steady-state step runs inside CUDA graphs, and what is still eager.

Computed over the analysis window (the steady-state steps, see
:meth:`cgprof.metrics.steps.StepResult.window_steps`) from the step table's coverage columns
(``graph_kernels``, ``eager_kernels``, ``graph_gpu_ns``, ``eager_gpu_ns``, ``recapture``,
``fallback``) and, for the eager leftovers, from the kernel rows joined to the API call that
launched them on (pid, correlationId). A kernel replayed from a graph carries a
``graphNodeId``; every other kernel was launched on its own by a host call.

This is the contract the CI gate (``cgprof check``) reads; keys of ``summary`` are stable.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from cgprof.metrics import launches as L
from cgprof.metrics.intervals import join_unique, pairs_distinct

EAGER_TOP_COLUMNS = ["name", "kernels", "gpu_ns", "launch_api", "launch_host_ns"]

#: Rows kept in ``CoverageResult.eager_top``.
EAGER_TOP_N = 10


@dataclass
class CoverageResult:
    """Graph coverage of the analysis window.

    summary  steps (int, window steps), graph_kernel_share (kernels inside replays / all
             kernels of the window steps, 0..1, None when unknown: no kernels, or replay kernels
             hidden by a graph-granularity trace), graph_gpu_share (the same for GPU busy time:
             graph_gpu_ns / (graph_gpu_ns + eager_gpu_ns)), launch_calls_per_step_p50 (kernel +
             graph launch calls), kernel_launches_per_step_p50, graph_launches_per_step_p50,
             sync_calls_per_step_p50, memcpy_calls_per_step_p50, recaptures (int, window steps
             that captured or instantiated a graph after replays had begun), fallbacks (int,
             window steps without a graph launch after replays had begun), partial_steps (int,
             window steps with both graph launches and eager kernel launches)
    eager_top  kernels launched outside graphs in the window steps, most GPU time first
             (EAGER_TOP_COLUMNS): name (demangled), kernels (instances per window step),
             gpu_ns (GPU time per window step), launch_api (the API call that launches most
             of them, e.g. cudaLaunchKernel), launch_host_ns (host time of those launch calls
             per window step); at most EAGER_TOP_N rows
    recapture_steps / fallback_steps   the ``step`` numbers of those steps
    eager_per_step  p50 over the partially graphed window steps (over all window steps when
             none is partial) of: eager kernel launches, GPU busy time outside replays
             (eager_gpu_ns) and the kernel launch calls' host time (keys kernel_launches,
             gpu_ns, launch_host_ns)
    """

    summary: dict[str, object]
    eager_top: pd.DataFrame
    recapture_steps: list[int] = field(default_factory=list)
    fallback_steps: list[int] = field(default_factory=list)
    eager_per_step: dict[str, float] = field(default_factory=dict)


def _p50(values: pd.Series) -> float:
    v = pd.Series(values).dropna().to_numpy(dtype=np.float64)
    return float(np.median(v)) if len(v) else 0.0


def graph_coverage(
    window_steps: pd.DataFrame,
    kernels: pd.DataFrame,
    calls: pd.DataFrame,
    call_steps: pd.DataFrame,
) -> CoverageResult:
    """Coverage of ``window_steps`` (rows of the step table).

    ``kernels`` is ``Trace.kernels``; ``calls`` comes from
    :func:`cgprof.metrics.launches.api_calls`; ``call_steps`` is ``StepResult.call_steps``
    (pid, corr_id, step of every attributed call).
    """
    ws = window_steps
    n = len(ws)
    gk = ws["graph_kernels"]
    ek = ws["eager_kernels"].astype("int64")
    if n and gk.notna().all():
        total_k = int(gk.sum()) + int(ek.sum())
        kernel_share = float(gk.sum()) / total_k if total_k else None
    else:
        kernel_share = None
    total_gpu = int(ws["graph_gpu_ns"].sum()) + int(ws["eager_gpu_ns"].sum())
    gpu_share = float(ws["graph_gpu_ns"].sum()) / total_gpu if total_gpu else None
    launches = ws["kernel_launches"] + ws["graph_launches"]
    partial = (ws["graph_launches"] > 0) & (ws["kernel_launches"] > 0)
    recap = [int(s) for s in ws.loc[ws["recapture"], "step"]]
    fall = [int(s) for s in ws.loc[ws["fallback"], "step"]]
    summary: dict[str, object] = {
        "steps": int(n),
        "graph_kernel_share": kernel_share,
        "graph_gpu_share": gpu_share,
        "launch_calls_per_step_p50": _p50(launches),
        "kernel_launches_per_step_p50": _p50(ws["kernel_launches"]),
        "graph_launches_per_step_p50": _p50(ws["graph_launches"]),
        "sync_calls_per_step_p50": _p50(ws["sync_calls"]),
        "memcpy_calls_per_step_p50": _p50(ws["memcpy_calls"]),
        "recaptures": len(recap),
        "fallbacks": len(fall),
        "partial_steps": int(partial.sum()),
    }
    top, launch_host = _eager_top(ws, kernels, calls, call_steps)
    basis = partial if partial.any() else pd.Series(True, index=ws.index)
    per_step = {
        "kernel_launches": _p50(ws.loc[basis, "kernel_launches"]),
        "gpu_ns": _p50(ws.loc[basis, "eager_gpu_ns"]),
        "launch_host_ns": _p50(launch_host[basis]),
    }
    return CoverageResult(summary=summary, eager_top=top, recapture_steps=recap,
                          fallback_steps=fall, eager_per_step=per_step)


def _empty_top() -> pd.DataFrame:
    return pd.DataFrame({"name": pd.Series(dtype="object"), "kernels": pd.Series(dtype="float64"),
                         "gpu_ns": pd.Series(dtype="float64"),
                         "launch_api": pd.Series(dtype="object"),
                         "launch_host_ns": pd.Series(dtype="float64")})


def _eager_top(ws, kernels, calls, call_steps) -> tuple[pd.DataFrame, pd.Series]:
    """Top eager kernels per window step, and each window step's kernel-launch host time."""
    n = len(ws)
    steps = ws["step"].to_numpy(np.int64)
    zero = pd.Series(np.zeros(n), index=ws.index)
    if n == 0 or calls.empty:
        return _empty_top(), zero
    sel = ((calls["family"] == L.KERNEL_LAUNCH) & ~calls["in_capture"]).to_numpy(dtype=bool)
    launch = calls[["pid", "corr_id", "name", "dur_ns"]]
    launch = launch if sel.all() else launch[sel]
    if not pairs_distinct(launch):
        launch = launch.drop_duplicates(["pid", "corr_id"])
    launch = join_unique(launch, call_steps[["pid", "corr_id", "step"]])
    launch = launch[launch["step"].isin(steps)]
    host = launch.groupby("step")["dur_ns"].sum().reindex(steps).fillna(0)
    host.index = ws.index
    eager = kernels["graph_node_id"].isna().to_numpy(dtype=bool)
    k = kernels[["pid", "corr_id", "name", "dur_ns"]]
    k = k if eager.all() else k[eager]
    if k.empty or launch.empty:
        return _empty_top(), host
    k = join_unique(k, launch.rename(columns={"name": "api", "dur_ns": "api_ns"}))
    if k.empty:
        return _empty_top(), host
    # One launch call can start several kernels (rare for eager launches): charge its host
    # time once, to the first kernel.
    first = (np.ones(len(k), dtype=bool) if pairs_distinct(k)
             else ~k.duplicated(["pid", "corr_id"]).to_numpy())
    k = k.assign(api_ns=np.where(first, k["api_ns"], 0))
    # Group on the categorical names (strings only for the groups, not for every row).
    agg = k.groupby("name", observed=True, sort=False).agg(
        kernels=("dur_ns", "size"), gpu_ns=("dur_ns", "sum"), launch_host_ns=("api_ns", "sum"))
    pairs = k.groupby(["name", "api"], observed=True, sort=False).size().reset_index(name="n")
    pairs = pairs.sort_values("n", ascending=False, kind="stable").drop_duplicates("name")
    api_of = dict(zip(pairs["name"].astype(str), pairs["api"].astype(str), strict=True))
    names = agg.index.astype(str)
    top = pd.DataFrame({
        "name": np.asarray(names, dtype=object),
        "kernels": agg["kernels"].to_numpy(np.float64) / n,
        "gpu_ns": agg["gpu_ns"].to_numpy(np.float64) / n,
        "launch_api": np.asarray([api_of[x] for x in names], dtype=object),
        "launch_host_ns": agg["launch_host_ns"].to_numpy(np.float64) / n,
    })
    top = top.sort_values(["gpu_ns", "name"], ascending=[False, True], kind="stable")
    return top.head(EAGER_TOP_N).reset_index(drop=True)[EAGER_TOP_COLUMNS], host

