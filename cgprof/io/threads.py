"""Threads of the reading layer: how many it may use, and work run beside the caller's.

:func:`threads` is the active settings' thread count (:attr:`cgprof.settings.Settings.threads`)
for DuckDB's and Arrow's readers; Arrow's own pool follows it too (:func:`_cap_arrow_threads`,
called before each read). :class:`InThread` runs a function in a daemon thread that carries the
caller's settings, and hands its value, or its exception, back in the caller's thread.
"""

from __future__ import annotations

from typing import Any

from cgprof.settings import current, in_context


def threads() -> int:
    """Threads the engine may use (:attr:`cgprof.settings.Settings.threads`: every core, at
    most 8, unless set)."""
    return current().thread_count


_capped: list[int] = []


def _cap_arrow_threads() -> None:
    """Arrow's own thread pool follows the settings' ``threads`` too, when set (once per
    value)."""
    n = current().threads
    if n is not None and _capped != [n]:
        import pyarrow as pa

        pa.set_cpu_count(n)
        pa.set_io_thread_count(n)
        _capped[:] = [n]


class InThread:
    """``fn(*args)`` run in a daemon thread from now on; :meth:`result` waits for it and
    returns its value or raises its exception, in the caller's thread. For the reads ahead
    (:meth:`cgprof.io.sources.Source.read_ahead`) and the metrics that run beside others
    (:func:`cgprof.metrics.analyze`)."""

    def __init__(self, fn: Any, *args: Any, name: str) -> None:
        import threading

        self._box: dict[str, Any] = {}
        self._thread = threading.Thread(target=in_context(self._run), args=(fn, args),
                                        name=name, daemon=True)
        self._thread.start()

    def _run(self, fn: Any, args: tuple[Any, ...]) -> None:
        try:
            self._box["value"] = fn(*args)
        except BaseException as exc:  # raised again by result(), in the caller's thread
            self._box["error"] = exc

    def alive(self) -> bool:
        return self._thread.is_alive()

    def wait(self) -> None:
        self._thread.join()

    def result(self) -> Any:
        self.wait()
        if "error" in self._box:
            raise self._box["error"]
        return self._box["value"]
