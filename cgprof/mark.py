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
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
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
    domain = _get_domain()
    domain.push_range(domain.get_event_attributes(name, None, None, payload))


def pop() -> None:
    """Close the innermost range opened by :func:`push` on this thread."""
    _get_domain().pop_range()


@contextlib.contextmanager
def region(name: str, payload: int | float | None = None) -> Iterator[None]:
    """A named range (``forward``, ``copy_in``, ...) in domain ``cgprof``."""
    push(name, payload)
    try:
        yield
    finally:
        pop()


def step(index: int | None = None) -> contextlib.AbstractContextManager[None]:
    """One training or inference step: the unit ``cgprof analyze`` cuts a trace into."""
    return region(STEP, index)


def stepped(func: F) -> F:
    """Decorator: every call of ``func`` is one step (numbered from 0)."""
    counter = {"i": 0}

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with step(counter["i"]):
            counter["i"] += 1
            return func(*args, **kwargs)

    return wrapper  # type: ignore[return-value]
