"""`cgprof analyze TRACE...`: measure launches, GPU gaps, graph replays and steps."""

from __future__ import annotations

from pathlib import Path

import click

from cgprof.commands.engine_opts import (
    engine_options,
    note_apart,
    note_chunked,
    note_drawn_whole,
)
from cgprof.commands.progress import clear, progress_bar
from cgprof.errors import CgprofError, OutputExistsError
from cgprof.io.cache import writing_in_background


def _analyze_one(path: Path, step, skip, min_gap_us, rank, say, html: bool = False,
                 all_gaps: bool = False, apart=None):
    """One file: its AnalysisResult, or a RanksResult when it holds several ranks (each
    rank's sub-trace freed once it is analysed, but the one ``html`` draws: ``rank``'s;
    each keeps the gaps the JSON document lists). ``apart``: the ranks, when the file is to
    be read rank by rank (cgprof.plan: a plan of shape ``rank by rank``)."""
    from cgprof.io.loader import load
    from cgprof.io.trace import gpu_pids
    from cgprof.metrics import analyze
    from cgprof.report.json_report import GAP_LIST_LIMIT

    kw = {"step": step, "skip": skip, "min_gap_us": min_gap_us, "rank": rank,
          "keep": rank if html and rank is not None else False,
          "gap_limit": None if all_gaps else GAP_LIST_LIMIT, "progress": say}
    if apart:
        from cgprof.ranks import analyze_ranks_apart

        return analyze_ranks_apart(path, apart, **kw)
    trace = load(path, say)
    if len(gpu_pids(trace)) > 1:
        from cgprof.ranks import analyze_ranks

        return analyze_ranks(trace, **kw)
    if rank is not None:
        from cgprof.ranks import rank_heads

        ids = [h.rank_id for h in rank_heads(trace)]
        if rank not in ids:
            known = ", ".join(str(i) for i in ids) or "none"
            raise CgprofError(f"--rank {rank}: no such rank in {path} (ranks: {known})")
    result = analyze(trace, step=step, skip=skip, min_gap_us=min_gap_us, progress=say)
    del trace
    # what the text and JSON reports print, the rest let go before the next trace (the
    # HTML page draws the trace)
    return result if html else result.light(kw["gap_limit"])


def _analyze_chunked(path: Path, step, skip, min_gap_us, say, page=None):
    """A one-process trace whose whole analysis would exceed the memory cap, read a chunk of
    steps at a time (cgprof.metrics.chunked.analyze_capped): its light result, or None when
    the trace is not one that path takes (analysed whole then, the cap noted at the end).
    ``page``: (steps window, events per timeline) of the --html page, whose views' totals
    and timeline it then gathers too; None also where that timeline's calls were on too
    many threads to count a chunk at a time."""
    from cgprof.metrics.chunked import analyze_capped
    from cgprof.metrics.windows import timelines_gathered
    from cgprof.report.json_report import GAP_LIST_LIMIT

    windows = cap = None
    if page is not None:
        from cgprof.diff import window_asker
        from cgprof.report.html import single_page_runs

        windows = window_asker(path, single_page_runs(path, page[0]))
        cap = page[1]
    got = analyze_capped(path, step=step, skip=skip, min_gap_us=min_gap_us, progress=say,
                         planned=lambda chunks: note_chunked(path, chunks),
                         gap_limit=GAP_LIST_LIMIT, windows=windows, timelines=cap)
    if got is not None and cap is not None and not timelines_gathered(got.windows):
        note_drawn_whole(path)
        return None
    return got


@click.command("analyze")
@click.argument("traces", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--step", "step", metavar="NAME[@DOMAIN]",
              help="NVTX range that marks one step (default: step@cgprof, else the best "
                   "repeating range or cycle scored on evidence; see docs/steps.md).")
@click.option("--skip", type=click.IntRange(min=0), default=0, show_default=True,
              help="Leading steps to leave out (warm-up).")
@click.option("--min-gap-us", type=click.FloatRange(min=0), default=0.0, show_default=True,
              help="List only GPU gaps longer than this (all gaps still count as idle).")
@click.option("--json", "json_out", metavar="PATH|-",
              help="Write every table as JSON to PATH ('-' for stdout, replacing the summary).")
@click.option("--all-gaps", is_flag=True,
              help="With --json: list every GPU gap (default: the 1000 longest; the gap "
                   "summaries always cover them all).")
@click.option("--html", "html_out", type=click.Path(path_type=Path), metavar="PATH",
              help="Write an interactive single-file HTML report (one trace only).")
@click.option("--steps", "steps_window", metavar="A:B",
              help="With --html: draw the timeline for steps A to B-1 (0-based).")
@click.option("--max-events", type=click.IntRange(min=100), default=None,
              help="With --html: most events drawn per timeline (default 20000).")
@click.option("--force", is_flag=True, help="Overwrite existing output files.")
@engine_options
@click.option("-q", "--quiet", is_flag=True, help="No progress line on stderr.")
@click.option("--ranks", "many_ranks", is_flag=True,
              help="The TRACES are the ranks of one run (one file per rank, or per node): "
                   "analyse them in parallel and compare ranks step by step. Implied by a "
                   "folder of traces.")
@click.option("--rank", "rank", type=int, default=None, metavar="N",
              help="Show only rank N's report (multi-process traces and --ranks).")
@click.option("--jobs", type=click.IntRange(min=1), default=None, metavar="N",
              help="Worker processes for --ranks / folders [default: the cores].")
@click.option("--dask", "dask", metavar="ADDRESS", envvar="CGPROF_DASK_SCHEDULER",
              help="Analyse the files of --ranks / folders on this dask.distributed scheduler "
                   "(tcp://host:8786; env CGPROF_DASK_SCHEDULER); workers must see the files.")
@writing_in_background
def command(traces, step, skip, min_gap_us, json_out, all_gaps, html_out, steps_window,
            max_events, force, quiet, many_ranks, rank, jobs, dask) -> None:
    """Analyse nsys traces: SQLite exports, .nsys-rep reports, parquetdir/arrowdir exports.

    A trace holding several processes with GPU work (a torchrun launch) is analysed rank by
    rank; a folder of traces, or several traces with --ranks, are the ranks of one run.
    """
    from cgprof.commands import heavy_imports
    from cgprof.report.output import check_writable, write_atomic

    try:
        from cgprof.plan import CHUNKS, RANK_BY_RANK, WHOLE, is_folder_of_traces, plan_input

        many = many_ranks or bool(dask) or any(is_folder_of_traces(Path(t)) for t in traces)
        if html_out is not None and (len(traces) != 1 or many):
            raise CgprofError("--html takes one trace; use `cgprof diff A B` to compare two")
        if html_out is None and (steps_window is not None or max_events is not None):
            raise CgprofError("--steps and --max-events shape the --html report; add --html PATH")
        if all_gaps and json_out is None:
            raise CgprofError("--all-gaps shapes the --json document; add --json PATH")
        outputs = [p for p in (None if json_out in (None, "-") else Path(json_out), html_out)
                   if p is not None]
        for p in outputs:
            check_writable(p, force)
        # A trace over the memory cap is read rank by rank or in chunks (cgprof.plan), and
        # not read ahead whole.
        from cgprof.scratch import raise_if_stopped

        plans = {} if many else {p: plan_input(p, chunks=not all_gaps and rank is None)
                                 for p in traces}
        with heavy_imports():  # first: prefetch imports numpy (through pyarrow) too
            if not many and plans[traces[0]].shape == WHOLE and not plans[traces[0]].over_cap:
                from cgprof.io.prefetch import prefetch

                prefetch(traces[0])  # its big tables are read while the analysis is imported
            from cgprof import metrics  # noqa: F401  (what every analysis runs)
            from cgprof.report import json_report, text
        window = None
        if steps_window is not None:
            from cgprof.diff_options import parse_steps

            window = parse_steps(steps_window)[0]
        say = progress_bar(quiet)
        results: list = []
        if many:
            from cgprof.parallel import analyze_files, expand_inputs

            try:
                results.append(analyze_files(expand_inputs(traces), step=step, skip=skip,
                                             min_gap_us=min_gap_us, jobs=jobs, dask=dask,
                                             rank=rank, progress=say))
            finally:
                clear(say)
        else:
            for path in traces:
                try:
                    plan, chunked = plans[path], None
                    if plan.shape == RANK_BY_RANK:
                        note_apart(path, len(plan.heads))
                    elif plan.shape == CHUNKS:
                        drawn = None  # the page's window and events per timeline
                        if html_out is not None:
                            from cgprof.report.figures import DEFAULT_MAX_EVENTS

                            drawn = (window, max_events or DEFAULT_MAX_EVENTS)
                        chunked = _analyze_chunked(path, step, skip, min_gap_us, say, drawn)
                    results.append(chunked if chunked is not None else _analyze_one(
                        path, step, skip, min_gap_us, rank, say, html=html_out is not None,
                        all_gaps=all_gaps, apart=list(plan.heads) or None))
                finally:
                    clear(say)
        raise_if_stopped()  # (a signal's: no report)
        one = results[0]
        if html_out is not None and hasattr(one, "cross"):
            if rank is None:
                raise CgprofError(f"{traces[0]}: holds {len(one.ranks)} ranks; pick the "
                                  f"one to draw with --rank N")
            one = one.shown()[0].result
        if json_out == "-":
            for piece in json_report.render_chunks(results, all_gaps=all_gaps):
                click.echo(piece, nl=False)
        else:
            click.echo("\n".join(text.render_ranks(r) if hasattr(r, "cross") else
                                 text.render(r) for r in results), nl=False)
            if json_out is not None:
                write_atomic(Path(json_out),
                             json_report.render_chunks(results, all_gaps=all_gaps), force)
                click.echo(f"wrote {json_out}")
        if html_out is not None:
            from cgprof.report import figures, html

            page = html.render_single(one, max_events=max_events or
                                      figures.DEFAULT_MAX_EVENTS, steps=window)
            write_atomic(html_out, page, force)
            click.echo(f"wrote {html_out}", err=json_out == "-")
    except OutputExistsError as exc:
        raise click.ClickException(str(exc)) from None
    except CgprofError as exc:
        raise click.ClickException(str(exc)) from None
