"""What ``cgprof diff`` is asked to compare: step windows (``--steps A:B[,C:D]``), labels
(``--labels A,B``) and step modes (``--mode eager,graph``), parsed from the strings the CLI and
callers pass, with one clear error each."""

from __future__ import annotations

from cgprof.errors import CgprofError


def _parse_slice(text: str, option: str) -> slice:
    parts = text.strip().split(":")
    bad = CgprofError(
        f"{option} {text!r}: expected A:B (0-based step positions, B exclusive), e.g. "
        f"{option} 0:10, or A:B,C:D for baseline and candidate")
    if len(parts) != 2:
        raise bad
    try:
        lo = int(parts[0]) if parts[0].strip() else None
        hi = int(parts[1]) if parts[1].strip() else None
    except ValueError:
        raise bad from None
    if (lo is not None and lo < 0) or (hi is not None and hi < 0):
        raise CgprofError(f"{option} {text!r}: positions must be 0 or more")
    if lo is not None and hi is not None and hi <= lo:
        raise CgprofError(f"{option} {text!r}: B must be greater than A (B is exclusive)")
    return slice(lo, hi)


def parse_steps(text: str | None, option: str = "--steps") -> tuple[slice | None, slice | None]:
    """``"A:B"`` (both runs) or ``"A:B,C:D"`` (baseline, candidate) -> two slices."""
    if text is None:
        return None, None
    parts = text.split(",")
    if len(parts) == 1:
        s = _parse_slice(parts[0], option)
        return s, s
    if len(parts) == 2:
        return _parse_slice(parts[0], option), _parse_slice(parts[1], option)
    raise CgprofError(f"{option} {text!r}: give one window A:B, or two: A:B,C:D")


def parse_labels(text: str | None) -> tuple[str, str] | None:
    """``"eager,graph"`` -> ("eager", "graph")."""
    if text is None:
        return None
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != 2 or not all(parts):
        raise CgprofError(f"--labels {text!r}: expected two names, e.g. --labels eager,graph")
    if parts[0] == parts[1]:
        raise CgprofError(f"--labels {text!r}: the two labels must differ")
    return parts[0], parts[1]


STEADY_MODES = ("eager", "graph")
MODES = ("eager", "graph", "warmup", "capture", "all")


def parse_modes(text: str | None) -> tuple[str | None, str | None]:
    """``"eager,graph"`` -> per-run step-mode filters (see the module doc)."""
    if text is None:
        return None, None
    parts = [p.strip() for p in text.split(",")]
    if len(parts) == 1:
        parts = parts * 2
    if len(parts) != 2 or not set(parts) <= set(MODES):
        raise CgprofError(
            f"--mode {text!r}: expected {', '.join(MODES[:-1])} or all, once or as BASE,CAND "
            f"(e.g. --mode eager,graph)")
    return parts[0], parts[1]


def slice_text(s: slice | None) -> str:
    """A window as ``--steps`` spells it: ``0:10``, ``5:``, ``:``."""
    if s is None:
        return ":"
    return f"{'' if s.start is None else s.start}:{'' if s.stop is None else s.stop}"
