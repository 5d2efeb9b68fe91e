"""The test-input builder writes what nsys writes: same tables, columns, ids and rules."""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

import pytest
from nsys_ddl import SAMPLE_TABLES, schema
from nsysdb import (
    GE,
    GN,
    G,
    K,
    M,
    N,
    R,
    S,
    Y,
    global_pid,
    global_tid,
    make_nsys_db,
    write_empty_file,
    write_not_sqlite,
    write_plain_sqlite,
    write_truncated_copy,
)

SAMPLE_FILES = ("mlp8_node.sqlite", "mlp8_graph.sqlite")


def ro(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True)


def tables(path: Path) -> list[str]:
    with ro(path) as conn:
        return [r[0] for r in conn.execute("SELECT name FROM sqlite_master ORDER BY rowid")]


def columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]


def sample_sql(samples_dir: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for f in SAMPLE_FILES:
        with ro(samples_dir / f) as conn:
            for name, sql in conn.execute("SELECT name, sql FROM sqlite_master"):
                out.setdefault(name, sql)
    return out


def everything(**extra):
    """One row of every kind, for layout checks."""
    tables = dict(
        kernels=[K(1000, 2000, "gemm", corr=1, mangled_name="_Z4gemmv")],
        runtime=[R(100, 900, "cudaLaunchKernel_v7000", corr=1)],
        nvtx=[N(50, 3500, "step", domain="cgprof")],
        memcpy=[M(10, 40, 4096, corr=3)],
        memset=[S(41, 45, 4096, corr=4)],
        sync=[Y(2000, 2100, corr=5, sync_type=2)],
        graph_trace=[G(2500, 3000, corr=6)],
        graph_node_events=[GN(20, 1 << 32)],
        gpus=[(0, "NVIDIA H200")],
        threads=[(100, 100, "python3")],
        processes=[(100, "python3")],
        graph_trace_mode="node",
    )
    tables.update(extra)
    return tables


# --- layout against the real 2025.3 exports ---------------------------------------------------


def test_ddl_text_is_the_samples(samples_dir):
    real = sample_sql(samples_dir)
    ours = schema("2025")
    for name in SAMPLE_TABLES:
        assert ours[name].ddl() == real[name], name
    for name in ours:
        if name.startswith("ENUM_"):
            assert ours[name].ddl() == real[name], name


def test_builder_tables_and_columns_are_the_samples(samples_dir, make_db):
    db = make_db(**everything())
    real = sample_sql(samples_dir)
    written = tables(db)
    assert "CUPTI_ACTIVITY_KIND_MEMSET" in written  # not in the samples: checked below
    with ro(db) as conn:
        ours = dict(conn.execute("SELECT name, sql FROM sqlite_master"))
        for name in written:
            if name == "CUPTI_ACTIVITY_KIND_MEMSET":
                continue
            assert ours[name] == real[name], name
            with ro(samples_dir / SAMPLE_FILES[0]) as s0, ro(samples_dir / SAMPLE_FILES[1]) as s1:
                want = columns(s0, name) or columns(s1, name)
            assert columns(conn, name) == want, name
        assert columns(conn, "CUPTI_ACTIVITY_KIND_MEMSET") == [
            "start", "end", "deviceId", "contextId", "greenContextId", "streamId",
            "correlationId", "globalPid", "value", "bytes", "graphNodeId", "memKind",
        ]


def test_kernel_row_looks_like_a_real_one(samples_dir, make_db):
    """Same NULL/non-NULL pattern as a real eager kernel row (greenContextId 0, not NULL)."""
    db = make_db(kernels=[K(1000, 2000, "gemm", corr=1, mangled_name="_Z4gemmv")])
    with ro(samples_dir / "mlp8_node.sqlite") as conn:
        real = conn.execute(
            "SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE graphNodeId IS NULL LIMIT 1"
        ).fetchone()
    with ro(db) as conn:
        ours = conn.execute("SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
    assert [v is None for v in ours] == [v is None for v in real]


# --- lazy creation ----------------------------------------------------------------------------


ENUMS = [n for n in schema("2025") if n.startswith("ENUM_")]


def test_only_stringids_metadata_and_enums_without_rows(make_db):
    assert tables(make_db()) == ["StringIds", *ENUMS, "META_DATA_EXPORT"]
    bare = make_db(nsys_version=None, schema_version=None, enums=False)
    assert tables(bare) == ["StringIds"]


def test_a_table_exists_only_when_it_has_rows(make_db):
    db = make_db(kernels=[K(1, 2, "k")], enums=False, nsys_version=None, schema_version=None)
    assert tables(db) == ["StringIds", "CUPTI_ACTIVITY_KIND_KERNEL"]


def test_empty_creates_tables_without_rows(make_db):
    db = make_db(empty=["CUPTI_ACTIVITY_KIND_KERNEL", "NVTX_EVENTS"], enums=False)
    assert tables(db) == [
        "StringIds", "CUPTI_ACTIVITY_KIND_KERNEL", "NVTX_EVENTS", "META_DATA_EXPORT"
    ]
    with ro(db) as conn:
        assert conn.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone() == (0,)


def test_empty_rejects_unknown_tables(make_db):
    with pytest.raises(ValueError, match=r"variant '2025' has no table\(s\) \['KERNELS'\]"):
        make_db(empty=["KERNELS"])


def test_refuses_to_overwrite(tmp_path):
    make_nsys_db(tmp_path / "t.sqlite")
    with pytest.raises(FileExistsError):
        make_nsys_db(tmp_path / "t.sqlite")


# --- ids decode -------------------------------------------------------------------------------


def test_global_ids():
    assert global_tid(1010, 1010) == 281491921699826  # the samples' python thread
    assert global_pid(1010) == 281491921698816
    assert global_tid(100) == (1 << 48) | (100 << 24) | 100


def test_ids_decode_and_join_like_nvidia(make_db):
    db = make_db(
        kernels=[
            K(start=1000, end=2000, name="gemm", stream=7, corr=1),
            K(start=2500, end=3000, name="void relu<float>(float*)", short_name="relu", corr=2,
              graph_node=11),
            K(start=2600, end=2700, name="other_proc", corr=1, pid=200),
        ],
        runtime=[
            R(start=100, end=900, name="cudaLaunchKernel_v7000", corr=1),
            R(start=950, end=990, name="cudaGraphLaunch_v10000", corr=2, tid=101),
            R(start=60, end=70, name="cuLaunchKernel", corr=1, pid=200, event_class=1),
        ],
    )
    with ro(db) as conn:
        rows = conn.execute(
            """SELECT k.start, d.value, sn.value, k.graphNodeId, a.value,
                      (r.globalTid >> 24) & 0xFFFFFF, r.globalTid & 0xFFFFFF, r.eventClass
               FROM CUPTI_ACTIVITY_KIND_KERNEL k
               JOIN CUPTI_ACTIVITY_KIND_RUNTIME r
                 ON r.correlationId = k.correlationId
                AND (r.globalTid & -16777216) = k.globalPid
               JOIN StringIds d ON d.id = k.demangledName
               JOIN StringIds sn ON sn.id = k.shortName
               JOIN StringIds a ON a.id = r.nameId
               ORDER BY k.start"""
        ).fetchall()
        assert rows == [
            (1000, "gemm", "gemm", None, "cudaLaunchKernel_v7000", 100, 100, 0),
            (2500, "void relu<float>(float*)", "relu", 11, "cudaGraphLaunch_v10000", 100, 101, 0),
            (2600, "other_proc", "other_proc", None, "cuLaunchKernel", 200, 200, 1),
        ]
        assert conn.execute("SELECT min(id) FROM StringIds").fetchone() == (0,)
        grid_ids = conn.execute("SELECT gridId FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchall()
        assert grid_ids == [(1,), (2,), (3,)]


def test_nvtx_domains_registered_strings_and_payloads(make_db):
    db = make_db(
        nvtx=[
            N(start=50, end=3500, text="step", domain="cgprof", payload=7),
            N(start=60, end=70, text="aten::mm"),  # default domain, like PyTorch's
            N(start=80, end=90, text="forward", domain="cgprof", registered=True, tid=101),
            N(start=95, end=None, text="other", domain="mine", event_type=60, end_tid=102),
            N(start=99, text="mark", event_type=34, payload=0.5),
        ],
    )
    with ro(db) as conn:
        rows = conn.execute(
            """SELECT n.start, n."end", n.eventType, n.text, s.value, n.domainId,
                      n.globalTid & 0xFFFFFF, n.endGlobalTid & 0xFFFFFF, n.int64Value,
                      n.doubleValue
               FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId
               ORDER BY n.rowid"""
        ).fetchall()
    assert rows == [
        (-1_000_000_000, None, 75, "cgprof", None, 1, 100, None, None, None),
        (-2_000_000_000, None, 75, "mine", None, 2, 100, None, None, None),
        (50, 3500, 59, "step", None, 1, 100, None, 7, None),
        (60, 70, 59, "aten::mm", None, 0, 100, None, None, None),
        (80, 90, 59, None, "forward", 1, 101, None, None, None),
        (95, None, 60, "other", None, 2, 100, 102, None, None),
        (99, None, 34, "mark", None, 0, 100, None, None, 0.5),
    ]


def test_domain_ids_are_per_process(make_db):
    db = make_db(nvtx=[N(1, 2, "a", domain="x"), N(3, 4, "b", domain="y", pid=7),
                       N(5, 6, "c", domain="y")])
    with ro(db) as conn:
        rows = conn.execute(
            "SELECT text, domainId, globalTid FROM NVTX_EVENTS WHERE eventType = 75 ORDER BY rowid"
        ).fetchall()
    assert rows == [("x", 1, global_tid(100)), ("y", 1, global_tid(7)), ("y", 2, global_tid(100))]


def test_gpu_rows_carry_global_pid(make_db):
    db = make_db(**everything())
    with ro(db) as conn:
        for table in ("KERNEL", "MEMCPY", "MEMSET", "SYNCHRONIZATION", "GRAPH_TRACE"):
            pids = conn.execute(f"SELECT globalPid FROM CUPTI_ACTIVITY_KIND_{table}").fetchall()
            assert pids == [(global_pid(100),)], table
        assert conn.execute("SELECT srcKind, dstKind, copyKind FROM CUPTI_ACTIVITY_KIND_MEMCPY"
                            ).fetchone() == (0, 2, 1)
        assert conn.execute(
            "SELECT t.globalTid, s.value FROM ThreadNames t JOIN StringIds s ON s.id = t.nameId"
        ).fetchall() == [(global_tid(100), "python3")]
        assert conn.execute("SELECT vmId, id, name FROM TARGET_INFO_GPU").fetchall() == [
            (1 << 48, 0, "NVIDIA H200")
        ]


def test_graph_events(make_db):
    db = make_db(
        graph_node_events=[GN(10, 1 << 32), GN(20, 2 << 32, original=1 << 32)],
        graph_events=[GE(5, graph_id=1), GE(30, graph_id=1, graph_exec_id=2)],
    )
    with ro(db) as conn:
        assert conn.execute(
            """SELECT e.start, e."end", e.eventClass, s.value, e.graphNodeId, e.originalGraphNodeId
               FROM CUDA_GRAPH_NODE_EVENTS e JOIN StringIds s ON s.id = e.nameId"""
        ).fetchall() == [
            (10, 10, 77, "Graph Node Creation", 1 << 32, None),
            (20, 20, 77, "Graph Node Creation", 2 << 32, 1 << 32),
        ]
        assert conn.execute(
            """SELECT e.eventClass, s.value, e.graphId, e.graphExecId
               FROM CUDA_GRAPH_EVENTS e JOIN StringIds s ON s.id = e.nameId"""
        ).fetchall() == [(95, "Graph Creation", 1, None), (94, "GraphExec Creation", 1, 2)]


# --- metadata ---------------------------------------------------------------------------------


def meta(path: Path, table: str) -> dict[str, str]:
    with ro(path) as conn:
        return dict(conn.execute(f"SELECT name, value FROM {table}"))


def test_metadata_2025(make_db):
    db = make_db(graph_trace_mode="node")
    assert meta(db, "META_DATA_CAPTURE") == {"PROCESS_0:CUDA_GRAPH_TRACE_OPTIONS:MODE": "Node"}
    export = meta(db, "META_DATA_EXPORT")
    assert export["EXPORT_PRODUCT_VERSION"] == "2025.3.2.0"
    assert export["EXPORT_SCHEMA_VERSION"] == "3.20.3"
    assert export["EXPORT_SCHEMA_VERSION_MINOR"] == "20"
    graph = make_db(graph_trace_mode="graph", nsys_version="2024.6.2.225", schema_version=None)
    assert meta(graph, "META_DATA_CAPTURE") == {"PROCESS_0:CUDA_GRAPH_TRACE_OPTIONS:MODE": "Graph"}
    assert "EXPORT_SCHEMA_VERSION" not in meta(graph, "META_DATA_EXPORT")
    assert "META_DATA_CAPTURE" not in tables(make_db())


def test_legacy_metadata(make_db):
    db = make_db(legacy_metadata=True, nsys_version="2023.2.3.1001", schema_version="3.1.7")
    assert "META_DATA_EXPORT" not in tables(db)
    legacy = meta(db, "EXPORT_META_DATA")
    assert legacy["EXPORT_PRODUCT_VERSION"] == "2023.2.3.1001"
    assert legacy["EXPORT_SCHEMA_VERSION"] == "3.1.7"
    assert "EXPORT_OUTUPT_FILE" in legacy  # nsys's own misspelling
    with pytest.raises(ValueError, match="META_DATA_CAPTURE"):
        make_db(legacy_metadata=True, graph_trace_mode="node")


# --- older and newer layouts ------------------------------------------------------------------


def test_variant_2022(make_db):
    db = make_db(variant="2022", **everything(graph_trace_mode=None))
    names = tables(db)
    assert "EXPORT_META_DATA" in names and "META_DATA_EXPORT" not in names
    assert "CUDA_GRAPH_NODE_EVENTS" not in names
    assert "ENUM_CUDA_KRENEL_LAUNCH_TYPE" in names  # the old misspelling
    with ro(db) as conn:
        assert columns(conn, "CUDA_GRAPH_EVENTS") == [
            "start", "end", "eventClass", "globalTid", "nameId", "graphNodeId",
            "originalGraphNodeId",
        ]
        kernel = columns(conn, "CUPTI_ACTIVITY_KIND_KERNEL")
        assert "greenContextId" not in kernel and "mangledName" in kernel
        assert "copyCount" not in columns(conn, "CUPTI_ACTIVITY_KIND_MEMCPY")
        assert "binaryData" not in columns(conn, "NVTX_EVENTS")
        assert meta(db, "EXPORT_META_DATA")["EXPORT_SCHEMA_VERSION"] == "3.0.0"
    with pytest.raises(ValueError, match="no graph-level CUDA_GRAPH_EVENTS"):
        make_db(variant="2022", graph_events=[GE(1, graph_id=1)])


def test_variant_2021(make_db):
    db = make_db(variant="2021", kernels=[K(1, 2, "k", corr=1)], runtime=[R(0, 1, "x", corr=1)])
    assert tables(db) == ["StringIds", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL"]
    with ro(db) as conn:
        assert "mangledName" not in columns(conn, "CUPTI_ACTIVITY_KIND_KERNEL")
        sql = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'StringIds'").fetchone()[0]
    assert sql == "CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL)"
    with pytest.raises(ValueError, match="mangledName"):
        make_db(variant="2021", kernels=[K(1, 2, "k", mangled_name="_Z1kv")])
    with pytest.raises(ValueError, match="no metadata"):
        make_db(variant="2021", nsys_version="2021.3.1.57")


def test_variant_2026_has_kernel_graph_id(make_db):
    db = make_db(variant="2026", kernels=[K(1, 2, "k", graph_node=5, graph_id=3)],
                 graph_trace_mode="node")
    with ro(db) as conn:
        assert conn.execute(
            "SELECT graphNodeId, graphId, tensorSizeMinusOneElements"
            " FROM CUPTI_ACTIVITY_KIND_KERNEL"
        ).fetchone() == (5, 3, "")
    assert meta(db, "META_DATA_CAPTURE") == {"CUDA_GRAPH_TRACE_OPTIONS:MODE": "Node"}


def test_a_value_for_a_missing_column_raises(make_db):
    with pytest.raises(ValueError, match=r"CUPTI_ACTIVITY_KIND_KERNEL has no column graphId "
                                         r"in variant '2025' \(got graphId=3\)"):
        make_db(kernels=[K(1, 2, "k", graph_id=3)])


# --- broken inputs ----------------------------------------------------------------------------


def test_not_sqlite(tmp_path):
    path = write_not_sqlite(tmp_path / "x.sqlite")
    conn = ro(path)
    with pytest.raises(sqlite3.DatabaseError, match="^file is not a database$"):
        conn.execute("SELECT name FROM sqlite_master").fetchall()
    conn.close()


def test_truncated_copy_is_malformed(samples_dir, tmp_path):
    for f in SAMPLE_FILES:
        path = write_truncated_copy(samples_dir / f, tmp_path / f)
        assert path.stat().st_size == (samples_dir / f).stat().st_size // 2 // 4096 * 4096
        conn = ro(path)  # opening works; the first read fails
        with pytest.raises(sqlite3.DatabaseError, match="^database disk image is malformed$"):
            conn.execute("SELECT name FROM sqlite_master").fetchall()
        conn.close()


def test_plain_sqlite_and_empty_file(tmp_path):
    assert tables(write_plain_sqlite(tmp_path / "p.sqlite")) == ["notes"]
    assert tables(write_empty_file(tmp_path / "e.sqlite")) == []


# --- the synthetic benchmark trace (scripts/synth_trace.py) uses the same schema ----------------


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    try:
        import synth_trace
    finally:
        sys.path.pop(0)
    path = tmp_path_factory.mktemp("synth") / "synth.sqlite"
    stats = synth_trace.generate(path, n_kernels=3_001, n_runtime=5_000, n_steps=20)
    return synth_trace, path, stats


def test_synth_trace_layout_is_the_builders(synth):
    _, path, _ = synth
    ours = schema("2025")
    with ro(path) as conn:
        for name, sql in conn.execute("SELECT name, sql FROM sqlite_master"):
            assert sql == ours[name].ddl(), name
        assert dict(conn.execute("SELECT name, value FROM META_DATA_CAPTURE")) == {
            "PROCESS_0:CUDA_GRAPH_TRACE_OPTIONS:MODE": "Node"
        }


def test_synth_trace_counts_and_rules(synth):
    _, path, stats = synth
    assert (stats["eager_steps"], stats["graph_steps"], stats["kernels_per_step"]) == (10, 10, 130)
    with ro(path) as conn:
        one = lambda sql: conn.execute(sql).fetchone()[0]  # noqa: E731
        assert one("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL") == 3_001
        assert one("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME") == 5_000
        assert one("SELECT count(DISTINCT correlationId) FROM CUPTI_ACTIVITY_KIND_RUNTIME") == 5_000
        assert one("""SELECT count(*) FROM NVTX_EVENTS n JOIN StringIds s ON s.id = n.textId
                      WHERE s.value = 'step' AND n.domainId = 1""") == 20
        # no overlap on one stream (kernels and memcpys) or one thread (API calls)
        for sql in (
            """SELECT streamId, start, "end" FROM CUPTI_ACTIVITY_KIND_KERNEL UNION ALL
               SELECT streamId, start, "end" FROM CUPTI_ACTIVITY_KIND_MEMCPY""",
            'SELECT globalTid, start, "end" FROM CUPTI_ACTIVITY_KIND_RUNTIME',
        ):
            prev: dict[int, int] = {}
            for key, start, end in sorted(conn.execute(sql)):
                assert start >= prev.get(key, start) and end >= start
                prev[key] = end
        # every kernel has one launching call, which starts before it
        rows = conn.execute(
            """SELECT k.graphNodeId IS NOT NULL, a.value, count(*), count(DISTINCT k.correlationId),
                      sum(r.start < k.start)
               FROM CUPTI_ACTIVITY_KIND_KERNEL k
               JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId
                AND (r.globalTid & -16777216) = k.globalPid
               JOIN StringIds a ON a.id = r.nameId GROUP BY 1, 2 ORDER BY 1"""
        ).fetchall()
    eager = 3_001 - 10 * 130
    assert rows == [
        (0, "cudaLaunchKernel_v7000", eager, eager, eager),
        (1, "cudaGraphLaunch_v10000", 1_300, 10, 1_300),
    ]


def test_synth_trace_is_deterministic(synth, tmp_path):
    synth_trace, path, _ = synth
    again = synth_trace.generate(tmp_path / "again.sqlite", n_kernels=3_001, n_runtime=5_000,
                                 n_steps=20)
    assert Path(again["path"]).read_bytes() == path.read_bytes()


def test_synth_trace_ranks_are_copies_of_the_process(synth, tmp_path):
    """--n-ranks 3: three processes, one GPU each, whose analyses are the one-process
    trace's (same steps, counts, verdict), and counts three times the file's."""
    import shutil

    import pandas as pd

    import cgprof
    from cgprof.ranks import analyze_ranks

    mod, path, stats = synth
    three = tmp_path / "three.sqlite"
    shutil.copy(path, three)
    mod.replicate_ranks(three, 3)
    with ro(three) as conn:
        one = lambda sql: conn.execute(sql).fetchone()[0]  # noqa: E731
        assert one("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL") == 3 * 3_001
        assert one("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME") == 3 * 5_000
        assert one("SELECT count(*) FROM TARGET_INFO_GPU") == 3
    rr = analyze_ranks(cgprof.load(three, cache=False))
    alone = cgprof.analyze(cgprof.load(path, cache=False))
    assert [(r.rank_id, r.device_ids, r.source) for r in rr.ranks] == [
        (0, (0,), "device"), (1, (1,), "device"), (2, (2,), "device")]
    assert len({r.pid for r in rr.ranks}) == 3
    for r in rr.ranks:
        assert r.result.info["kernels"] == alone.info["kernels"] == 3_001
        assert r.result.verdict == alone.verdict
        mine, base = r.result.steps.steps, alone.steps.steps
        assert set(mine["pid"]) == {r.pid}
        ids = [c for c in ("pid", "tid") if c in base]  # the rank's own process and thread
        pd.testing.assert_frame_equal(mine.drop(columns=ids), base.drop(columns=ids))
