"""Sketches over Delta tables: register, random update batches (through the store and
written directly with delta-rs by another writer), maintain from the pulled change feed;
after every batch the sketch equals a recapture at the same table versions."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from workload_data import synthetic_tables, workload_stores

from imp_core.embedded.maintainer import Maintainer
from imp_core.errors import (
    SchemaMismatchError,
    UnknownColumnError,
    UnknownQueryError,
    UnknownTableError,
)
from imp_core.storage import DeltaStore
from imp_core.workloads.queries import list_queries
from imp_core.workloads.schemas import TABLES

QUERIES = list_queries()


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    return workload_stores(tmp_path_factory.mktemp("store"))


def _store_for(stores, wq):
    return stores["tpch" if wq.suite == "tpch" else "synthetic"]


def _rows_for_insert(store, table, rng, n, salt):
    data = store.read(table)
    src = data.take(pa.array(rng.integers(0, data.num_rows, size=n), type=pa.int64()))
    key = TABLES[table].key
    if key:
        col = key[-1]
        idx = src.schema.get_field_index(col)
        vals = np.arange(salt, salt + n)
        field = src.schema.field(col)
        src = src.set_column(idx, field, pa.array(vals).cast(field.type))
    return src


@pytest.mark.parametrize("wq", QUERIES, ids=[q.name for q in QUERIES])
def test_maintained_from_delta_feed_equals_recapture(stores, wq):
    store = _store_for(stores, wq)
    m = Maintainer(store)
    q = m.register(wq.name, wq.sql, {f"{t}.{c}": 16 for t, c in wq.sketch})
    assert q.sketch == m.reference_sketch(wq.name)
    table = wq.sketch[0][0]
    rng = np.random.default_rng(len(wq.name))
    salt = 50_000_000 + 100_000 * QUERIES.index(wq)
    for step in range(3):
        data = store.read(table)
        dels = data.take(pa.array(rng.choice(data.num_rows, size=8, replace=False)))
        if table == "lineitem":
            # re-insert the deleted lines with other quantities and shipping dates
            # (an update): fresh line numbers would leave the declared domain [1, 7]
            perm = pa.array(rng.permutation(dels.num_rows))
            ins = dels
            for col in ("l_quantity", "l_shipdate", "l_returnflag"):
                i = ins.schema.get_field_index(col)
                ins = ins.set_column(i, ins.schema.field(col), dels.column(col).take(perm))
        else:
            ins = _rows_for_insert(store, table, rng, 8, salt + 1000 * step)
        store.apply(table, inserts=ins, deletes=dels)
        m.maintain(wq.name)
        assert q.versions[table] == store.version(table)
        assert q.sketch == m.reference_sketch(wq.name), f"{wq.name} step {step}"


def test_changes_by_another_writer_are_seen(tmp_path):
    store = DeltaStore(tmp_path)
    t = synthetic_tables()["t5000g"].slice(0, 2000)
    store.create_table("t5000g", t, key="id", cluster_by=("a",))
    m = Maintainer(store)
    wq = next(q for q in QUERIES if q.name == "q_having_2")
    q = m.register("h2", wq.sql, {"t5000g.a": 20})
    location = store.entry("t5000g").location
    path = location if location.startswith("/") else str(tmp_path / location)
    # another writer: an append and a predicate delete, straight through delta-rs
    extra = t.slice(0, 50).set_column(0, t.schema.field("id"),
                                       pa.array(np.arange(900_000, 900_050)))
    write_deltalake(path, extra, mode="append")
    DeltaTable(path).delete("a < 40")
    before = q.versions["t5000g"]
    m.maintain("h2")
    assert q.versions["t5000g"] == store.version("t5000g") > before
    assert q.sketch == m.reference_sketch("h2")


def test_bad_updates_change_nothing(tmp_path):
    store = DeltaStore(tmp_path)
    t = synthetic_tables()["t5000g"].slice(0, 100)
    store.create_table("t5000g", t, key="id")
    m = Maintainer(store)
    m.register("h2", next(q for q in QUERIES if q.name == "q_having_2").sql,
               {"t5000g.a": 4})
    v = store.version("t5000g")
    with pytest.raises(SchemaMismatchError):
        store.apply("t5000g", inserts=t.drop_columns(["b"]))
    with pytest.raises(SchemaMismatchError):
        store.apply("t5000g", inserts=t.slice(0, 1))  # duplicate key
    with pytest.raises(UnknownTableError):
        store.apply("nosuch", inserts=t)
    assert store.version("t5000g") == v
    assert m.maintain("h2").empty


def test_registration_errors_register_nothing(tmp_path):
    store = DeltaStore(tmp_path)
    store.create_table("t5000g", synthetic_tables()["t5000g"].slice(0, 100), key="id")
    m = Maintainer(store)
    with pytest.raises(UnknownTableError, match="nosuch"):
        m.register("a", "SELECT a, count(*) AS c FROM nosuch GROUP BY a", {"t5000g.a": 4})
    with pytest.raises(UnknownColumnError, match="zz"):
        m.register("b", "SELECT a, sum(zz) AS s FROM t5000g GROUP BY a", {"t5000g.a": 4})
    with pytest.raises(UnknownColumnError):
        m.register("c", "SELECT a, sum(b) AS s FROM t5000g GROUP BY a", {"t5000g.zz": 4})
    with pytest.raises(UnknownQueryError):
        m.maintain("a")
    assert m.queries == {} and store.version("t5000g") == 0


@pytest.mark.spark
def test_spark_pulled_deltas_maintain_exact_sketches(stores):
    """The same maintenance with deltas extracted by Spark (filtered, projected and
    annotated there); Spark's own recapture agrees as well."""
    from imp_core.spark import capture, get_spark, register_tables
    from imp_core.spark.deltas import SparkDeltaSource

    store = stores["tpch"]
    spark = get_spark()
    source = SparkDeltaSource(store, spark)
    m = Maintainer(store, source=source)
    names = ("q03", "q06", "q12")
    for n in names:
        wq = next(q for q in QUERIES if q.name == n)
        m.register(n, wq.sql, {"lineitem.l_orderkey": 16})
    rng = np.random.default_rng(3)
    for _ in range(2):
        data = store.read("lineitem")
        dels = data.take(pa.array(rng.choice(data.num_rows, size=10, replace=False)))
        i = dels.schema.get_field_index("l_shipdate")
        ins = dels.set_column(i, dels.schema.field("l_shipdate"),
                              dels.column("l_shipdate").take(pa.array(rng.permutation(10))))
        store.apply("lineitem", inserts=ins, deletes=dels)
        for n in names:
            m.maintain(n)
            q = m.query(n)
            assert q.sketch == m.reference_sketch(n)
    register_tables(spark, {t: store.read(t) for t in store.tables()})
    for n in names:
        q = m.query(n)
        assert capture(spark, q.plan, q.partitions) == q.sketch


@pytest.mark.spark
def test_spark_bootstrap_state_equals_in_memory_state(stores):
    """State bootstrapped from Spark's filtered, annotated snapshot behaves exactly like
    state bootstrapped in memory: same sketch and annotated result now, and after the
    same further changes."""
    from imp_core.oracle.reference import reference_capture
    from imp_core.spark import get_spark
    from imp_core.spark.deltas import SparkDeltaSource

    store = stores["synthetic"]
    spark_m = Maintainer(store, source=SparkDeltaSource(store, get_spark()))
    local_m = Maintainer(store)
    for n in ("q_join", "q_topk", "cq2"):
        wq = next(q for q in QUERIES if q.name == n)
        parts = {f"{t}.{c}": 8 for t, c in wq.sketch}
        a, b = spark_m.register(n, wq.sql, parts), local_m.register(n, wq.sql, parts)
        ref = reference_capture(a.plan, {t: store.read(t, v) for t, v in a.versions.items()},
                                a.partitions)
        assert a.sketch == b.sketch == ref.sketch
        assert a.pipeline.result().to_counter() == ref.bag.items
        table = wq.sketch[0][0]
        data = store.read(table)
        store.apply(table, deletes=data.slice(0, 25))
        spark_m.maintain(n), local_m.maintain(n)
        assert a.sketch == b.sketch == spark_m.reference_sketch(n)
        assert a.pipeline.result().to_counter() == b.pipeline.result().to_counter()


@pytest.mark.spark
@pytest.mark.parametrize("wq", QUERIES, ids=[q.name for q in QUERIES])
def test_every_workload_query_with_spark_deltas_equals_spark_recapture(stores, wq):
    """Deltas extracted by Spark (pushed-down selection, projection, fragment ids), checked
    against a fresh capture on Spark at the same table versions after every batch: batches
    through the store, then one written by another writer straight through delta-rs."""
    from imp_core.spark import capture, get_spark, register_tables
    from imp_core.spark.deltas import SparkDeltaSource

    store = _store_for(stores, wq)
    spark = get_spark()
    m = Maintainer(store, source=SparkDeltaSource(store, spark))
    q = m.register(wq.name, wq.sql, {f"{t}.{c}": 8 for t, c in wq.sketch})
    table = wq.sketch[0][0]
    rng = np.random.default_rng(1000 + QUERIES.index(wq))
    for step in range(2):
        data = store.read(table)
        dels = data.take(pa.array(rng.choice(data.num_rows, size=6, replace=False)))
        if table == "lineitem":
            perm = pa.array(rng.permutation(dels.num_rows))
            i = dels.schema.get_field_index("l_shipdate")
            ins = dels.set_column(i, dels.schema.field("l_shipdate"),
                                  dels.column("l_shipdate").take(perm))
        else:
            ins = _rows_for_insert(store, table, rng, 6, 70_000_000 + 10_000 * step
                                   + 100_000 * QUERIES.index(wq))
        store.apply(table, inserts=ins, deletes=dels)
        m.maintain(wq.name)
        register_tables(spark, {t: store.read(t, v) for t, v in q.versions.items()})
        assert q.sketch == capture(spark, q.plan, q.partitions), f"{wq.name} step {step}"
    # another writer: a predicate delete and an append, two versions the service never saw
    before = store.version(table)
    _external_writes(store, table, rng, 90_000_000 + 1000 * QUERIES.index(wq))
    assert store.version(table) == before + 2
    m.maintain(wq.name)
    assert q.versions[table] == store.version(table)
    register_tables(spark, {t: store.read(t, v) for t, v in q.versions.items()})
    assert q.sketch == capture(spark, q.plan, q.partitions), f"{wq.name} external writes"


def _external_writes(store, table, rng, salt):
    """Through delta-rs directly: delete the rows of a few keys, append copies of stored
    rows under fresh keys (lineitem: fresh order keys, same line numbers)."""
    path = store.entry(table).location
    data = store.read(table)
    key = "l_orderkey" if table == "lineitem" else TABLES[table].key[-1]
    victims = sorted(set(rng.choice(data.column(key).to_numpy(), size=3).tolist()))
    DeltaTable(path).delete(f"{key} IN ({', '.join(str(int(v)) for v in victims)})")
    copies = data.take(pa.array(rng.integers(0, data.num_rows, size=5), type=pa.int64()))
    field = copies.schema.field(key)
    copies = copies.set_column(copies.schema.get_field_index(key), field,
                               pa.array(np.arange(salt, salt + 5)).cast(field.type))
    write_deltalake(path, copies, mode="append")
