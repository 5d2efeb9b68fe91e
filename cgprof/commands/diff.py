"""`cgprof diff BASELINE CANDIDATE`: two runs compared step by step (table, JSON, HTML).

A thin skin over :func:`cgprof.diff.diff`: parse the options, analyse both traces (once when
the same file is given twice), view and compare them (what :func:`cgprof.diff.diff` does,
the baseline's view made before the candidate is analysed), render. `CgprofError` becomes one
line, no traceback.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import click

from cgprof.commands.engine_opts import (
    engine_options,
    note_apart,
    note_chunked,
    note_drawn_whole,
)
from cgprof.errors import CgprofError
from cgprof.io.cache import writing_in_background

if TYPE_CHECKING:
    from cgprof.diff import RunView


@dataclass
class _Apart:
    """A run's view without its analysis's events (RunView.without_events), or the error
    its view raised, and the analysis's rows (kernels + API calls)."""

    made: Any
    rows: int

    def view(self) -> Any:
        if isinstance(self.made, CgprofError):
            raise self.made
        return self.made


def _view_apart(result, run: tuple, max_events: int | None) -> _Apart:
    """The view of ``run`` (label, steps, mode) of ``result``, apart from it: without its
    events, or with those its timeline can draw (``max_events``: the HTML page's cap)."""
    from cgprof.diff import view

    made: RunView | CgprofError
    try:
        v = view(result, *run)
        if max_events is None:
            made = v.without_events()
        elif result.trace is None:  # a chunked analysis: the timeline it gathered
            from cgprof.report.figures import chunked_timeline

            made = chunked_timeline(result, v)
        else:
            from cgprof.report.figures import timeline_apart  # plotly: for -o only

            made = timeline_apart(v, max_events)
    except CgprofError as exc:  # reported where diff() would: after both analyses
        made = exc
    return _Apart(made, int(result.info["kernels"]) + int(result.info["api_calls"]))


def _give_back(apart: _Apart) -> None:
    """Give the memory of an analysis no one holds any more back to the OS before the next
    step: its reference cycles, the pages Arrow's pool and the C heap keep
    (cgprof.io.memory.release_memory, from 4M rows on)."""
    import gc

    from cgprof.io.memory import release_memory

    gc.collect()
    release_memory(apart.rows)


def _run(path: Path, step, skip, jobs, rank=None, runs=None, say=None, cap=None):
    """An AnalysisResult, or a RanksResult for a folder or a trace of several ranks; with
    ``rank``, that rank alone as an AnalysisResult with its trace (for the step-aligned table
    and the HTML timeline; a one-process run has only rank 0). ``runs``: the views of it the
    diff shows (label, steps, mode): a one-process trace whose whole analysis would exceed
    the memory cap is then analysed a chunk of steps at a time, gathering their totals, and
    with ``cap`` (the HTML page's events per timeline) what their timelines draw
    (:func:`_chunked`). ``say``: the progress bar's (cgprof.commands.progress), or None."""
    from cgprof.io.loader import load
    from cgprof.metrics import analyze
    from cgprof.metrics.windows import timelines_gathered
    from cgprof.parallel import analyze_files, expand_inputs
    from cgprof.plan import CHUNKS, FOLDER, RANK_BY_RANK, plan_input
    from cgprof.ranks import (
        analyze_ranks,
        analyze_ranks_apart,
        gpu_pids,
        missing_rank,
        rank_heads,
        rank_part,
        sub_trace,
    )

    def fail_unless(ids) -> None:
        error = missing_rank(path, rank, ids)
        if error is not None:
            raise CgprofError(error)

    plan = plan_input(path, chunks=rank is None and runs is not None)
    if plan.shape == FOLDER:
        run = analyze_files(expand_inputs([path]), step=step, skip=skip, jobs=jobs,
                            progress=say)
        if rank is None:
            return run
        # rank ids come from every file's markers; the rank's file is read again for its trace
        fail_unless([r.rank_id for r in run.ranks])
        found = next(r for r in run.ranks if r.rank_id == rank)
        if plan_input(found.path).shape == RANK_BY_RANK:
            return analyze(rank_part(found.path, found.pid, progress=say), step=step,
                           skip=skip, progress=say)
        trace = load(found.path, say)
        if len(gpu_pids(trace)) > 1:
            trace = sub_trace(trace, found.pid)
        return analyze(trace, step=step, skip=skip, progress=say)
    if plan.shape == RANK_BY_RANK:  # one rank's rows at a time
        apart = list(plan.heads)
        note_apart(path, len(apart))
        if rank is None:
            return analyze_ranks_apart(path, apart, step=step, skip=skip, keep=False,
                                       gap_limit=0, progress=say)
        fail_unless([h.rank_id for h in apart])
        return analyze(rank_part(path, next(h.pid for h in apart if h.rank_id == rank),
                                 progress=say), step=step, skip=skip, progress=say)
    drawn = False  # read whole over the cap for the HTML page
    if plan.shape == CHUNKS:
        chunked = _chunked(path, step, skip, runs, say, cap)
        if chunked is not None and (cap is None or timelines_gathered(chunked.windows)):
            return chunked
        drawn = chunked is not None  # (its timelines' calls too many to count apart)
        del chunked
    trace = load(path, say)
    if drawn and len(gpu_pids(trace)) == 1:
        note_drawn_whole(path)
    if len(gpu_pids(trace)) > 1:
        if rank is None:  # the ranks' tables are compared: no timeline, no gap list
            return analyze_ranks(trace, step=step, skip=skip, keep=False, gap_limit=0,
                                 progress=say)
        heads = rank_heads(trace)  # only the rank asked for is cut and analysed
        fail_unless([h.rank_id for h in heads])
        pid = next(h.pid for h in heads if h.rank_id == rank)
        return analyze(sub_trace(trace, pid), step=step, skip=skip, progress=say)
    if rank is not None:
        fail_unless([0])
    return analyze(trace, step=step, skip=skip, progress=say)


def _chunked(path: Path, step, skip, runs, say=None, cap=None):
    """The chunked analysis of the one-process trace at ``path`` with the totals of the
    views ``runs`` and, given ``cap``, what their timelines draw (at most ``cap`` events
    each) (cgprof.metrics.chunked.analyze_capped), or None when that path does not take it
    (analysed whole then, the cap noted at the end)."""
    from cgprof.diff import window_asker
    from cgprof.metrics.chunked import analyze_capped

    return analyze_capped(path, step=step, skip=skip, progress=say,
                          planned=lambda chunks: note_chunked(path, chunks), gap_limit=0,
                          windows=window_asker(path, runs), timelines=cap)


def _emit(text: str, document: Callable[[], str], json_out: str | None, force: bool) -> None:
    """The diff's report: the JSON ``document()`` alone on stdout with ``--json -``, else
    the ``text`` table, and with ``--json PATH`` the document written to PATH too."""
    from cgprof.report.output import write_atomic

    if json_out == "-":
        click.echo(document(), nl=False)
        return
    click.echo(text, nl=False)
    if json_out is not None:
        write_atomic(Path(json_out), document(), force)
        click.echo(f"wrote {json_out}")


@click.command("diff")
@click.argument("baseline", type=click.Path(path_type=Path))
@click.argument("candidate", type=click.Path(path_type=Path))
@click.option("-o", "--output", "html_out", type=click.Path(path_type=Path), metavar="PATH",
              help="Write the interactive step-aligned HTML report to PATH.")
@click.option("--json", "json_out", metavar="PATH|-",
              help="Write the comparison as JSON to PATH ('-' for stdout, replacing the table).")
@click.option("--labels", metavar="BASE,CAND",
              help="Names of the two runs [default: baseline,candidate, or the --mode values].")
@click.option("--steps", "steps", metavar="A:B[,C:D]",
              help="Window of steps to compare: positions A to B-1 of the analysed steps "
                   "(after --skip and --mode); C:D gives the candidate its own window.")
@click.option("--mode", "mode", metavar="MODE[,MODE]",
              help="Which steps to compare: eager, graph, warmup, capture or all, for both "
                   "runs or as BASE,CAND [default: the steady-state eager and graph steps]; "
                   "e.g. --mode eager,graph compares the two kinds of step of one trace given "
                   "twice.")
@click.option("--step", "step", metavar="NAME[@DOMAIN]",
              help="NVTX range that marks one step (default: step@cgprof, else the best "
                   "repeating range or cycle scored on evidence; see docs/steps.md).")
@click.option("--skip", type=click.IntRange(min=0), default=0, show_default=True,
              help="Leading steps of each trace to leave out (warm-up).")
@click.option("--max-events", type=click.IntRange(min=100), default=None, metavar="N",
              help="Events drawn per run timeline in the HTML report [default: 20000].")
@click.option("--jobs", type=click.IntRange(min=1), default=None, metavar="N",
              help="Worker processes for runs given as folders of per-rank traces.")
@click.option("--rank", "rank", type=click.IntRange(min=0), default=None, metavar="N",
              help="Compare rank N of both runs as two single-rank traces (step-aligned "
                   "table, --steps, --mode and the HTML report); without it, runs of "
                   "several ranks are compared rank by rank and overall.")
@click.option("--force", is_flag=True, help="Overwrite existing output files.")
@click.option("-q", "--quiet", is_flag=True, help="No progress line on stderr.")
@engine_options
@writing_in_background
def command(baseline, candidate, html_out, json_out, labels, steps, mode, step, skip,
            max_events, jobs, rank, force, quiet) -> None:
    """Compare CANDIDATE against BASELINE (nsys SQLite exports), step i against step i.

    \b
      cgprof diff eager.sqlite graph.sqlite --labels eager,graph -o diff.html
      cgprof diff run.sqlite run.sqlite --mode eager,graph      # one trace, both kinds
      cgprof diff a.sqlite b.sqlite --steps 10:30 --json diff.json
      cgprof diff eager_run/ graph_run/                        # folders of per-rank traces
      cgprof diff ddp_eager.sqlite ddp_graph.sqlite --rank 1 -o rank1.html

    Runs with several ranks (a folder of per-rank traces, or one trace of several processes)
    are compared rank by rank and overall; --rank N compares one rank step by step.
    """
    from cgprof.commands import heavy_imports
    from cgprof.commands.progress import clear, labelled, progress_bar
    from cgprof.report.output import check_writable, write_atomic
    from cgprof.scratch import raise_if_stopped

    with heavy_imports():
        from cgprof import metrics  # noqa: F401  (what every analysis runs)
        from cgprof.diff import compare, view
        from cgprof.diff import windows as run_windows
        from cgprof.diff_options import parse_labels, parse_modes, parse_steps
        from cgprof.report import diff_text

    bar = None
    try:
        step_windows = parse_steps(steps)
        modes = parse_modes(mode)
        names = parse_labels(labels)
        if names is None:
            ma, mb = modes
            names = (ma, mb) if ma and mb and ma != mb else ("baseline", "candidate")
        if rank is not None:  # every table, title and legend says which rank it shows
            names = cast("tuple[str, str]",
                         tuple(n if "rank" in n else f"{n} rank {rank}" for n in names))
        outputs = [p for p in (None if json_out in (None, "-") else Path(json_out), html_out)
                   if p is not None]
        for p in outputs:
            check_writable(p, force)
        run_a, run_b = run_windows(names, step_windows, modes)
        same = Path(baseline).resolve() == Path(candidate).resolve()
        bar = progress_bar(quiet, traces=1 if same else 2)
        say_a, say_b = (labelled(bar, Path(p).name) for p in (baseline, candidate))
        cap = None
        if html_out is not None:
            from cgprof.report.figures import DEFAULT_MAX_EVENTS

            cap = max_events or DEFAULT_MAX_EVENTS
        # the views a chunked analysis gathers totals (and, for -o, timelines) for
        runs = [run_a, run_b] if same else [run_a]
        base = _run(baseline, step, skip, jobs, rank, runs, say_a, cap)
        # The diff reads the runs' views only: the baseline's is made before the candidate
        # is analysed and keeps none of its analysis's events but those its timeline can
        # draw (-o), so that one big analysis is held at a time (RunView.without_events,
        # figures.timeline_apart). A view that fails is reported after the candidate's
        # analysis, where diff() would report it.
        early = None
        if not same and not hasattr(base, "cross"):
            early = _view_apart(base, run_a, cap)
            base = None
            _give_back(early)
        # (against a multi-rank baseline the candidate is compared as a run of ranks: no
        # views, and a one-process candidate keeps its trace for that, as the baseline does)
        cand = base if same else _run(candidate, step, skip, jobs, rank,
                                      None if hasattr(base, "cross") else [run_b], say_b, cap)
        if hasattr(base, "cross") or hasattr(cand, "cross"):
            from cgprof.ranks import as_ranks, diff_ranks

            if base is None:  # let go above: analysed again (read from its cache entry)
                base = _run(baseline, step, skip, jobs, rank, say=say_a)
            if html_out is not None or steps is not None or mode is not None:
                raise CgprofError("multi-rank runs are compared rank by rank on their "
                                  "steady-state steps; -o, --steps and --mode compare two "
                                  "single-rank traces: pick one rank with --rank N")
            rd = diff_ranks(as_ranks(base), as_ranks(cand), labels=names)
            clear(bar)
            raise_if_stopped()  # (a signal's: no report)
            _emit(diff_text.render_ranks(rd), lambda: diff_text.render_ranks_json(rd),
                  json_out, force)
            return
        if early is None and cap is not None and getattr(base, "trace", 0) is None:
            # one trace read in chunks: its views' timelines are those it gathered
            result = compare(_view_apart(base, run_a, cap).view(),
                             _view_apart(cand, run_b, cap).view())
        elif early is None:
            result = compare(view(base, *run_a), view(cand, *run_b))
        else:  # and the candidate's view too, before the tables are rendered
            late = _view_apart(cand, run_b, cap)
            cand = None
            _give_back(late)
            result = compare(early.view(), late.view())
        clear(bar)
        raise_if_stopped()  # (a signal's: no report)
        _emit(diff_text.render(result), lambda: diff_text.render_json(result), json_out, force)
        if html_out is not None:
            from cgprof.report import html

            assert cap is not None  # set above for -o
            write_atomic(html_out, html.render_diff(result, cap), force)
            click.echo(f"wrote {html_out}", err=json_out == "-")
    except CgprofError as exc:
        raise click.ClickException(str(exc)) from None
    finally:  # (an error's line, or a stop's, starts on a line of its own)
        clear(bar)
