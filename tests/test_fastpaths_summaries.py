"""The numpy paths of the summaries, the verdict and the JSON writer give exactly what the
pandas/json code they replaced gave (kept here as the reference), on random inputs."""

from __future__ import annotations

import json
import random

import numpy as np
import pandas as pd
import pytest

from cgprof.metrics import summaries as S
from cgprof.metrics.verdict import _median_int
from cgprof.report import json_report as J


def _stats_reference(df: pd.DataFrame, keys: list[str], count_name: str) -> pd.DataFrame:
    """The group-by implementation of ``summaries._stats`` before it went numpy."""
    cols = keys + [count_name] + S.STAT_COLUMNS
    if df.empty:
        return pd.DataFrame({c: pd.Series(dtype="object" if c in keys else "int64") for c in cols})
    df = df.assign(dur_ns=df["dur_ns"].astype("int64"))
    g = df.groupby(keys, sort=False, observed=True)["dur_ns"]
    out = g.agg(["size", "sum", "mean", "median", "min", "max", "std"]).reset_index()
    out.columns = cols
    for k in keys:
        out[k] = out[k].astype(str).astype(object)
    out["std_ns"] = out["std_ns"].fillna(0.0)
    out = out.astype({count_name: "int64", "total_ns": "int64", "min_ns": "int64",
                      "max_ns": "int64"})
    out = out.sort_values(["total_ns"] + keys, ascending=[False] + [True] * len(keys))
    return out.reset_index(drop=True)


def _random_frame(rng: np.random.Generator, trial: int) -> tuple[pd.DataFrame, list[str]]:
    n = int(rng.integers(0, 1500))
    names = [f"k{i}" for i in range(int(rng.integers(1, 30)))]
    picked = rng.choice(names + [None], n)
    scale = [10, 1000, 10**9, 10**13, 10**16][trial % 5]
    dur = rng.integers(-5 if trial % 7 == 0 else 0, scale, n)
    if trial % 3 == 0:
        cat = pd.Categorical(picked, categories=names + ["unused"])
        return pd.DataFrame({"name": cat, "dur_ns": dur}), ["name"]
    if trial % 3 == 1:
        style = pd.Series(rng.choice(["a", "b", None], n), dtype="str")
        return pd.DataFrame({"name": pd.Series(picked, dtype=object), "style": style,
                             "dur_ns": pd.array(dur, dtype="Int64")}), ["name", "style"]
    return pd.DataFrame({"name": pd.Series(picked, dtype=object), "dur_ns": dur}), ["name"]


def test_stats_equal_the_groupby_they_replaced():
    rng = np.random.default_rng(0)
    for trial in range(150):
        df, keys = _random_frame(rng, trial)
        want = _stats_reference(df, keys, "instances")
        got = S._stats(df, keys, "instances")
        pd.testing.assert_frame_equal(got, want, check_exact=True)
        assert (got.to_json(orient="records", double_precision=15)
                == want.to_json(orient="records", double_precision=15))


def test_group_std_public_fallback_is_the_same(monkeypatch):
    rng = np.random.default_rng(1)
    group = rng.integers(0, 7, 5000)
    dur = rng.integers(0, 10**9, 5000)
    fast = S._group_std(dur, group, 9)
    import pandas._libs.groupby as lib

    def broken(*args, **kwargs):
        raise TypeError("signature changed")

    monkeypatch.setattr(lib, "group_var", broken)
    slow = S._group_std(dur, group, 9)
    assert np.array_equal(fast, slow, equal_nan=True)
    assert np.isnan(fast[7:]).all()


def test_median_int_is_numpy_median():
    rng = np.random.default_rng(2)
    for _ in range(500):
        n = int(rng.integers(1, 300))
        x = rng.integers(-10**int(rng.integers(1, 17)), 10**int(rng.integers(1, 17)), n)
        assert _median_int(x) == float(np.median(x.astype(np.float64)))


def test_longest_gaps_is_the_stable_sort_it_replaced():
    def reference(gaps, limit):
        if limit is None or len(gaps) <= limit:
            return gaps
        dur = gaps["gap_ns"].to_numpy(dtype=np.int64, na_value=0)
        keep = np.sort(np.argsort(-dur, kind="stable")[:limit])
        return gaps.take(keep).reset_index(drop=True)

    rng = np.random.default_rng(3)
    for t in range(300):
        n = int(rng.integers(0, 300))
        limit = int(rng.integers(0, n + 3)) if t % 7 else None
        gaps = pd.DataFrame({"gap_ns": pd.array(rng.integers(0, [3, 50, 10**6][t % 3], n),
                                                dtype="Int64"), "x": np.arange(n)})
        if n and t % 5 == 0:
            gaps.loc[int(rng.integers(0, n)), "gap_ns"] = pd.NA
        pd.testing.assert_frame_equal(J.longest_gaps(gaps, limit), reference(gaps, limit))


def test_arrow_writer_floats_and_bools_as_pandas_writes_them():
    rng = np.random.default_rng(4)
    for i in range(100):
        n = int(rng.integers(1, 40))
        f = rng.normal(0, 10.0 ** int(rng.integers(-20, 20)), n)
        if i % 3 == 0:
            f[int(rng.integers(0, n))] = np.nan
        df = pd.DataFrame({
            "a": f, "b": pd.array(f, dtype="Float64"), "c": rng.random(n) > 0.5,
            "d": pd.array(np.where(rng.random(n) > 0.3, rng.random(n) > 0.5, None),
                          dtype="boolean"),
            "e": np.round(f, 3), "g": f.astype(np.float32), "h": rng.integers(0, 9, n)})
        assert J._arrow_ok(df)
        want = df.to_json(orient="records", double_precision=15, force_ascii=False)
        assert "".join(J._arrow_chunks(df, 7)) == want
    assert not J._arrow_ok(pd.DataFrame({"x": [1.0, np.inf]}))  # "inf": the records path


@pytest.mark.parametrize("seed", range(3))
def test_long_lists_spliced_as_json_indents_them(monkeypatch, seed):
    monkeypatch.setattr(J, "_LONG_LIST", 3)
    rnd = random.Random(seed)

    def gen(depth=0):
        r = rnd.random()
        if depth > 3 or r < 0.3:
            return rnd.choice([1, 'x\u00e9"/', 2.5, None, True, -7])
        if r < 0.6:
            return [gen(depth + 1) for _ in range(rnd.randint(0, 6))]
        if r < 0.8:
            return [rnd.choice([1, 22, "ab", "c\\d", "\u00fc"]) for _ in range(rnd.randint(0, 8))]
        return {str(i): gen(depth + 1) for i in range(rnd.randint(0, 4))}

    for _ in range(300):
        doc = {"a": gen(), "b": [gen() for _ in range(3)]}
        want = json.dumps(doc, sort_keys=True, indent=1, allow_nan=False) + "\n"
        assert "".join(J._dump(doc)) == want
