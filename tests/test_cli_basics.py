import subprocess
import sys

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
