"""`cgprof check`: gate a run on CUDA Graph health, absolutely and against a baseline.

The pieces, all pure data except the loaders and the history writer:

- :func:`figures` is the one place that turns an analysis (an :class:`AnalysisResult`, the
  document ``cgprof analyze --json`` writes, or a baseline from ``--save-baseline``) into
  named figures (:data:`FIGURES`). Rules only ever see these figures, so one trace, a saved
  baseline and each rank of a multi-rank trace are checked the same way.
- :func:`load_run` reads a trace or JSON document as :class:`RunFigures`: one set of figures
  per rank (a single-process trace is rank 0); :func:`evaluate_run` applies the rules rank by
  rank, each rank against the baseline's rank of the same id.
- A :class:`Rule` is data: ``max``/``min`` with an absolute ``limit``, or ``regress`` with a
  relative ``tolerance`` against the baseline's value of the same figure.
- :func:`evaluate` applies rules to one set of figures (and the baseline's) and returns a
  :class:`CheckResult`; renderers live in :mod:`cgprof.report.check_report`.
- :func:`load_config` reads ``[tool.cgprof.check]`` from the nearest ``pyproject.toml`` or a
  ``--config`` file; :func:`parse_rule` reads the command line's ``FIGURE=LIMIT`` forms.
- cgprof.check_history keeps a SQLite log of checked runs.

Every problem with the user's input raises :class:`CheckConfigError` with one line naming the
file and what is wrong; the command maps it to exit code 2.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cgprof.errors import CgprofError
from cgprof.scratch import prefixed

if TYPE_CHECKING:  # pragma: no cover
    from cgprof.plan import Plan

__all__ = [
    "BASELINE_KIND",
    "FIGURES",
    "CheckConfig",
    "CheckConfigError",
    "CheckResult",
    "Rule",
    "RuleResult",
    "RunFigures",
    "baseline_document",
    "evaluate",
    "evaluate_run",
    "figures",
    "load_config",
    "load_run",
    "run_baseline_document",
    "parse_rule",
    "parse_tolerance",
]

#: Figure name -> (which way is better, what it is). Units are in the names.
FIGURES: dict[str, tuple[str, str]] = {
    "steps": ("higher", "steps in the analysis window"),
    "step_p50_ns": ("lower", "median step time (effective_ns: host range or GPU span)"),
    "step_p99_ns": ("lower", "99th percentile step time"),
    "launch_calls_per_step": ("lower", "kernel + graph launch calls per step (median)"),
    "graph_kernel_share": ("higher", "share of kernels that ran inside graph replays (0..1)"),
    "graph_gpu_share": ("higher", "share of GPU busy time inside graph replays (0..1)"),
    "compactness_p50": ("higher", "median replay compactness (busy / span)"),
    "gpu_idle_pct": ("lower", "GPU idle % of the analysis window (worst device)"),
    "recaptures": ("lower", "window steps that captured or instantiated a graph after "
                            "replays began"),
    "fallbacks": ("lower", "window steps without a graph launch after replays began"),
    "sync_calls_per_step": ("lower", "host synchronize calls per step (median)"),
    "untraced_step_mean_ns": ("lower", "mean step time without the profiler (the untraced "
                                       "run recorded beside the trace)"),
    "untraced_step_p50_ns": ("lower", "median step time without the profiler"),
    "profiler_inflation": ("lower", "traced / untraced mean step time of the same steps"),
}

#: The ``kind`` of the document ``cgprof check --save-baseline`` writes.
BASELINE_KIND = "cgprof-check-baseline"

#: Regression rules used when a baseline is given and no regression rule is configured.
DEFAULT_REGRESSIONS = {
    "step_p50_ns": 0.05,
    "step_p99_ns": 0.10,
    "launch_calls_per_step": 0.05,
    "compactness_p50": 0.05,
}

#: Figures that count things: integers in every output.
COUNT_FIGURES = ("steps", "recaptures", "fallbacks")

#: Figures an incomplete trace cannot support (cgprof.metrics.completeness): None there,
#: and a rule on one is skipped under ``--allow-incomplete``.
GPU_FIGURES = ("graph_kernel_share", "graph_gpu_share", "compactness_p50", "gpu_idle_pct")

#: The message of a rule skipped on an incomplete trace's GPU figure.
NOT_RECORDED = "unavailable: not recorded (the trace is incomplete)"


def incomplete_of(result: Any) -> list[str]:
    """What an analysis (an AnalysisResult, an ``analyze --json`` document or a baseline)
    says is missing from its trace; empty when the trace is complete."""
    if isinstance(result, dict):
        if result.get("kind") == BASELINE_KIND:
            return list(result.get("incomplete") or [])
        return list((result.get("completeness") or {}).get("missing") or [])
    c = getattr(result, "completeness", None)
    return [] if c is None else list(c.missing)


class CheckConfigError(CgprofError):
    """Bad rule, configuration or baseline: `cgprof check` exits 2."""


# --- figures ---------------------------------------------------------------------------------


def _num(v: Any) -> float | None:
    if v is None:
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else f


def _quantile(values: list[float], q: float) -> float | None:
    """Linear-interpolated quantile (numpy's default), None when empty."""
    vals = sorted(v for v in values if v is not None and not math.isnan(v))
    if not vals:
        return None
    pos = q * (len(vals) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(vals) - 1)
    return vals[lo] + (vals[hi] - vals[lo]) * (pos - lo)


def _typed(figs: dict[str, Any]) -> dict[str, float | None]:
    """Every figure in :data:`FIGURES` order; counts as ints, the rest as floats or None."""
    out: dict[str, float | None] = {}
    for name in FIGURES:
        v = _num(figs.get(name))
        out[name] = int(v) if v is not None and name in COUNT_FIGURES else v
    return out


def _figures_from(steps: list[dict[str, Any]], compactness_p50: Any,
                  devices: list[dict[str, Any]], coverage: dict[str, Any],
                  untraced: dict[str, Any] | None) -> dict[str, float | None]:
    """Figures from plain records: the step table, replay compactness p50, the device table,
    the analysis window's coverage summary (cgprof.metrics.coverage.CoverageResult) and the
    untraced times (cgprof.untraced.UntracedTimes as a dict, None: not measured)."""
    u = untraced if untraced and untraced.get("available") else {}
    eff = [v for v in (_num(s.get("effective_ns")) for s in _window_steps(steps))
           if v is not None]
    idle = [_num(d.get("idle_pct")) for d in devices if (_num(d.get("window_ns")) or 0) > 0]
    return _typed({
        "steps": coverage.get("steps"),
        "step_p50_ns": _quantile(eff, 0.5),
        "step_p99_ns": _quantile(eff, 0.99),
        "launch_calls_per_step": coverage.get("launch_calls_per_step_p50"),
        "graph_kernel_share": coverage.get("graph_kernel_share"),
        "graph_gpu_share": coverage.get("graph_gpu_share"),
        "compactness_p50": compactness_p50,
        "gpu_idle_pct": max((v for v in idle if v is not None), default=None),
        "recaptures": coverage.get("recaptures"),
        "fallbacks": coverage.get("fallbacks"),
        "sync_calls_per_step": coverage.get("sync_calls_per_step_p50"),
        "untraced_step_mean_ns": u.get("mean_ns"),
        "untraced_step_p50_ns": u.get("p50_ns"),
        "profiler_inflation": u.get("inflation"),
    })


def _window_steps(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The steps of the analysis window: ``in_window`` rows, every row when none is (as
    ``StepResult.window_steps``)."""
    sel = [s for s in steps if s.get("in_window")]
    return sel or steps


def figures(result: Any) -> dict[str, float | None]:
    """Named figures (:data:`FIGURES`) of one analysis; None where the trace cannot say.

    ``result`` is an :class:`~cgprof.metrics.AnalysisResult`, the one-trace document of
    ``cgprof analyze --json`` (a dict), or a baseline document from :func:`baseline_document`.
    """
    figs = _figures(result)
    if incomplete_of(result):
        figs.update({k: None for k in GPU_FIGURES})
    return figs


def _figures(result: Any) -> dict[str, float | None]:
    if isinstance(result, dict):
        if result.get("kind") == BASELINE_KIND:
            if "ranks" in result:
                raise CheckConfigError(
                    "a baseline of several ranks has one set of figures per rank: read it "
                    "with load_run")
            return _typed(result.get("figures") or {})
        steps = (result.get("steps") or {}).get("steps", [])
        comp = (((result.get("replays") or {}).get("summary") or {}).get("compactness")
                or {}).get("p50")
        devices = (result.get("gpu") or {}).get("devices", [])
        cov = result.get("coverage")
        if isinstance(cov, dict) and isinstance(cov.get("summary"), dict):
            cov = cov["summary"]
        return _figures_from(steps, comp, devices, cov if isinstance(cov, dict) else {},
                             result.get("untraced"))
    from cgprof.records import frame_records

    comp = (result.replays.summary.get("compactness") or {}).get("p50")
    u = getattr(result, "untraced", None)
    return _figures_from(frame_records(result.steps.steps), comp,
                         frame_records(result.gaps.devices), dict(result.coverage.summary),
                         u.to_dict() if u is not None else None)


def baseline_document(figs: dict[str, float | None], source: str) -> dict[str, Any]:
    """What ``cgprof check --save-baseline`` writes: the figures of one run, versioned."""
    from cgprof.version import JSON_SCHEMA_VERSION, __version__

    return {"schema_version": JSON_SCHEMA_VERSION, "kind": BASELINE_KIND,
            "cgprof_version": __version__, "source": source,
            "figures": {k: figs.get(k) for k in FIGURES}}


def with_incomplete(doc: dict[str, Any], run: RunFigures) -> dict[str, Any]:
    """A baseline document with what its run's incomplete ranks lack (``incomplete``: a list
    for a single-rank run, rank id -> list for several; absent when complete)."""
    if run.incomplete:
        doc["incomplete"] = ({str(k): v for k, v in run.incomplete.items()} if run.multi
                             else run.incomplete.get(0, []))
    return doc


def _load_json(path: Path) -> dict[str, Any]:
    from cgprof.version import JSON_SCHEMA_VERSION

    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise CheckConfigError(f"{path}: cannot read: {exc}") from None
    except json.JSONDecodeError as exc:
        raise CheckConfigError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    if not isinstance(doc, dict) or "schema_version" not in doc:
        raise CheckConfigError(f"{path}: not a cgprof JSON document (no schema_version)")
    if doc["schema_version"] != JSON_SCHEMA_VERSION:
        raise CheckConfigError(
            f"{path}: written with JSON schema_version {doc['schema_version']!r}; this cgprof "
            f"reads {JSON_SCHEMA_VERSION} (re-create it with this cgprof)")
    if "traces" in doc:
        # `cgprof analyze --json` of a multi-rank run: one document per rank, each with its
        # `rank` object; documents of several unrelated traces have no rank to pair them by.
        traces = doc["traces"]
        if (not isinstance(traces, list) or not traces
                or not all(isinstance(t, dict) and isinstance(t.get("rank"), dict)
                           and _is_int(t["rank"].get("rank")) for t in traces)):
            n = len(traces) if isinstance(traces, list) else 0
            raise CheckConfigError(f"{path}: holds {n} traces; give the JSON of one trace")
        ids = [t["rank"]["rank"] for t in traces]
        if len(set(ids)) != len(ids):
            raise CheckConfigError(f"{path}: holds rank {_dup(ids)} more than once")
        for t in traces:
            _check_analysis_doc(t, path, f" (rank {t['rank']['rank']})")
    elif doc.get("kind") == BASELINE_KIND:
        if "ranks" in doc:
            ranks = doc["ranks"]
            if (not isinstance(ranks, dict) or not ranks
                    or not all(re.fullmatch(r"\d+", str(k)) and isinstance(v, dict)
                               for k, v in ranks.items())):
                raise CheckConfigError(
                    f"{path}: 'ranks' must map rank ids (\"0\", \"1\", ...) to figures")
    else:
        _check_analysis_doc(doc, path, "")
    return doc


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _dup(ids: list[Any]) -> Any:
    return next(i for i in ids if ids.count(i) > 1)


def _check_analysis_doc(doc: dict[str, Any], path: Path, where: str) -> None:
    if not isinstance(doc.get("steps"), dict):
        raise CheckConfigError(
            f"{path}: not a cgprof analyze or baseline document (no steps){where}")
    if not isinstance(doc.get("coverage"), dict):
        raise CheckConfigError(
            f"{path}: written by a cgprof without the analysis window's coverage "
            f"figures{where}; re-run `cgprof analyze --json` on its trace")


def _is_json(path: Path) -> bool:
    try:
        with path.open("rb") as fh:
            head = fh.read(64).lstrip()
    except OSError:
        return False
    return head.startswith(b"{")


@dataclass
class RunFigures:
    """The figures of one run, per rank: ``ranks`` maps rank id -> figures. ``multi`` is False
    for a single-process trace (its one set is rank 0) and for a one-trace JSON document or
    baseline; ``ids`` are every rank id the input holds (``ranks`` may hold only some of them
    when one was asked for)."""

    ranks: dict[int, dict[str, float | None]]
    multi: bool
    ids: list[int] = field(default_factory=list)
    #: rank id -> what its trace lacks (cgprof.metrics.completeness), for incomplete ranks
    incomplete: dict[int, list[str]] = field(default_factory=dict)

    def select(self, rank: int | None, path: str | Path) -> RunFigures:
        """Only rank ``rank`` (all when None); a rank the input does not hold is an error."""
        if rank is None:
            return self
        from cgprof.ranks import missing_rank

        error = missing_rank(path, rank, self.ids if self.multi else [0])
        if error is not None:
            raise CheckConfigError(error)
        if not self.multi:
            return self
        return RunFigures({rank: self.ranks[rank]}, True, self.ids,
                          {k: v for k, v in self.incomplete.items() if k == rank})


def _json_run(doc: dict[str, Any]) -> RunFigures:
    gone: dict[int, list[str]] = {}
    if "traces" in doc:
        ranks = {int(t["rank"]["rank"]): figures(t) for t in doc["traces"]}
        gone = {int(t["rank"]["rank"]): incomplete_of(t) for t in doc["traces"]}
    elif doc.get("kind") == BASELINE_KIND and "ranks" in doc:
        ranks = {int(k): _typed(v) for k, v in doc["ranks"].items()}
        gone = {int(k): list(v) for k, v in (doc.get("incomplete") or {}).items()}
    else:
        return RunFigures({0: figures(doc)}, False, [0], _gone({0: incomplete_of(doc)}))
    ranks = dict(sorted(ranks.items()))
    return RunFigures(ranks, True, list(ranks), _gone(gone))


def _gone(missing: dict[int, list[str]]) -> dict[int, list[str]]:
    """The incomplete ranks only."""
    return {k: v for k, v in missing.items() if v}


def _run_of(results: dict[int, Any], multi: bool, ids: list[int]) -> RunFigures:
    """The RunFigures of analyses by rank id."""
    return RunFigures({k: figures(r) for k, r in results.items()}, multi, ids,
                      _gone({k: incomplete_of(r) for k, r in results.items()}))


def load_run(path: str | Path, step: str | None = None, skip: int = 0,
             only: int | None = None,
             planned: Callable[[Path, int], None] | None = None,
             progress: Callable[[str], None] | None = None,
             plan: Plan | None = None,
             apart: Callable[[Path, int], None] | None = None) -> RunFigures:
    """Figures of a trace or JSON document, one set per rank.

    A trace whose GPU work comes from several processes (a ``torchrun`` job in one nsys
    report) is split into ranks (:func:`cgprof.ranks.rank_heads`) and each rank's sub-trace
    is cut and analysed on its own, one at a time, as ``cgprof analyze`` does; ``only``
    analyses just that rank of such a trace (none when it has no such rank). A JSON document
    is a baseline file (one set of figures, or ``ranks``) or the ``cgprof analyze --json``
    document of one trace or of a multi-rank run (every trace document with its ``rank``).

    Within the memory cap as ``cgprof analyze``: a trace of several ranks whose whole
    analysis would exceed it is read one rank at a time, a one-process trace a chunk of
    steps at a time (cgprof.metrics.chunked.analyze_capped: the same figures);
    ``planned(path, chunks)`` is told how many chunks, ``apart(path, ranks)`` how many
    ranks are read one at a time. ``progress``: told each stage of
    the load and the analysis (a rank's prefixed ``rank ID (i/n):``). ``plan``: the trace's
    (:func:`cgprof.plan.plan_input`), when the caller made it already."""
    path = Path(path)
    if path.is_file() and _is_json(path):
        return _json_run(_load_json(path))
    from cgprof.io.loader import load
    from cgprof.metrics import analyze
    from cgprof.metrics.chunked import analyze_capped
    from cgprof.plan import CHUNKS, RANK_BY_RANK, plan_input
    from cgprof.ranks import (
        analyze_rank,
        apart_results,
        gpu_pids,
        rank_heads,
        rank_of,
    )

    plan = plan_input(path) if plan is None else plan
    if plan.shape == RANK_BY_RANK:  # one rank's rows at a time
        if apart is not None:
            apart(path, len(plan.heads))
        done = apart_results(path, list(plan.heads), step=step, skip=skip, only=only,
                             progress=progress)
        return _run_of({r.rank_id: r.result for r in done}, True, plan.rank_ids)
    if plan.shape == CHUNKS:  # one process over the cap: a chunk of steps at a time
        chunked = analyze_capped(path, step=step, skip=skip, progress=progress,
                                 planned=None if planned is None
                                 else lambda chunks: planned(path, chunks))
        if chunked is not None:
            return _run_of({0: chunked}, False, [0])
    trace = load(path, progress)
    if len(gpu_pids(trace)) <= 1:
        return _run_of({0: analyze(trace, step=step, skip=skip, progress=progress)}, False,
                       [0])
    heads = rank_heads(trace)
    ids = [h.rank_id for h in heads]
    chosen = [h for h in heads if only is None or h.rank_id == only]
    return _run_of({h.rank_id: analyze_rank(
        rank_of(trace, h), str(path), step=step, skip=skip,
        progress=prefixed(progress, f"rank {h.rank_id} ({i}/{len(chosen)}): ")).result
        for i, h in enumerate(chosen, 1)}, True, ids)


def run_baseline_document(run: RunFigures, source: str) -> dict[str, Any]:
    """What ``--save-baseline`` writes for a run: :func:`baseline_document` of a single-rank
    run, or the same document with ``ranks`` (rank id -> figures) instead of ``figures``."""
    if not run.multi:
        return with_incomplete(baseline_document(run.ranks[0], source), run)
    doc = baseline_document({}, source)
    del doc["figures"]
    doc["ranks"] = {str(i): {k: figs.get(k) for k in FIGURES} for i, figs in run.ranks.items()}
    return with_incomplete(doc, run)


# --- rules -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rule:
    """One check. ``op``: "max" / "min" against ``limit``, or "regress" against the baseline
    with relative ``tolerance`` (0.05 = 5%) in the figure's worse direction."""

    figure: str
    op: str
    limit: float | None = None
    tolerance: float | None = None

    @property
    def name(self) -> str:
        return f"{self.op}_{self.figure}"


@dataclass
class RuleResult:
    """A rule applied: status "pass", "fail" or "skip" (a regression rule whose baseline has
    no value), the figure's value, the limit it was held to, the baseline's value."""

    rule: Rule
    status: str
    value: float | None
    limit: float | None
    baseline: float | None
    message: str
    #: The rank the rule was applied to; None for a single-rank run.
    rank: int | None = None


@dataclass
class CheckResult:
    """All rules applied to one run. For a run of several ranks, every :class:`RuleResult`
    carries its rank, ``ranks`` holds each rank's figures and ``baseline_ranks`` the baseline
    figures it was compared with (None: no baseline, or the rank is not in it); ``figures``
    and ``baseline_figures`` are then empty / None. ``notes`` say how ranks were paired."""

    source: str
    baseline_source: str | None
    figures: dict[str, float | None]
    baseline_figures: dict[str, float | None] | None
    results: list[RuleResult] = field(default_factory=list)
    ranks: dict[int, dict[str, float | None]] | None = None
    baseline_ranks: dict[int, dict[str, float | None] | None] | None = None
    notes: list[str] = field(default_factory=list)
    #: rank id (0 for a single-rank run) -> what its trace lacks, for incomplete ranks: the
    #: check fails on them unless ``allow_incomplete``
    incomplete: dict[int, list[str]] = field(default_factory=dict)
    allow_incomplete: bool = False

    @property
    def multi(self) -> bool:
        return self.ranks is not None

    def for_rank(self, rank: int) -> CheckResult:
        """Rank ``rank``'s part as a single-rank result (its figures and rule results)."""
        assert self.ranks is not None and self.baseline_ranks is not None
        return CheckResult(source=self.source, baseline_source=self.baseline_source,
                           figures=self.ranks[rank], baseline_figures=self.baseline_ranks[rank],
                           results=[r for r in self.results if r.rank == rank])

    @property
    def failed(self) -> list[RuleResult]:
        return [r for r in self.results if r.status == "fail"]

    @property
    def passed(self) -> bool:
        return not self.failed and (self.allow_incomplete or not self.incomplete)

    def counts(self) -> dict[str, int]:
        return {s: sum(1 for r in self.results if r.status == s) for s in ("pass", "fail", "skip")}


def fmt(v: float | None, figure: str = "") -> str:
    """A figure for people: times (``*_ns``) in us or ms, integers plainly, else 4 significant
    digits."""
    if v is None:
        return "n/a"
    if figure.endswith("_ns"):
        return f"{v / 1e6:.3f} ms" if abs(v) >= 1e6 else f"{v / 1e3:.1f} us"
    if float(v).is_integer() and abs(v) < 1e15:
        return str(int(v))
    return f"{v:.4g}"


def _check_figure(figure: str, where: str) -> None:
    if figure not in FIGURES:
        raise CheckConfigError(
            f"{where}: unknown figure '{figure}' (known: {', '.join(FIGURES)})")


def parse_tolerance(text: Any, where: str) -> float:
    """``"5%"`` -> 0.05. Only percentages: a bare 0.05 could mean 5% or 0.05%."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*%\s*", text) if isinstance(text, str) else None
    if m is None:
        raise CheckConfigError(f"{where}: tolerance {text!r} must be a percentage like '5%'")
    return float(m.group(1)) / 100.0


def _limit(value: Any, where: str) -> float:
    """A rule's limit: a TOML number, or the text after ``=`` on the command line."""
    if isinstance(value, str):
        try:
            f = float(value)
        except ValueError:
            f = math.nan
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        f = float(value)
    else:
        f = math.nan
    if math.isnan(f) or math.isinf(f):
        raise CheckConfigError(f"{where}: limit {value!r} is not a number")
    return f


def parse_rule(op: str, text: str, where: str = "") -> Rule:
    """``--max FIGURE=LIMIT``, ``--min FIGURE=LIMIT``, ``--regress FIGURE=TOL%``."""
    where = where or f"--{op} {text}"
    figure, sep, value = text.partition("=")
    if not sep or not figure.strip() or not value.strip():
        raise CheckConfigError(f"{where}: expected FIGURE=VALUE")
    figure = figure.strip()
    _check_figure(figure, where)
    if op == "regress":
        return Rule(figure, op, tolerance=parse_tolerance(value, where))
    return Rule(figure, op, limit=_limit(value.strip(), where))


def evaluate(rules: list[Rule], figs: dict[str, float | None],
             baseline: dict[str, float | None] | None = None, source: str = "",
             baseline_source: str | None = None) -> CheckResult:
    """Apply ``rules`` to one run's figures (one rank's, where a trace holds several)."""
    out = CheckResult(source=source, baseline_source=baseline_source, figures=figs,
                      baseline_figures=baseline)
    for rule in rules:
        value = figs.get(rule.figure)
        base = baseline.get(rule.figure) if baseline is not None else None

        def f(v: float | None, figure: str = rule.figure) -> str:
            return fmt(v, figure)

        if rule.op in ("max", "min"):
            limit = rule.limit
            if value is None:
                status, msg = "fail", f"{rule.figure} is not measured in this run"
            elif (value <= limit) if rule.op == "max" else (value >= limit):  # type: ignore
                status, msg = "pass", ""
            else:
                word = "above" if rule.op == "max" else "below"
                status, msg = "fail", f"{rule.figure} {f(value)} is {word} {f(limit)}"
        elif rule.op == "regress":
            if baseline is None:
                raise CheckConfigError(
                    f"regression rule {rule.figure} needs a baseline (--baseline)")
            tol = rule.tolerance or 0.0
            lower_better = FIGURES[rule.figure][0] == "lower"
            if base is None:
                status, limit, msg = "skip", None, "the baseline has no value"
            else:
                limit = base * (1 + tol) if lower_better else base * (1 - tol)
                if value is None:
                    status, msg = "fail", f"{rule.figure} is not measured in this run but " \
                                          f"the baseline has {f(base)}"
                elif (value <= limit) if lower_better else (value >= limit):
                    status, msg = "pass", ""
                else:
                    change = (value - base) / base * 100 if base else math.inf
                    status, msg = "fail", (f"{rule.figure} {f(value)} vs baseline {f(base)} "
                                           f"({change:+.1f}%, tolerance {tol * 100:g}%)")
        else:
            raise CheckConfigError(f"unknown rule operator {rule.op!r}")
        out.results.append(RuleResult(rule, status, value, limit, base, msg))
    return out


def evaluate_run(rules: list[Rule], run: RunFigures, baseline: RunFigures | None = None,
                 source: str = "", baseline_source: str | None = None,
                 allow_incomplete: bool = False) -> CheckResult:
    """Apply ``rules`` to every rank of ``run``; a single-rank run against a single-rank (or
    no) baseline is exactly :func:`evaluate`, and the run fails when a rank's trace is
    incomplete (cgprof.metrics.completeness) unless ``allow_incomplete``: then a rule on a
    GPU figure it lacks (:data:`GPU_FIGURES`) is skipped and the rest are judged.

    Rank ``i`` is compared with the baseline's rank ``i``; a rank the baseline lacks gets
    ``skip`` for the regression rules. A single-rank baseline is compared with every rank; a
    single-rank run against a baseline of several ranks is its rank 0."""
    out = _evaluate_run(rules, run, baseline, source, baseline_source)
    out.incomplete, out.allow_incomplete = dict(run.incomplete), allow_incomplete
    for r in out.results:
        if (r.value is None and r.rule.figure in GPU_FIGURES
                and (r.rank if r.rank is not None else 0) in run.incomplete):
            r.status, r.message = ("skip" if allow_incomplete else "fail"), NOT_RECORDED
    return out


def _evaluate_run(rules: list[Rule], run: RunFigures, baseline: RunFigures | None,
                  source: str, baseline_source: str | None) -> CheckResult:
    if not run.multi and (baseline is None or not baseline.multi):
        return evaluate(rules, run.ranks[0], None if baseline is None else baseline.ranks[0],
                        source=source, baseline_source=baseline_source)
    out = CheckResult(source=source, baseline_source=baseline_source, figures={},
                      baseline_figures=None, ranks=dict(run.ranks), baseline_ranks={})
    if baseline is not None:
        if not baseline.multi:
            out.notes.append("the baseline holds one rank: every rank is compared with it")
        elif not run.multi:
            out.notes.append("the run holds one rank: compared as rank 0 with the baseline's "
                             "rank 0")
    known = ", ".join(str(i) for i in baseline.ids) if baseline is not None else ""
    for rank, figs in run.ranks.items():
        base: dict[str, float | None] | None = None
        if baseline is not None:
            base = baseline.ranks[0] if not baseline.multi else baseline.ranks.get(rank)
        res = evaluate(rules, figs, base if baseline is None or base is not None else {})
        for r in res.results:
            r.rank = rank
            if baseline is not None and base is None and r.rule.op == "regress":
                r.message = f"rank {rank} is not in the baseline (ranks: {known})"
        out.results.extend(res.results)
        assert out.baseline_ranks is not None
        out.baseline_ranks[rank] = base
    return out


# --- configuration ---------------------------------------------------------------------------


@dataclass
class CheckConfig:
    """Rules and options from a TOML table; ``path`` is the file they came from."""

    rules: list[Rule] = field(default_factory=list)
    baseline: Path | None = None
    step: str | None = None
    skip: int | None = None
    history: Path | None = None
    path: Path | None = None


def _toml_load(path: Path) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except OSError as exc:
        raise CheckConfigError(f"{path}: cannot read: {exc.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise CheckConfigError(f"{path}: not valid TOML ({exc})") from None


def _table(doc: dict[str, Any]) -> dict[str, Any] | None:
    t = doc.get("tool", {})
    t = t.get("cgprof", {}) if isinstance(t, dict) else None
    t = t.get("check") if isinstance(t, dict) else None
    return t if isinstance(t, dict) else None


def find_pyproject(start: Path) -> Path | None:
    """The nearest ``pyproject.toml`` from ``start`` upward with a [tool.cgprof.check] table."""
    for folder in (start, *start.parents):
        candidate = folder / "pyproject.toml"
        if candidate.is_file() and _table(_toml_load(candidate)) is not None:
            return candidate
    return None


def load_config(path: Path | None = None, cwd: Path | None = None) -> CheckConfig:
    """Read ``path`` (``--config``), else the nearest pyproject.toml's [tool.cgprof.check].

    In a ``--config`` file the keys sit in [tool.cgprof.check] or at the top level. Keys:
    ``max_FIGURE`` / ``min_FIGURE`` = number, a ``[...regress]`` table of FIGURE = "5%",
    ``baseline``, ``history`` (paths relative to the file), ``step``, ``skip``.
    """
    if path is None:
        path = find_pyproject((cwd or Path.cwd()).resolve())
        if path is None:
            return CheckConfig()
        table = _table(_toml_load(path)) or {}
        where = f"{path}: [tool.cgprof.check]"
    else:
        if not path.is_file():
            raise CheckConfigError(f"{path}: config file not found")
        doc = _toml_load(path)
        found = _table(doc)
        where = f"{path}: [tool.cgprof.check]" if found is not None else f"{path}:"
        table = found if found is not None else doc
    cfg = CheckConfig(path=path)
    base_dir = path.parent
    for key, value in table.items():
        op, _, figure = key.partition("_")
        if op in ("max", "min") and figure in FIGURES:
            cfg.rules.append(Rule(figure, op, limit=_limit(value, f"{where} {key}")))
        elif key == "regress":
            if not isinstance(value, dict):
                raise CheckConfigError(f"{where} regress must be a table of FIGURE = \"5%\"")
            for fig, tol in value.items():
                _check_figure(fig, f"{where} regress")
                cfg.rules.append(Rule(fig, "regress",
                                      tolerance=parse_tolerance(tol, f"{where} regress.{fig}")))
        elif key in ("baseline", "history"):
            if not isinstance(value, str) or not value:
                raise CheckConfigError(f"{where} {key} must be a path (a string)")
            setattr(cfg, key, base_dir / value)
        elif key == "step":
            if not isinstance(value, str) or not value:
                raise CheckConfigError(f"{where} step must be a string NAME[@DOMAIN]")
            cfg.step = value
        elif key == "skip":
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise CheckConfigError(f"{where} skip must be a whole number >= 0")
            cfg.skip = value
        else:
            known = ", ".join([f"max_{f}" for f in FIGURES] + ["min_FIGURE", "regress",
                              "baseline", "history", "step", "skip"])
            raise CheckConfigError(f"{where} unknown key '{key}' (known: {known})")
    return cfg


def merge_rules(config: list[Rule], flags: list[Rule]) -> list[Rule]:
    """Flags replace the configured rule of the same name; order: config, then new flags."""
    by_name = {r.name: r for r in config}
    for r in flags:
        by_name[r.name] = r
    return list(by_name.values())
