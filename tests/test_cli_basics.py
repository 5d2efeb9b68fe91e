import subprocess
import sys

import click
from click.testing import CliRunner

import cgprof
from cgprof.cli import main


def test_version():
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0
    assert result.output == f"cgprof, version {cgprof.__version__}\n"


def test_help_lists_commands():
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0
    for name in ("analyze", "diff", "record", "run"):
        assert f"  {name}" in result.output


def test_python_m_cgprof_and_no_torch_import():
    code = (
        "import sys, runpy; sys.argv=['cgprof','--help'];\n"
        "try:\n    runpy.run_module('cgprof', run_name='__main__')\n"
        "except SystemExit as e:\n    assert e.code in (0, None), e.code\n"
        "assert 'torch' not in sys.modules, 'cgprof --help imported torch'\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "Usage: cgprof" in proc.stdout


def test_commands_load_lazily_and_analyze_imports_only_what_it_uses(tmp_path):
    """`cgprof analyze` imports its own command module and the shared option and progress
    modules, not the other commands' (run's runner configuration, check's rules) nor torch,
    plotly, dask or sqlite_utils."""
    from pathlib import Path

    trace = Path(__file__).resolve().parents[1] / "traces" / "mlp_train_eager.sqlite"
    code = (
        "import sys; from cgprof.cli import main\n"
        f"try:\n    main(['analyze', {str(trace)!r}, '--quiet'])\n"
        "except SystemExit as e:\n    assert e.code in (0, None), e.code\n"
        "heavy = ('torch', 'plotly', 'dask', 'distributed', 'sqlite_utils')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy\n"
        "             or m.startswith(('cgprof.commands.', 'cgprof.runners'))))\n"
    )
    env = {**__import__("os").environ, "CGPROF_CACHE": str(tmp_path / "cache")}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == (
        "['cgprof.commands.analyze', 'cgprof.commands.engine_opts', "
        "'cgprof.commands.progress']")


def test_lazy_command_table_matches_the_commands():
    """Every entry of cli.COMMANDS loads a command of that name whose help starts with the
    entry's summary, and `cgprof --help` lists them as click would from the commands."""
    import inspect

    from cgprof.cli import COMMANDS, LazyGroup

    code = ("import sys; from cgprof.cli import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in sys.modules if m.startswith('cgprof.commands.')))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.stdout.strip().splitlines()[-1] == "[]", proc.stderr  # help imports none
    lazy = {w: CliRunner().invoke(main, ["--help"], terminal_width=w).output
            for w in (60, 80, 200)}
    ctx = click.Context(main)
    eager = click.Group(main.name, help=main.help, params=main.params,
                        context_settings=main.context_settings)
    for name, (_, _, summary) in COMMANDS.items():
        cmd = main.get_command(ctx, name)
        assert cmd.name == name and cmd.short_help is None
        assert inspect.cleandoc(cmd.help).split("\n\n")[0] == summary
        eager.add_command(cmd)
    assert isinstance(main, LazyGroup)
    for w, text in lazy.items():
        assert text == CliRunner().invoke(eager, ["--help"], terminal_width=w).output
