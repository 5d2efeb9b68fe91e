"""NVTX markers that cut a user's loop into steps the analyzer understands.

    from cgprof import mark

    for i, batch in enumerate(loader):
        with mark.step(i):
            with mark.region("forward"):
                ...

Every range is a push/pop range in NVTX domain ``cgprof`` (the analyzer's default step
range is ``step@cgprof``); ``step`` carries the step index as the NVTX int payload. When no
profiler is attached the ``nvtx`` package hands back a dummy domain and each marker costs
well under a microsecond. Nothing here imports torch.

Rank marker (data-parallel runs, one process per GPU): :func:`rank` emits, once per
process, a push/pop range in domain ``cgprof`` whose message is ``rank {rank}/{world_size}``
(e.g. ``rank 1/2``) and whose int payload is the rank, popped at once (zero length). The
analyzer takes a process's rank from the first ``cgprof`` event whose text starts with
``"rank "``, reading the rank from the payload; the step ranges keep the step index as
their payload, so the ranks' steps line up by index.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from typing import Any, TypeVar

import nvtx

DOMAIN = "cgprof"
STEP = "step"

F = TypeVar("F", bound=Callable[..., Any])

_domain: Any = None


def _get_domain() -> Any:
    global _domain
    if _domain is None:
        _domain = nvtx.get_domain(DOMAIN)
    return _domain


def push(name: str, payload: int | float | None = None) -> None:
    """Open a push/pop range ``name`` in domain ``cgprof`` on this thread."""
    domain = _domain if _domain is not None else _get_domain()
    domain.push_range(domain.get_event_attributes(name, None, None, payload))


def pop() -> None:
    """Close the innermost range opened by :func:`push` on this thread."""
    (_domain if _domain is not None else _get_domain()).pop_range()


class region:  # noqa: N801 - used like a function: ``with mark.region("forward"):``
    """A named range (``forward``, ``copy_in``, ...) in domain ``cgprof``.

    A small class rather than a ``contextlib.contextmanager`` generator: entering and leaving
    it costs about a tenth as much (~0.3 us against ~2 us per range without a profiler),
    which counts in a graphed step that opens three ranges around a 100 us replay. The
    range closes when the body raises.
    """

    __slots__ = ("name", "payload")

    def __init__(self, name: str, payload: int | float | None = None) -> None:
        self.name = name
        self.payload = payload

    def __enter__(self) -> None:
        push(self.name, self.payload)

    def __exit__(self, *exc: object) -> None:
        pop()


def step(index: int | None = None) -> contextlib.AbstractContextManager[None]:
    """One training or inference step: the unit ``cgprof analyze`` cuts a trace into."""
    return region(STEP, index)


RANK_PREFIX = "rank "


def rank(rank: int, world_size: int) -> None:
    """Mark this process as data-parallel rank ``rank`` of ``world_size`` (once, at start).

    Emits a zero-length push/pop range ``rank {rank}/{world_size}`` in domain ``cgprof``
    with int payload ``rank`` (see the module docstring for how the analyzer reads it).
    """
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} out of range for world size {world_size}")
    push(f"{RANK_PREFIX}{rank}/{world_size}", rank)
    pop()


def stepped(func: F) -> F:
    """Decorator: every call of ``func`` is one step (numbered from 0)."""
    counter = {"i": 0}

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with step(counter["i"]):
            counter["i"] += 1
            return func(*args, **kwargs)

    return wrapper  # type: ignore[return-value]
