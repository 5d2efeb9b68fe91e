"""The report fast paths give the bytes of the paths they replace: small JSON tables written
from Python records (not pandas' ``to_json``), text tables read column by column (not
``itertuples``)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import cgprof
from cgprof.report import json_report as jr
from cgprof.report import text

REPO = Path(__file__).resolve().parents[1]
TRACES = sorted((REPO / "traces").glob("*.sqlite"))


def _pandas_json(df: pd.DataFrame, monkeypatch: pytest.MonkeyPatch, rows: int) -> str:
    with monkeypatch.context() as m:
        m.setattr(jr, "_RECORDS_MAX_CELLS", -1)
        table = jr._Table(df)
        assert table.records is None or df.empty
        return "".join(table.chunks(rows))


def _tables(doc: object) -> list[jr._Table]:
    if isinstance(doc, jr._Table):
        return [doc]
    if isinstance(doc, dict):
        return [t for v in doc.values() for t in _tables(v)]
    if isinstance(doc, list):
        return [t for v in doc for t in _tables(v)]
    return []


@pytest.fixture(scope="module")
def results() -> dict[str, object]:
    return {p.stem: cgprof.analyze(p) for p in TRACES}


def test_record_tables_of_real_traces_are_pandas_bytes(results, monkeypatch):
    """Every table of every shipped trace's document: records path == pandas path."""
    used = 0
    for name, result in results.items():
        for table in _tables(jr.result_to_dict(result, _lazy=True, all_gaps=True)):
            df = table.df
            want = _pandas_json(df, monkeypatch, 100_000)
            assert "".join(table.chunks()) == want, (name, list(df.columns))
            used += table.records is not None and len(df) > 0
    assert used > 100


def test_documents_of_real_traces_are_the_same_with_and_without_records(results, monkeypatch):
    for name, result in list(results.items())[:6]:
        fast = jr.render([result], all_gaps=True)
        with monkeypatch.context() as m:
            m.setattr(jr, "_RECORDS_MAX_CELLS", -1)
            slow = jr.render([result], all_gaps=True)
        assert fast == slow, name


def test_record_tables_edge_values_are_pandas_bytes(monkeypatch):
    df = pd.DataFrame({
        "i": np.array([0, -3, 2**62, 7, 1], dtype=np.int64),
        "u": np.array([0, 1, 2**63 + 5, 3, 4], dtype=np.uint64),
        "m": pd.array([1, None, 3, None, 5], dtype="Int64"),
        "f": [1.5, np.nan, math.inf, -math.inf, -0.0],
        "g": pd.array([0.1, None, 1e-7, 1e20, 123456789.123456789], dtype="Float64"),
        "gi": pd.array([math.inf, None, 1.0, -math.inf, 2.0], dtype="Float64"),
        "b": [True, False, True, True, False],
        "bn": pd.array([True, None, False, True, None], dtype="boolean"),
        "kind": pd.Categorical(["a/b", None, 'q"<x>', "é", "a/b"]),
        "ki": pd.Categorical([3, None, 1, 3, 2]),
        "o": np.array(["cudaLaunchKernel", None, "x\\y\n", "\u0001", np.nan], dtype=object),
        "ol": pd.Series([[1, 2], {"a": 1.5}, None, "s", 4], dtype=object),
        "s": pd.array(["p", None, "q", "", "r"], dtype="str"),
        "ss": pd.array(["p", None, "q", "", "r"], dtype="string"),
        "Z col": [1, 2, 3, 4, 5],
    })
    for rows in (1, 2, 5, 100):
        table = jr._Table(df)
        assert table.records is not None
        assert "".join(table.chunks(rows)) == _pandas_json(df, monkeypatch, rows)
    assert '"f":"inf"' in "".join(jr._Table(df).chunks())
    empty = jr._Table(df.iloc[:0])
    assert "".join(empty.chunks()) == "[]" == _pandas_json(df.iloc[:0], monkeypatch, 10)
    no_columns = pd.DataFrame(index=range(3))
    assert "".join(jr._Table(no_columns).chunks()) == _pandas_json(no_columns, monkeypatch, 10)


@pytest.mark.parametrize("df", [
    pd.DataFrame({"t": pd.to_datetime(["2024-01-01", "2024-01-02"]), "n": [1, 2]}),
    pd.DataFrame({"f": np.array([0.1, 2.5], dtype=np.float32)}),
    pd.DataFrame({"d": pd.to_timedelta([1, 2], unit="s")}),
    pd.DataFrame([[1, 2]], columns=["a", "a"]),
    pd.DataFrame({1: [1, 2], "b": [3, 4]}),
])
def test_records_leave_other_dtypes_and_names_to_pandas(df):
    assert jr._records(df, sorted(df.columns, key=str)) is None


def test_text_records_hold_what_itertuples_holds(results):
    """Each value as itertuples gives it (same type and value), for every table the text
    report reads, plus a head/tail selection of the steps."""
    for result in results.values():
        frames = [result.launches, result.gaps.devices, result.gaps.by_kind,
                  result.coverage.eager_top, result.steps.steps, result.steps.candidates]
        for df in frames:
            cols = [c for c in df.columns if c.isidentifier() and not c.startswith("_")]
            for at in (None, [0, len(df) - 1] if len(df) else None):
                got = text.records(df, cols, at)
                want = list((df if at is None else df.iloc[at]).itertuples())
                assert len(got) == len(want)
                for g, w in zip(got, want, strict=True):
                    for c in cols:
                        a, b = getattr(g, c), getattr(w, c)
                        assert type(a) is type(b) and (a is b or a == b or (a != a and b != b))


def test_text_report_of_real_traces_is_unchanged(results, monkeypatch):
    """The text report with its rows read through itertuples, as before, is the same text."""
    fast = {name: text.render(r) for name, r in results.items()}
    monkeypatch.setattr(text, "records", lambda df, cols, at=None: list(
        (df if at is None else df.take(at)).itertuples()))
    for name, result in results.items():
        assert text.render(result) == fast[name], name
