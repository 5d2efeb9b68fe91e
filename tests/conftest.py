"""Shared fixtures. Inputs are built in code (`nsysdb.make_nsys_db`) or are real exports."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from nsysdb import make_nsys_db

REPO = Path(__file__).resolve().parents[1]
# The project's shared folder sits beside the repository (CI keeps a read-only copy there).
SAMPLES = Path(__file__).resolve().parents[2] / "shared" / "nsys-samples"

#: Steps per chunk of an analysis read in chunks (Settings.chunk_steps): one chunk holding
#: every step, one step a chunk, a few steps a chunk.
CHUNK_STEPS = {"one-chunk": 10**6, "one-step": 1, "three-steps": 3}


def load_script(name: str) -> Any:
    """The script ``scripts/NAME.py`` imported as the module ``NAME`` (once: the same module
    on later calls), with ``scripts/`` on ``sys.path`` for the modules it imports."""
    import importlib.util
    import sys

    if name in sys.modules:
        return sys.modules[name]
    folder = str(REPO / "scripts")
    if folder not in sys.path:
        sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module



def cgprof_in_process(args: list[str], env: dict[str, str | None] | None = None,
                      cwd: Path = REPO, **fields: Any) -> subprocess.CompletedProcess:
    """``cgprof ARGS`` run in this process (click's CliRunner) as ``python -m cgprof ARGS``
    runs with ``env`` (a None value unsets the variable) in ``cwd``, under the environment's
    settings with ``fields`` (:class:`cgprof.settings.Settings` fields, e.g.
    ``chunk_steps=3``): its exit code, stdout and stderr (with the traceback of an exception
    the command did not handle)."""
    import traceback

    from click.testing import CliRunner

    from cgprof.cli import main
    from cgprof.settings import Settings, using

    with pytest.MonkeyPatch.context() as mp:
        for name, value in (env or {}).items():
            if value is None:
                mp.delenv(name, raising=False)
            else:
                mp.setenv(name, value)
        mp.chdir(cwd)
        with using(Settings.from_env().replace(**fields)):
            res = CliRunner().invoke(main, args)
    stderr = res.stderr
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        stderr += "".join(traceback.format_exception(res.exception))
    return subprocess.CompletedProcess(args, res.exit_code, res.stdout, stderr)



def wait_table(steps: Any) -> tuple[Any, int, int]:
    """(table, lo, steps): the call-to-step lookup of the launch waits of a StepResult (the
    sliced gap sweep's ``wait``)."""
    import numpy as np

    from cgprof.metrics.step_attribution import _dense_steps

    lookup = steps._lookup()
    if lookup is not None:
        return lookup[0], lookup[1], len(steps.steps)
    cs = steps.call_steps
    none = np.zeros(0, dtype=np.int64)
    dense = _dense_steps(none, none, cs["pid"].to_numpy(), cs["corr_id"].to_numpy(),
                         cs["step"].to_numpy())
    assert dense is not None
    return dense[0], dense[1], len(steps.steps)


@pytest.fixture(autouse=True, scope="session")
def _private_cache(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Every test (and every CLI subprocess it starts) caches into a folder of the session's
    own, never the user's cache folder."""
    import os

    old = os.environ.get("CGPROF_CACHE")
    os.environ["CGPROF_CACHE"] = str(tmp_path_factory.mktemp("cgprof-cache"))
    yield
    if old is None:
        os.environ.pop("CGPROF_CACHE", None)
    else:
        os.environ["CGPROF_CACHE"] = old


@pytest.fixture(scope="session")
def samples_dir() -> Path:
    """The real nsys 2025.3 exports and their `nsys stats` oracle (`expected/`); read-only."""
    if not (SAMPLES / "mlp8_node.sqlite").is_file():
        pytest.skip(f"real nsys samples not found at {SAMPLES} (../shared/nsys-samples)")
    return SAMPLES


@pytest.fixture(scope="session")
def node(samples_dir: Path) -> Any:
    """`cgprof.analyze` of the node-granularity sample: 20 eager steps, then 20 replays."""
    import cgprof

    return cgprof.analyze(samples_dir / "mlp8_node.sqlite")


@pytest.fixture(scope="session")
def graph(samples_dir: Path) -> Any:
    """`cgprof.analyze` of the graph-granularity sample (replays as whole-graph rows)."""
    import cgprof

    return cgprof.analyze(samples_dir / "mlp8_graph.sqlite")


@pytest.fixture(scope="session")
def traces_dir() -> Path:
    """The small real exports that ship with the repository (`traces/`)."""
    return REPO / "traces"


@pytest.fixture
def make_db(tmp_path: Path) -> Callable[..., Path]:
    """`make_db(**tables)` -> a new nsys-shaped file in tmp_path (see `nsysdb.make_nsys_db`).

    Pass `name="x.sqlite"` to choose the file name; by default db1.sqlite, db2.sqlite, ..."""
    count = 0

    def factory(name: str | None = None, **tables: Any) -> Path:
        nonlocal count
        count += 1
        return make_nsys_db(tmp_path / (name or f"db{count}.sqlite"), **tables)

    return factory


class Slices:
    """A callable reading ``ops`` cut at rows ``cuts`` (ascending, from 0 to len(ops);
    repeats: empty slices), as a chunked analysis reads its GPU timeline a slice at a time
    (cgprof.metrics.gap_slices.measure_gaps_sliced_each); ``reads`` counts the reads."""

    def __init__(self, ops: Any, cuts: list[int]):
        self.ops, self.cuts, self.reads = ops, cuts, 0

    def __call__(self) -> Any:
        self.reads += 1
        for a, b in zip(self.cuts[:-1], self.cuts[1:], strict=True):
            yield self.ops.iloc[a:b]


def every_cut(n: int, k: int, ends: int | None = None) -> list[int]:
    """A cut every ``k`` of ``n`` rows; ``ends``: only in the first and last ``ends`` rows
    (the rest one slice) when there are more than twice as many."""
    if ends is None or n <= 2 * ends:
        return [*range(0, n, k), n]
    return [*range(0, ends, k), *range(n - ends, n, k), n]


def random_cuts(n: int, seed: int, k: int) -> list[int]:
    """About n / k random cuts of ``n`` rows, some repeated (empty slices), empty ones at
    both ends."""
    import numpy as np

    rng = np.random.default_rng(seed)
    inner = rng.integers(0, n + 1, size=max(2, n // k))
    inner = np.concatenate([inner, inner[: len(inner) // 4]])  # repeats
    return [0, 0, *sorted(int(c) for c in inner), n, n]


def with_tied_copies(ops: Any) -> tuple[Any, list[int]]:
    """``ops`` with a copy after every 10th op on another stream, starting at the same time
    (ending at the same time or 1 us later); and the copies' rows."""
    import numpy as np
    import pandas as pd

    n = len(ops)
    start, end = ops["start_ns"].to_numpy(), ops["end_ns"].to_numpy()
    pick = np.arange(0, n - 1, 10)
    copies = ops.iloc[pick].assign(end_ns=end[pick] + np.where(np.arange(len(pick)) % 2, 1000,
                                                                0),
                                   stream_id=ops["stream_id"].to_numpy()[pick] + 1)
    both = pd.concat([ops.assign(copy=False), copies.assign(copy=True)], ignore_index=True)
    both = both.sort_values(["start_ns", "end_ns"], kind="stable").reset_index(drop=True)
    rows = np.flatnonzero(both.pop("copy").to_numpy())
    both["kind"] = both["kind"].astype(ops["kind"].dtype)
    assert (start[pick] == both["start_ns"].to_numpy()[rows]).all()
    return both, rows.tolist()


def spy_sweeps(monkeypatch: Any, slices: bool = True) -> dict[str, int]:
    """The gap measurement's sliced sweep from one op on (``CHUNKED_MIN_OPS`` 1), counting
    the sweeps finished (``sweeps``), the fallbacks and, with ``slices``, the slices swept,
    whatever became of their sweep (``slices``)."""
    from cgprof.metrics import gap_chunked, gap_slices

    monkeypatch.setattr(gap_chunked, "CHUNKED_MIN_OPS", 1)
    seen = {"sweeps": 0, "fallbacks": 0, **({"slices": 0} if slices else {})}
    finish, add = gap_slices._SliceSweep.finish, gap_slices._SliceSweep.add
    fallback = gap_slices._SlicedRun.fallback

    def spy_finish(self: Any) -> Any:
        got = finish(self)
        seen["sweeps"] += got is not None
        return got

    def spy_fallback(self: Any, *a: Any) -> Any:
        seen["fallbacks"] += 1
        return fallback(self, *a)

    def spy_add(self: Any, live: Any) -> Any:
        ok = add(self, live)
        seen["slices"] += ok
        return ok

    monkeypatch.setattr(gap_slices._SliceSweep, "finish", spy_finish)
    monkeypatch.setattr(gap_slices._SlicedRun, "fallback", spy_fallback)
    if slices:
        monkeypatch.setattr(gap_slices._SliceSweep, "add", spy_add)
    return seen

