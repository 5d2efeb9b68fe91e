"""``cgprof record``'s step marker, loaded into the recorded Python process (and its
children) by putting this folder first on ``PYTHONPATH``.

It imports nothing heavy at start-up. When the program imports ``torch.optim``, it registers
a global optimizer step post-hook (``torch.optim.optimizer.register_optimizer_step_post_hook``)
that closes the previous NVTX range and opens the next one, ``cgprof.record: step`` on the
thread that stepped: one range per iteration, from one optimizer step's end to the next's
(cgprof.metrics.stepchoice's ``marked`` rule). Without CUDA, or when ``torch.cuda.nvtx``
fails, it marks nothing. A graph that captured the optimizer step replays without calling
the hook, so a graphed loop's steps come from its graph launches instead. Then the
``sitecustomize`` this one shadows, if the program had one, is loaded as usual.

``CGPROF_MARK_STEPS=0`` leaves the optimizer alone; ``CGPROF_UNTRACED_DIR`` (``cgprof
record``'s untraced run) also loads ``_cgprof_untraced``, which times the program's step
marks without a profiler (its docstring says how).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import types
from collections.abc import Callable

MARK = "cgprof.record: step"
_HOOKED = "torch.optim.optimizer"


def _hook(module: object) -> None:
    state: dict[str, object] = {}
    opened: set[int] = set()

    def nvtx() -> object | None:
        if "nvtx" not in state:
            try:
                import torch

                state["nvtx"] = torch.cuda.nvtx if torch.cuda.is_available() else None
            except Exception:  # a broken or CPU-only torch: nothing to mark
                state["nvtx"] = None
        return state["nvtx"]

    def after_step(optimizer: object, args: object, kwargs: object) -> None:
        import threading

        marker = nvtx()
        if marker is None:
            return
        me = threading.get_ident()
        try:
            if me in opened:
                marker.range_pop()  # type: ignore[attr-defined]
            marker.range_push(MARK)  # type: ignore[attr-defined]
            opened.add(me)
        except Exception:
            pass

    after_step.cgprof_mark = MARK  # type: ignore[attr-defined]
    module.register_optimizer_step_post_hook(after_step)  # type: ignore[attr-defined]


class _Finder(importlib.abc.MetaPathFinder):
    """Runs ``hooks[name](module)`` once the module ``name`` has executed, for each name."""

    def __init__(self, hooks: dict[str, Callable[[types.ModuleType], None]]) -> None:
        self.hooks = dict(hooks)

    def find_spec(self, name: str, path: object, target: object = None
                  ) -> importlib.machinery.ModuleSpec | None:
        hook = self.hooks.pop(name, None)
        if hook is None:
            return None
        if not self.hooks:
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run = spec.loader.exec_module

        def exec_module(module: types.ModuleType) -> None:
            run(module)
            hook(module)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _next_sitecustomize() -> None:
    """Load the ``sitecustomize`` later on the path, which this module shadows."""
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


def _hooks() -> dict[str, Callable[[types.ModuleType], None]]:
    hooks: dict[str, Callable[[types.ModuleType], None]] = {}
    if os.environ.get("CGPROF_UNTRACED_DIR"):
        from _cgprof_untraced import HOOKS

        hooks.update(HOOKS)
    if os.environ.get("CGPROF_MARK_STEPS", "1") != "0":
        hooks[_HOOKED] = _hook
    return hooks


_wanted = _hooks()
if _wanted:
    sys.meta_path.insert(0, _Finder(_wanted))
try:
    _next_sitecustomize()
except Exception as exc:  # the program's own start-up file failed: say so, go on
    print(f"cgprof record: the program's sitecustomize failed: {exc}", file=sys.stderr)
