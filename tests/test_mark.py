"""cgprof.mark on a CPU: ranges balance (also on exceptions), carry the step index, cost little.

The NVTX library itself is replaced by a recorder for the ordering tests: what matters is
the sequence of push/pop calls cgprof.mark makes in domain ``cgprof``.
"""

from __future__ import annotations

import time

import pytest

from cgprof import mark


class RecordingDomain:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def get_event_attributes(self, message, color, category, payload):
        return (message, payload)

    def push_range(self, attributes) -> None:
        self.calls.append(("push", *attributes))

    def pop_range(self) -> None:
        self.calls.append(("pop",))


@pytest.fixture
def domain(monkeypatch: pytest.MonkeyPatch) -> RecordingDomain:
    recorder = RecordingDomain()
    monkeypatch.setattr(mark, "_domain", recorder)
    return recorder


def test_step_and_region_nest(domain: RecordingDomain):
    with mark.step(7):
        with mark.region("forward"):
            pass
    assert domain.calls == [("push", "step", 7), ("push", "forward", None), ("pop",), ("pop",)]


def test_ranges_close_when_the_body_raises(domain: RecordingDomain):
    with pytest.raises(ValueError), mark.step(0), mark.region("backward"):
        raise ValueError("boom")
    assert domain.calls == [("push", "step", 0), ("push", "backward", None), ("pop",), ("pop",)]


def test_stepped_numbers_calls_from_zero(domain: RecordingDomain):
    @mark.stepped
    def train_step(x: int) -> int:
        return x * 2

    assert [train_step(1), train_step(2)] == [2, 4]
    assert train_step.__name__ == "train_step"
    assert domain.calls == [("push", "step", 0), ("pop",), ("push", "step", 1), ("pop",)]


def test_domain_name_and_cost_without_a_profiler():
    assert (mark.DOMAIN, mark.STEP) == ("cgprof", "step")
    n = 20_000
    t0 = time.perf_counter()
    for i in range(n):
        with mark.step(i):
            pass
    per_step_us = (time.perf_counter() - t0) / n * 1e6
    # A few microseconds on a laptop; the bound only catches an accidental slow path.
    assert per_step_us < 50, per_step_us


def test_rank_marker_is_a_zero_length_range_with_the_rank_as_payload(domain: RecordingDomain):
    mark.rank(1, 2)
    with mark.step(0):
        pass
    assert domain.calls == [
        ("push", "rank 1/2", 1),
        ("pop",),
        ("push", "step", 0),
        ("pop",),
    ]
    assert "rank 1/2".startswith(mark.RANK_PREFIX)


@pytest.mark.parametrize(("rank", "world"), [(2, 2), (-1, 2), (0, 0)])
def test_rank_out_of_range_is_refused(domain: RecordingDomain, rank: int, world: int):
    with pytest.raises(ValueError, match=f"rank {rank} out of range for world size {world}"):
        mark.rank(rank, world)
    assert domain.calls == []


def test_region_costs_little_without_a_profiler():
    n = 20_000
    t0 = time.perf_counter()
    for i in range(n):
        with mark.region("copy_in", i):
            pass
    per_range_us = (time.perf_counter() - t0) / n * 1e6
    # ~0.3 us here (a contextlib generator took ~2 us); only catches a slow path
    assert per_range_us < 20, per_range_us
