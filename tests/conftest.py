"""Shared fixtures. Inputs are built in code (`nsysdb.make_nsys_db`) or are real exports."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from nsysdb import make_nsys_db

REPO = Path(__file__).resolve().parents[1]
# The project's shared folder sits beside the repository (CI keeps a read-only copy there).
SAMPLES = Path(__file__).resolve().parents[2] / "shared" / "nsys-samples"


def wait_table(steps: Any) -> tuple[Any, int, int]:
    """(table, lo, steps): the call-to-step lookup of the launch waits of a StepResult (the
    sliced gap sweep's ``wait``)."""
    import numpy as np

    from cgprof.metrics.steps import _dense_steps

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
