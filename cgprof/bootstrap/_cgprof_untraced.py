"""The untraced run's clock: loaded by ``sitecustomize`` when ``CGPROF_UNTRACED_DIR`` is set.

``cgprof record --untraced`` runs the program a second time, without the profiler, to time
the same steps the trace holds. This module wraps the Python calls that mark steps, each
time the module that defines them is imported:

- ``torch.cuda.nvtx``: ``range_push``/``range_pop``, ``range_start``/``range_end`` (and so
  ``torch.cuda.nvtx.range``, which calls them);
- the ``nvtx`` package: ``push_range``/``pop_range``, ``start_range``/``end_range`` and
  ``annotate`` (as a context manager and as a decorator);
- ``cgprof.mark``: ``push``/``pop`` (every cgprof range);
- ``torch.cuda.graphs.CUDAGraph.replay`` (a graphed loop's iterations; ``torch.compile``'s
  CUDA graph trees replay through it too).

Each wrapper takes ``time.perf_counter_ns()`` and appends one tuple to a list, then calls the
original, so the program behaves as it does under the profiler. At exit, the ranges (paired
per thread, or by handle), the replays and what one wrapped call costs (timed here, on a
no-op) are written to ``CGPROF_UNTRACED_DIR/untraced-PID.json``; a process that marked
nothing writes nothing. Range names are spelled as the analyzer spells them: ``DOMAIN:TEXT``
for a named domain, ``TEXT`` in the default one.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

_clock = time.perf_counter_ns
_ident = threading.get_ident
_START = _clock()

#: (kind, name or handle or graph, thread, ns): kind 0 push, 1 pop, 2 start, 3 end, 4 replay
_events: list[tuple[int, Any, int, int]] = []
_add = _events.append
_graphs: dict[int, int] = {}


def _named(message: Any, domain: Any) -> str:
    text = "" if message is None else str(message)
    return f"{domain}:{text}" if domain else text


def _wrap_push(original: Callable[..., Any], name_of: Callable[..., str]) -> Callable[..., Any]:
    @functools.wraps(original)
    def push(*args: Any, **kwargs: Any) -> Any:
        _add((0, name_of(*args, **kwargs), _ident(), _clock()))
        return original(*args, **kwargs)
    return push


def _wrap_pop(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def pop(*args: Any, **kwargs: Any) -> Any:
        _add((1, None, _ident(), _clock()))
        return original(*args, **kwargs)
    return pop


def _wrap_start(original: Callable[..., Any], name_of: Callable[..., str]) -> Callable[..., Any]:
    @functools.wraps(original)
    def start(*args: Any, **kwargs: Any) -> Any:
        handle = original(*args, **kwargs)
        key = handle if isinstance(handle, int) else id(handle)
        _add((2, (name_of(*args, **kwargs), key), _ident(), _clock()))
        return handle
    return start


def _wrap_end(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def end(handle: Any, *args: Any, **kwargs: Any) -> Any:
        _add((3, handle if isinstance(handle, int) else id(handle), _ident(), _clock()))
        return original(handle, *args, **kwargs)
    return end


def _torch_name(msg: Any = "", *args: Any, **kwargs: Any) -> str:
    return _named(msg, None)


def _nvtx_name(message: Any = None, color: Any = None, domain: Any = None,
               *args: Any, **kwargs: Any) -> str:
    return _named(kwargs.get("message", message), kwargs.get("domain", domain))


def _hook_torch_nvtx(module: Any) -> None:
    module.range_push = _wrap_push(module.range_push, _torch_name)
    module.range_pop = _wrap_pop(module.range_pop)
    module.range_start = _wrap_start(module.range_start, _torch_name)
    module.range_end = _wrap_end(module.range_end)


def _hook_nvtx(module: Any) -> None:
    if not module.enabled():  # NVTX_DISABLE: no range reaches a profiler either
        return
    push, pop = module.push_range, module.pop_range
    start, end = module.start_range, module.end_range
    base = module.annotate
    wrapped = {
        "push_range": _wrap_push(push, _nvtx_name),
        "pop_range": _wrap_pop(pop),
        "start_range": _wrap_start(start, _nvtx_name),
        "end_range": _wrap_end(end),
    }

    class annotate(base):  # type: ignore[misc, valid-type]  # noqa: N801
        """``nvtx.annotate`` that also tells the untraced clock."""

        def __init__(self, message: Any = None, color: Any = None, domain: Any = None,
                     *args: Any, **kwargs: Any) -> None:
            super().__init__(message, color, domain, *args, **kwargs)
            self._cgprof_name = _named(message, domain)

        def __enter__(self) -> Any:
            _add((0, self._cgprof_name, _ident(), _clock()))
            return super().__enter__()

        def __exit__(self, *exc: Any) -> Any:
            _add((1, None, _ident(), _clock()))
            return super().__exit__(*exc)

        def __call__(self, func: Callable[..., Any]) -> Callable[..., Any]:
            name = self._cgprof_name or _named(func.__name__, None)
            inner = super().__call__(func)

            @functools.wraps(func)
            def timed(*args: Any, **kwargs: Any) -> Any:
                _add((0, name, _ident(), _clock()))
                try:
                    return inner(*args, **kwargs)
                finally:
                    _add((1, None, _ident(), _clock()))
            return timed

    wrapped["annotate"] = annotate
    for target in (module, sys.modules.get("nvtx.nvtx")):
        if target is not None:
            for attr, value in wrapped.items():
                if hasattr(target, attr):
                    setattr(target, attr, value)


def _hook_cgprof_mark(module: Any) -> None:
    domain = module.DOMAIN
    module.push = _wrap_push(module.push, lambda name, *a, **k: _named(name, domain))
    module.pop = _wrap_pop(module.pop)


def _hook_graphs(module: Any) -> None:
    graph = module.CUDAGraph
    original = graph.replay

    @functools.wraps(original)
    def replay(self: Any) -> Any:
        number = _graphs.setdefault(id(self), len(_graphs))
        _add((4, number, _ident(), _clock()))
        return original(self)

    graph.replay = replay


HOOKS: dict[str, Callable[[Any], None]] = {
    "torch.cuda.nvtx": _hook_torch_nvtx,
    "nvtx": _hook_nvtx,
    "cgprof.mark": _hook_cgprof_mark,
    "torch.cuda.graphs": _hook_graphs,
}


def _pair(events: list[tuple[int, Any, int, int]]) -> tuple[list[str], list[list[int]],
                                                             list[list[int]]]:
    """(names, ranges [name, thread, start_ns, end_ns], replays [graph, thread, ns])."""
    names: dict[str, int] = {}
    stacks: dict[int, list[tuple[str, int]]] = {}
    opened: dict[int, tuple[str, int, int]] = {}
    ranges: list[list[int]] = []
    replays: list[list[int]] = []

    def close(name: str, thread: int, start: int, end: int) -> None:
        ranges.append([names.setdefault(name, len(names)), thread, start, end])

    for kind, what, thread, t in events:
        if kind == 0:
            stacks.setdefault(thread, []).append((what, t))
        elif kind == 1:
            stack = stacks.get(thread)
            if stack:
                name, start = stack.pop()
                close(name, thread, start, t)
        elif kind == 2:
            opened[what[1]] = (what[0], thread, t)
        elif kind == 3:
            begun = opened.pop(what, None)
            if begun is not None:
                close(begun[0], begun[1], begun[2], t)
        else:
            replays.append([what, thread, t])
    ranges.sort(key=lambda r: r[2])
    return list(names), ranges, replays


def _event_cost_ns(rounds: int = 20000) -> float:
    """What one wrapped push or pop adds, timed on a no-op original (ns per call)."""
    saved = len(_events)
    push = _wrap_push(lambda name: None, lambda name: name)
    pop = _wrap_pop(lambda: None)
    t0 = _clock()
    for _ in range(rounds):
        push("x")
        pop()
    cost = (_clock() - t0) / (2 * rounds)
    del _events[saved:]
    return cost


def _write() -> None:
    folder = os.environ.get("CGPROF_UNTRACED_DIR")
    if not folder or not _events:
        return
    events = list(_events)
    end = _clock()
    names, ranges, replays = _pair(events)
    doc = {
        "pid": os.getpid(),
        "rank": os.environ.get("RANK"),
        "argv": list(sys.argv),
        "main_thread": threading.main_thread().ident,
        "names": names,
        "ranges": ranges,
        "replays": replays,
        "events": len(events),
        "event_cost_ns": _event_cost_ns(),
        "run_ns": end - _START,
    }
    path = os.path.join(folder, f"untraced-{os.getpid()}.json")
    tmp = path + ".tmp"
    try:
        with open(tmp, "w") as fh:
            json.dump(doc, fh, separators=(",", ":"))
        os.replace(tmp, path)
    except OSError as exc:
        print(f"cgprof record: the untraced run's times were not written: {exc}",
              file=sys.stderr)


atexit.register(_write)
