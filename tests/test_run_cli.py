"""`cgprof run` on the CPU: output, JSON, and the exact one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from click.testing import CliRunner

from cgprof.cli import main

TINY = ["--device", "cpu", "--size", "tiny", "--steps", "3", "--warmup", "1"]


def invoke(*args: str):
    return CliRunner().invoke(main, ["run", *args])


def test_help_lists_the_options_without_importing_torch():
    code = (
        "import sys, runpy; sys.argv=['cgprof','run','--help']\n"
        "try:\n    runpy.run_module('cgprof', run_name='__main__')\n"
        "except SystemExit as e:\n    assert e.code in (0, None), e.code\n"
        "assert 'torch' not in sys.modules, 'cgprof run --help imported torch'\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("Usage: cgprof run [OPTIONS] {train|infer}\n")
    for flag in (
        "--model",
        "--mode",
        "--batch",
        "--steps",
        "--warmup",
        "--device",
        "--seed",
        "--json",
        "--force",
        "--optimizer",
        "--variable",
        "--size",
        "--fused-optimizer / --foreach-optimizer",
        "--cudnn-benchmark / --no-cudnn-benchmark",
        "--channels-last / --no-channels-last",
        "--ddp",
    ):
        assert flag in proc.stdout


def test_eager_train_prints_a_table_and_writes_json(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "run.json"
    result = invoke("train", "--model", "mlp", *TINY, "--batch", "4", "--json", str(out))
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith(
        "cgprof run: train mlp (tiny, sgd), batch 4, 3 steps after 1 warm-up, cpu (cpu), torch "
    )
    assert lines[0].endswith(", seed 0")
    assert lines[2] == (
        "mode     mean_ms    p50_ms    p99_ms   samples/s captures  replays fallbacks"
    )
    assert lines[3].startswith("eager ") and lines[3].endswith("        -        -         -")
    assert lines[-1] == f"wrote {out}"
    payload = json.loads(out.read_text())
    assert payload["schema_version"] == 1 and payload["kind"] == "cgprof.run"
    assert (payload["task"], payload["model"], payload["batch"]) == ("train", "mlp", 4)
    assert list(payload["modes"]) == ["eager"]
    assert len(payload["modes"]["eager"]["losses"]) == 4
    assert payload["speedup"] is None


def test_infer_variable_on_cpu():
    pytest.importorskip("torch")
    result = invoke("infer", "--model", "transformer", *TINY, "--batch", "4", "--variable")
    assert result.exit_code == 0, result.output
    assert "infer transformer (tiny), batch 1..4, 3 requests after 1 warm-up" in result.output


def test_json_is_not_overwritten_without_force(tmp_path):
    out = tmp_path / "run.json"
    out.write_text("keep")
    result = invoke("train", "--model", "mlp", *TINY, "--json", str(out))
    assert result.exit_code == 1
    assert result.output == f"Error: {out} exists; will not overwrite without --force\n"
    assert out.read_text() == "keep"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--batch", "0"], "Error: batch size must be at least 1 (got 0)\n"),
        (["--steps", "0"], "Error: steps must be at least 1 (got 0)\n"),
        (["--warmup", "-2"], "Error: warmup must be 0 or more (got -2)\n"),
        (
            ["--mode", "graph", "--device", "cpu"],
            "Error: mode 'graph' needs CUDA graphs, which need a CUDA GPU, and the device is "
            "'cpu': use mode 'eager' on the CPU, or device 'cuda' on a machine with a GPU\n",
        ),
        (
            ["--mode", "both", "--device", "cpu"],
            "Error: mode 'both' needs CUDA graphs, which need a CUDA GPU, and the device is "
            "'cpu': use mode 'eager' on the CPU, or device 'cuda' on a machine with a GPU\n",
        ),
        (["--variable"], "Error: variable batch sizes apply to task 'infer' only\n"),
    ],
)
def test_bad_arguments_give_one_line(args, message):
    result = invoke("train", "--model", "mlp", *args)
    assert result.exit_code == 1
    assert result.output == message


def test_optimizer_only_for_training():
    result = invoke("infer", "--model", "mlp", "--optimizer", "adamw")
    assert (result.exit_code, result.output) == (
        1,
        "Error: an optimizer only applies to task 'train'\n",
    )


def test_unknown_model_and_task_are_usage_errors():
    result = invoke("train", "--model", "vgg")
    assert result.exit_code == 2
    assert result.output.splitlines()[-1] == (
        "Error: Invalid value for '--model': 'vgg' is not one of 'mlp', 'resnet18', 'transformer'."
    )
    result = invoke("deploy", "--model", "mlp")  # (`serve` is `cgprof run serve`)
    assert result.exit_code == 2
    assert "Invalid value for '{train|infer}': 'deploy' is not one of 'train', 'infer'." in (
        result.output
    )
    result = invoke("train")
    assert result.exit_code == 2
    assert "Error: Missing option '--model'." in result.output


def test_graph_without_gpu_exits_1_without_traceback():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    proc = subprocess.run(
        [sys.executable, "-m", "cgprof", "run", "train", "--model", "mlp", "--mode", "graph"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1
    assert proc.stderr == (
        "Error: mode 'graph' needs CUDA graphs, which need a CUDA GPU, and torch sees none "
        "here (torch.cuda.is_available() is False): use mode 'eager'\n"
    )
    result = invoke("train", "--model", "mlp", "--device", "cuda")
    assert result.exit_code == 1
    assert result.output == (
        "Error: device 'cuda' asked for, but torch sees no CUDA GPU here "
        "(torch.cuda.is_available() is False): use device 'cpu' with mode 'eager'\n"
    )
