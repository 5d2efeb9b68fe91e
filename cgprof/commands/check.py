"""`cgprof check TRACE` (a CI gate on CUDA Graph health) and `cgprof history RUNS.db`.

Exit codes of `cgprof check`: 0 every rule passed, 1 a rule failed, 2 bad input or
configuration (a missing or malformed trace, baseline, config or rule). `cgprof analyze`
keeps exit 1 for bad input; only this command separates "the gate failed" from "the gate
could not run".
"""

from __future__ import annotations

from pathlib import Path

import click

from cgprof.commands.engine_opts import engine_options, note_apart, note_chunked
from cgprof.commands.progress import clear, labelled, progress_bar
from cgprof.errors import CgprofError
from cgprof.io.cache import writing_in_background


class ConfigProblem(click.ClickException):
    """A one-line error that exits 2 (bad input or configuration)."""

    exit_code = 2


FIGURE_HELP = ("FIGURE is one of steps, step_p50_ns, step_p99_ns, launch_calls_per_step, "
               "graph_kernel_share, graph_gpu_share, compactness_p50, gpu_idle_pct, recaptures, "
               "fallbacks, sync_calls_per_step.")


@click.command("check", epilog=FIGURE_HELP)
@click.argument("trace", type=click.Path(path_type=Path))
@click.option("--baseline", type=click.Path(path_type=Path), metavar="BASE",
              help="Trace, `cgprof analyze --json` document or --save-baseline file to compare "
                   "against (default regressions: step_p50_ns 5%, step_p99_ns 10%, "
                   "launch_calls_per_step 5%, compactness_p50 5%).")
@click.option("--max", "max_rules", multiple=True, metavar="FIGURE=LIMIT",
              help="Fail when FIGURE is above LIMIT (repeatable).")
@click.option("--min", "min_rules", multiple=True, metavar="FIGURE=LIMIT",
              help="Fail when FIGURE is below LIMIT (repeatable).")
@click.option("--regress", "regress_rules", multiple=True, metavar="FIGURE=TOL%",
              help="Fail when FIGURE is worse than the baseline's by more than TOL% "
                   "(repeatable).")
@click.option("--config", "config_path", type=click.Path(path_type=Path), metavar="FILE",
              help="TOML file with the rules (default: [tool.cgprof.check] in the nearest "
                   "pyproject.toml).")
@click.option("--step", "step", metavar="NAME[@DOMAIN]",
              help="NVTX range that marks one step (as in `cgprof analyze`).")
@click.option("--skip", type=click.IntRange(min=0), default=None,
              help="Leading steps to leave out (warm-up) of TRACE and a trace BASE.")
@click.option("--json", "json_out", metavar="PATH|-",
              help="Write the result as JSON to PATH ('-' for stdout, replacing the text).")
@click.option("--junit", "junit_out", type=click.Path(path_type=Path), metavar="PATH",
              help="Write a JUnit XML file (one test case per rule).")
@click.option("--github", is_flag=True,
              help="Also print GitHub Actions annotations (::error) for failed rules.")
@click.option("--save-baseline", "save_baseline", type=click.Path(path_type=Path),
              metavar="PATH", help="Write TRACE's figures as a baseline file for later checks.")
@click.option("--history", "history", type=click.Path(path_type=Path), metavar="RUNS.db",
              help="Append this run's figures and rule results to a SQLite history.")
@click.option("--commit", metavar="SHA",
              help="Commit recorded in --history (default: `git rev-parse HEAD`).")
@click.option("--rank", "rank", type=click.IntRange(min=0), default=None, metavar="N",
              help="Check only rank N of a trace of several ranks (a single-process trace is "
                   "rank 0).")
@click.option("--allow-incomplete", "allow_incomplete", is_flag=True,
              help="Judge an incomplete trace (GPU records missing) on what it recorded: "
                   "rules on its GPU figures are skipped instead of the check failing.")
@click.option("--force", is_flag=True, help="Overwrite existing output files.")
@click.option("-q", "--quiet", is_flag=True, help="No progress line on stderr.")
@click.pass_context
@engine_options
@writing_in_background
def command(ctx, trace, baseline, max_rules, min_rules, regress_rules, config_path, step, skip,
            json_out, junit_out, github, save_baseline, history, commit, rank,
            allow_incomplete, force, quiet) -> None:
    """Check TRACE's CUDA Graph health against rules; exit 0 pass, 1 fail, 2 bad input.

    An incomplete trace (GPU records missing: cgprof analyze says what) fails the check
    unless --allow-incomplete.

    A trace of several ranks (one report of a torchrun job) is checked rank by rank: every
    rule on each rank's own figures, against the baseline's rank of the same id; the run
    fails when any rank fails a rule.

    \b
      cgprof check run.sqlite --max launch_calls_per_step=2 --min graph_kernel_share=0.95
      cgprof check run.sqlite --baseline base.json --regress step_p50_ns=5% --junit out.xml
      cgprof check run.sqlite --save-baseline base.json
      cgprof check ddp.sqlite --rank 1 --max launch_calls_per_step=2
    """
    from cgprof.commands import heavy_imports
    from cgprof.plan import WHOLE, plan_input
    from cgprof.report.output import check_writable, write_atomic
    from cgprof.scratch import raise_if_stopped

    plan = plan_input(trace)
    with heavy_imports():  # first: the trace's tables are read while the analysis is imported
        if trace.is_file() and plan.shape == WHOLE:  # (else read rank by rank or in chunks)
            from cgprof.io.prefetch import prefetch

            prefetch(trace)
        from cgprof import check as C
        from cgprof import check_history as H
        from cgprof import metrics  # noqa: F401  (what every analysis runs)
        from cgprof.report import check_report as R

    try:
        if json_out == "-" and github:
            raise C.CheckConfigError("--github prints to stdout; it cannot share it with "
                                     "--json -")
        cfg = C.load_config(config_path)
        flags = ([C.parse_rule("max", t) for t in max_rules]
                 + [C.parse_rule("min", t) for t in min_rules]
                 + [C.parse_rule("regress", t) for t in regress_rules])
        rules = C.merge_rules(cfg.rules, flags)
        if baseline is None and cfg.baseline is not None:
            baseline = cfg.baseline
            if save_baseline is not None and baseline.resolve() == save_baseline.resolve():
                # Refreshing the configured baseline: nothing to compare against.
                baseline = None
                rules = [r for r in rules if r.op != "regress"]
        history = history or cfg.history
        step = step or cfg.step
        skip = skip if skip is not None else (cfg.skip or 0)
        if baseline is not None and not any(r.op == "regress" for r in rules):
            rules += [C.Rule(f, "regress", tolerance=t)
                      for f, t in C.DEFAULT_REGRESSIONS.items()]
        if baseline is None and any(r.op == "regress" for r in rules):
            raise C.CheckConfigError("regression rules need a baseline: give --baseline BASE")
        if not rules and save_baseline is None:
            raise C.CheckConfigError(
                "no rules: give --max/--min FIGURE=LIMIT, --baseline BASE, or a "
                "[tool.cgprof.check] table in pyproject.toml")
        outputs = [p for p in (None if json_out in (None, "-") else Path(json_out), junit_out,
                               save_baseline) if p is not None]
        for p in outputs:
            check_writable(p, force)
        if history is not None:
            H.check_history_file(history)
        # a trace baseline is analysed too (a JSON one is only read)
        bar = progress_bar(quiet, traces=2 if baseline is not None else 1)
        try:
            run = C.load_run(trace, step=step, skip=skip, only=rank, planned=note_chunked,
                             progress=labelled(bar, trace.name), plan=plan,
                             apart=note_apart).select(rank, trace)
            base_run = None
            if baseline is not None:
                base_run = C.load_run(baseline, step=step, skip=skip,
                                      only=rank if run.multi else None, planned=note_chunked,
                                      progress=labelled(bar, baseline.name), apart=note_apart)
        finally:
            clear(bar)
        if save_baseline is not None:
            doc = C.run_baseline_document(run, str(trace))
            import json

            write_atomic(save_baseline, json.dumps(doc, sort_keys=True, indent=1) + "\n", force)
        result = C.evaluate_run(rules, run, base_run, source=str(trace),
                                baseline_source=None if baseline is None else str(baseline),
                                allow_incomplete=allow_incomplete)
        raise_if_stopped()  # (a signal's: no report, no history row)
    except CgprofError as exc:
        raise ConfigProblem(str(exc)) from None

    say = click.echo if json_out != "-" else (lambda m: click.echo(m, err=True))
    try:
        if json_out == "-":
            click.echo(R.render_json(result), nl=False)
        elif rules or result.incomplete:
            click.echo(R.render_text(result), nl=False)
        if github and rules:
            click.echo(R.render_github(result), nl=False)
        if save_baseline is not None:
            say(f"wrote {save_baseline}")
        if json_out not in (None, "-"):
            write_atomic(Path(json_out), R.render_json(result), force)
            say(f"wrote {json_out}")
        if junit_out is not None:
            write_atomic(junit_out, R.render_junit(result), force)
            say(f"wrote {junit_out}")
        if history is not None:
            run_id = H.append_history(history, result, commit or H.git_commit())
            if result.ranks is not None and len(result.ranks) > 1:
                ids = ", ".join(str(i) for i in result.ranks)
                say(f"appended runs {run_id}-{run_id + len(result.ranks) - 1} "
                    f"(ranks {ids}) to {history}")
            elif result.ranks is not None:
                say(f"appended run {run_id} (rank {next(iter(result.ranks))}) to {history}")
            else:
                say(f"appended run {run_id} to {history}")
    except CgprofError as exc:
        raise ConfigProblem(str(exc)) from None
    ctx.exit(0 if result.passed else 1)


@click.command("history")
@click.argument("database", type=click.Path(path_type=Path))
@click.option("--html", "html_out", type=click.Path(path_type=Path), metavar="PATH",
              help="Write an offline HTML chart of every figure over the runs.")
@click.option("--force", is_flag=True, help="Overwrite an existing --html file.")
def history_command(database, html_out, force) -> None:
    """Trend per figure over the runs that `cgprof check --history DATABASE` recorded."""
    from cgprof import check_history as H
    from cgprof.report import check_report as R
    from cgprof.report.output import check_writable, write_atomic

    try:
        if html_out is not None:
            check_writable(html_out, force)
        runs = H.read_history(database)
        click.echo(R.render_history_text(runs, str(database)), nl=False)
        if html_out is not None:
            write_atomic(html_out, R.render_history_html(runs, str(database)), force)
            click.echo(f"wrote {html_out}")
    except CgprofError as exc:
        raise click.ClickException(str(exc)) from None
