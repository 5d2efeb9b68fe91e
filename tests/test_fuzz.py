"""Damaged copies of a shipped trace: analysed (valid JSON) or refused in one line, never worse.

The copies come from `scripts/fuzz_traces.py` (random bytes, pages overwritten, truncation,
dropped tables, NULLs, negative numbers, duplicated rows, text in number columns), seeded so
that a failure here is reproduced by `python3 scripts/fuzz_traces.py --seed 9 --n 36`. Most
copies run through click's runner in-process (fast); every sixth through a real
`python3 -m cgprof analyze COPY --json -` subprocess, with its own stdout and stderr.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import load_script

REPO = Path(__file__).resolve().parents[1]
SEED = 9
COPIES = 36


def _load_fuzzer():
    return load_script("fuzz_traces")


F = _load_fuzzer()


@pytest.mark.parametrize("index", range(COPIES))
def test_damaged_copy(tmp_path, index):
    out = F.fuzz_one(F.DEFAULT_TRACE, tmp_path, index, SEED, subprocess_mode=index % 6 == 5)
    assert out.problem is None, f"copy {index} ({out.kind}: {out.detail}): {out.problem}"
    assert out.result in ("json", "error")


def test_every_kind_of_damage_is_made():
    assert COPIES >= 4 * len(F.KINDS)
    assert sorted({F.KINDS[i % len(F.KINDS)] for i in range(COPIES)}) == sorted(F.KINDS)


def test_the_judge_rejects_what_it_must(tmp_path):
    p = tmp_path / "t.sqlite"
    ok = F.judge(p, 0, json.dumps({"a": 1}), "")
    assert ok == ("json", None)
    assert F.judge(p, 1, "", f"Error: {p}: damaged\n") == ("error", None)
    tb = "Traceback (most recent call last):\n  ...\nValueError: invalid literal\n"
    assert F.judge(p, 1, "", tb)[0] == "bad"
    assert F.judge(p, 0, "== report", "")[0] == "bad"  # exit 0 must mean JSON
    assert F.judge(p, 1, "", "Error: something\n")[0] == "bad"  # must name the file
    assert F.judge(p, 1, "", f"Error: {p}: a\nsecond line\n")[0] == "bad"
    assert F.judge(p, 1, "{}", f"Error: {p}: a\n")[0] == "bad"  # stdout only for results


def test_damage_is_seeded_and_leaves_the_source_alone(tmp_path):
    import hashlib
    import random

    src = F.DEFAULT_TRACE
    before = hashlib.md5(src.read_bytes()).hexdigest()
    a = F.damage(src, tmp_path / "a.sqlite", "text", random.Random("1:7"))
    b = F.damage(src, tmp_path / "b.sqlite", "text", random.Random("1:7"))
    assert a == b and (tmp_path / "a.sqlite").read_bytes() == (tmp_path / "b.sqlite").read_bytes()
    assert (tmp_path / "a.sqlite").read_bytes() != src.read_bytes()
    assert hashlib.md5(src.read_bytes()).hexdigest() == before
