"""Operator state bootstrapped on Spark equals the state the engine builds from the same
table versions (compared in canonical form: tests/support/state_canon.py), for every workload query
(TPC-H SF 0.01 cut to 400 orders, synthetic and crimes tables at 3000 rows), for bounded
min/max and top-k buffers, and for edge values (NULL keys, extreme doubles, decimals,
self-joins, empty inputs); maintaining from random update batches afterwards keeps both
equal to each other and the sketch equal to a recapture."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pytest
from state_canon import canonical_state, first_difference
from workload_data import synthetic_tables, workload_stores

from imp_core.embedded.maintainer import Maintainer
from imp_core.engine.operators.aggregate import AggregateOp
from imp_core.engine.operators.merge import MergeOp
from imp_core.engine.pipeline import EngineOptions, IncrementalQuery
from imp_core.engine.state import state_key
from imp_core.errors import BootstrapModeError, SnapshotError
from imp_core.oracle.reference import reference_capture
from imp_core.spark.bootstrap import _Bootstrap, _output_from_state, bootstrap_tables
from imp_core.storage import DeltaStore
from imp_core.workloads.queries import list_queries
from imp_core.workloads.schemas import TABLES

pytestmark = pytest.mark.spark

QUERIES = list_queries()


@pytest.fixture(scope="module")
def spark():
    from imp_core.spark import get_spark

    # Java 17+ is required (make test checks it): a missing runtime fails, never skips
    return get_spark()


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    return workload_stores(tmp_path_factory.mktemp("bootstrap"))


def assert_same_state(a, b, what: str, minmax_buffer: int | None = None) -> None:
    ca = canonical_state(a.pipeline, minmax_buffer=minmax_buffer)
    cb = canonical_state(b.pipeline, minmax_buffer=minmax_buffer)
    assert ca == cb, f"{what}: {first_difference(ca, cb)}"


def assert_first_outputs_agree(spark, store, reg, options=None) -> int:
    """Every aggregation's first output from Spark's totals (``output_from_groups``, as a
    probed aggregation is bootstrapped) equals the output of the state built from them;
    returns the number of aggregations compared."""
    pipeline = IncrementalQuery(reg.plan, reg.partitions, options or EngineOptions())
    b = _Bootstrap(spark, store, pipeline, reg.versions)
    b._make_views()
    pending, seen = [b.scratch.root], 0
    while pending:
        w = pending.pop()
        pending.extend(w.children)
        if isinstance(w.op, AggregateOp):
            totals = b._aggregate_totals(w.op, w.children[0].node)
            got = w.op.output_from_groups(totals)
            want = _output_from_state(w.op, w.op.state_from_groups(totals))
            assert got.schema == want.schema, f"{reg.name} {w.op.op_id}"
            assert got.to_counter() == want.to_counter(), f"{reg.name} {w.op.op_id}"
            seen += 1
    return seen


def _mixed_batch(store, table, rng, n, salt):
    """``n`` deletions of stored rows plus ``n`` insertions (copies of stored rows under
    fresh keys, or for lineitem the deleted lines with permuted values)."""
    data = store.read(table)
    dels = data.take(pa.array(rng.choice(data.num_rows, size=n, replace=False)))
    if table == "lineitem":
        perm = pa.array(rng.permutation(n))
        ins = dels
        for col in ("l_quantity", "l_shipdate", "l_returnflag", "l_discount"):
            i = ins.schema.get_field_index(col)
            ins = ins.set_column(i, ins.schema.field(col), dels.column(col).take(perm))
    else:
        ins = data.take(pa.array(rng.integers(0, data.num_rows, size=n), type=pa.int64()))
        key = TABLES[table].key
        if key:
            i = ins.schema.get_field_index(key[-1])
            field = ins.schema.field(key[-1])
            ins = ins.set_column(i, field, pa.array(np.arange(salt, salt + n)).cast(field.type))
    store.apply(table, inserts=ins, deletes=dels)


@pytest.mark.parametrize("wq", QUERIES, ids=[q.name for q in QUERIES])
def test_spark_bootstrap_equals_engine_state(spark, stores, wq):
    store = stores["tpch" if wq.suite == "tpch" else "synthetic"]
    parts = {f"{t}.{c}": 8 for t, c in wq.sketch}
    on_spark = Maintainer(store, spark=spark)  # "auto": works with Spark, so Spark
    in_engine = Maintainer(store, bootstrap="engine")
    a = on_spark.register(wq.name, wq.sql, parts)
    b = in_engine.register(wq.name, wq.sql, parts)
    assert (a.bootstrap, b.bootstrap) == ("spark", "engine")
    assert a.bootstrap_run.spark_queries > 0
    assert_same_state(a, b, f"{wq.name} bootstrap")
    if any(op.kind == "join" for op in a.pipeline.operators):
        # operators over in-memory joins were stepped on the driver: compute them with
        # Spark SQL as well (the joins run again in Spark)
        fresh = IncrementalQuery(a.plan, a.partitions)
        tables, run = bootstrap_tables(spark, store, fresh, a.versions, joins_in_spark=True)
        assert "spark" in run.sources.values()
        got, want = canonical_state(fresh, tables), canonical_state(b.pipeline)
        assert got == want, f"{wq.name} joins in Spark: {first_difference(got, want)}"
    ref = reference_capture(a.plan, {t: store.read(t, v) for t, v in a.versions.items()},
                            a.partitions)
    assert a.sketch == ref.sketch
    assert a.pipeline.result().to_counter() == ref.bag.items
    assert assert_first_outputs_agree(spark, store, a) >= sum(
        op.kind == "aggregate" for op in a.pipeline.operators)
    rng = np.random.default_rng(100 + QUERIES.index(wq))
    table = wq.sketch[0][0]
    for step in range(2):
        _mixed_batch(store, table, rng, 6, 60_000_000 + 1000 * QUERIES.index(wq) + 100 * step)
        on_spark.maintain(wq.name), in_engine.maintain(wq.name)
        assert a.sketch == on_spark.reference_sketch(wq.name), f"{wq.name} step {step}"
        assert_same_state(a, b, f"{wq.name} step {step}")


# -- bounded buffers ------------------------------------------------------------------------
BOUNDED = {
    # min/max over a table read directly: the buffer holds the 2 best values per group
    "minmax": ("SELECT a, min(b) AS mb, max(f) AS mf, count(*) AS c FROM t50g GROUP BY a",
               "t50g.id"),
    # top-k over selected rows: entries cut at the buffer in the total order (Spark's ORDER BY)
    "topk": ("SELECT id, a, b FROM t50g WHERE b < 800 ORDER BY b DESC, a LIMIT 4", "t50g.id"),
    # top-k over a bounded max: the top-k is stepped on the driver over the rebuilt output
    "topk_of_max": ("SELECT a, max(b) AS mb FROM t50g GROUP BY a ORDER BY mb DESC LIMIT 3",
                    "t50g.a"),
}


@pytest.mark.parametrize("name", list(BOUNDED))
def test_bounded_buffers(spark, tmp_path, name):
    sql, attr = BOUNDED[name]
    store = DeltaStore(tmp_path)
    info = TABLES["t50g"]
    store.create_table("t50g", synthetic_tables()["t50g"], key=info.key, domains=info.domains)
    options = EngineOptions(minmax_buffer=2, topk_buffer=6)
    on_spark = Maintainer(store, options=options, spark=spark, bootstrap="spark")
    in_engine = Maintainer(store, options=options)
    a = on_spark.register(name, sql, {attr: 6}, force=True)
    b = in_engine.register(name, sql, {attr: 6}, force=True)
    assert b.bootstrap == "engine"
    assert_same_state(a, b, f"{name} bootstrap", minmax_buffer=2)
    aggregations = 0 if name == "topk" else 1
    assert assert_first_outputs_agree(spark, store, a, options) == aggregations
    for op in a.pipeline.operators:  # the buffers are full and marked incomplete
        if op.kind == "topk":
            assert len(op.entries) == 6 and not op.complete
        if op.kind == "aggregate" and any(m is not None for m in op.minmax):
            mm = next(m for m in op.minmax if m is not None)
            assert mm.sets and all(len(s) <= 2 for s in mm.sets.values())
            assert not all(mm.complete.values())
    # delete the rows holding the current extremes, so that buffers run dry and refill
    rng = np.random.default_rng(7)
    for step in range(3):
        data = store.read("t50g")
        dels = data.take(pa.array(_extreme_rows(data, rng)))
        ins = data.take(pa.array(rng.integers(0, data.num_rows, 5), type=pa.int64()))
        ins = ins.set_column(0, ins.schema.field("id"),
                             pa.array(np.arange(5) + 90_000_000 + 10 * step))
        store.apply("t50g", inserts=ins, deletes=dels)
        on_spark.maintain(name), in_engine.maintain(name)
        ref = reference_capture(a.plan, {"t50g": store.read("t50g")}, a.partitions)
        assert a.sketch == ref.sketch == b.sketch, f"{name} step {step}"
        # (the states may now differ and both be right: a buffer that admitted extra
        # values can outlive deletions that empty and refill another)
        assert a.pipeline.result().to_counter() == ref.bag.items, f"{name} step {step}"
        assert b.pipeline.result().to_counter() == ref.bag.items, f"{name} step {step}"
    refills = sum(getattr(op, "refills", 0) for op in a.pipeline.operators)
    assert refills > 0, "the deletions should have emptied a buffer"


def _extreme_rows(data: pa.Table, rng) -> np.ndarray:
    """Row numbers of the rows holding, in 12 random groups of ``a``, the 2 smallest and
    the 2 largest ``b`` and the 2 largest ``f``, and the 30 largest ``b`` under 800."""
    a, b, f = (data.column(c).to_numpy() for c in ("a", "b", "f"))
    rows = set()
    for g in rng.choice(np.unique(a), 12, replace=False):
        idx = np.flatnonzero(a == g)
        for col, take in ((b, slice(0, 2)), (b, slice(-2, None)), (f, slice(-2, None))):
            chosen = np.unique(col[idx])[take]
            rows.update(idx[np.isin(col[idx], chosen)].tolist())
    low = np.flatnonzero(b < 800)
    rows.update(low[np.argsort(-b[low])][:30].tolist())
    return np.array(sorted(rows), dtype=np.int64)


# -- edge values --------------------------------------------------------------------------------
TINY = 2.0 ** -1074
EDGE = pa.table({
    "k": pa.array([None, 1, 1, 2, 3, 5, 8, 8, 13, None, 21, 34, 55, 89], pa.int64()),
    "g": pa.array([1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 5, 5, None, None], pa.int32()),
    "s": pa.array(["x", "x", "it's", None, "a\\b", "x", "y", "y", "z", "x", "it's", "q", "é",
                   None]),
    "d": pa.array([Decimal(v) if v is not None else None for v in
                   ["1.10", "2.25", "-3.50", "4.00", None, "6.05", "7.10", "8.80", "9.99",
                    "0.01", "-1.00", "2.50", "99999999.99", "-0.01"]], pa.decimal128(10, 2)),
    "dt": pa.array([dt.date(2020, 1, 1) + dt.timedelta(days=37 * i) for i in range(14)],
                   pa.date32()),
    # doubles across the whole exponent range: sub-normals, huge, negative zero, 0.1
    "x": pa.array([1.5, 0.1, None, -0.0, -4.25, TINY, 3 * TINY, 1e307, -1e307, 7.0, 2.0,
                   1e-300, 0.2, 5e15 + 1]),
    "y": pa.array([0.0, 1.0, 2.0, 0.0, 3.0, None, 2.0, 4.0, 0.0, 1.0, 2.0, 3.0, 1.0, 2.0]),
    "ok": pa.array([True, False, True, None, True, True, False, False, True, True, None, True,
                    False, True]),
})
OTHER = pa.table({
    "id": pa.array([1, 2, 3, 5, 8, 13, 21, None], pa.int64()),
    "w": pa.array([10, 20, 30, 40, 50, 60, 70, 80], pa.int64()),
})
EDGE_QUERIES = {
    "float_sums": "SELECT g, sum(x) AS sx, avg(x) AS ax, avg(y) AS ay, count(x) AS cx "
                  "FROM edge GROUP BY g",
    "global": "SELECT sum(d) AS sd, avg(d) AS ad, min(s) AS ms, max(dt) AS md, "
              "count(k) AS ck, sum(x) AS sx FROM edge",
    "empty_global": "SELECT sum(d) AS sd, count(*) AS c FROM edge WHERE g > 100",
    "distinct": "SELECT DISTINCT s, g FROM edge",
    "minmax_strings": "SELECT g, min(s) AS lo, max(s) AS hi, min(d) AS md FROM edge GROUP BY g",
    "topk_ties": "SELECT s, g FROM edge ORDER BY s LIMIT 3",
    "topk_nulls": "SELECT g, d FROM edge ORDER BY d ASC NULLS LAST, g DESC LIMIT 5",
    "self_join": "SELECT e1.g, count(*) AS c, sum(e2.x) AS sx FROM edge e1 JOIN edge e2 "
                 "ON e1.k = e2.k GROUP BY e1.g",
    "two_tables": "SELECT g, sum(w) AS sw FROM edge JOIN other ON k = id "
                  "WHERE dt < DATE '2021-01-01' OR w > 40 GROUP BY g ORDER BY sw DESC LIMIT 2",
    "having_over_join": "SELECT g, avg(x) AS ax FROM edge JOIN other ON k = id GROUP BY g "
                        "HAVING avg(x) > 0",
    # exact Σx² on Spark: doubles over the whole exponent range (buckets), a decimal, an
    # integer shared with count(k), and sum(x) sharing Σx with var_samp(x)
    "statistics": "SELECT g, sum(x) AS sx, var_samp(x) AS vx, stddev_pop(d) AS sd, "
                  "count(k) AS ck, var_pop(k) AS vk, stddev_samp(y) AS sy, "
                  "variance(w) AS vw FROM edge JOIN other ON k = id GROUP BY g",
    "global_statistics": "SELECT var_pop(x) AS vx, stddev_samp(d) AS sd, var_samp(k) AS vk "
                         "FROM edge",
}


@pytest.fixture(scope="module")
def edge_store(tmp_path_factory):
    store = DeltaStore(tmp_path_factory.mktemp("bootstrap-edge"))
    store.create_table("edge", EDGE)  # keyless: a hidden row id keeps the bag semantics
    store.create_table("other", OTHER)
    return store


@pytest.mark.parametrize("attr", ["s", "x"])
def test_edge_values(spark, edge_store, attr):
    on_spark = Maintainer(edge_store, spark=spark, bootstrap="spark")
    in_engine = Maintainer(edge_store)
    compared = 0
    for name, sql in EDGE_QUERIES.items():
        parts = {f"edge.{attr}": 4}
        if name in ("two_tables", "having_over_join", "statistics"):
            parts["other.id"] = 3
        a = on_spark.register(name, sql, parts, force=True)
        b = in_engine.register(name, sql, parts, force=True)
        assert_same_state(a, b, f"{name} on {attr}")
        compared += assert_first_outputs_agree(spark, edge_store, a)
        ref = reference_capture(a.plan, {t: edge_store.read(t) for t in a.versions},
                                a.partitions)
        assert a.sketch == ref.sketch, f"{name} on {attr}"
    assert compared >= 9  # every query but the two top-k ones aggregates


def test_non_finite_doubles_are_refused_like_the_engine(spark, tmp_path):
    store = DeltaStore(tmp_path)
    store.create_table("edge", EDGE.slice(0, 4).set_column(
        EDGE.schema.get_field_index("x"), "x", pa.array([1.0, float("inf"), 2.0, None])))
    sql = "SELECT g, sum(x) AS sx FROM edge GROUP BY g"
    with pytest.raises(ValueError, match="NaN or infinite"):
        Maintainer(store).register("e", sql, {"edge.k": 2}, force=True)
    with pytest.raises(ValueError, match="NaN or infinite"):
        Maintainer(store, spark=spark).register("s", sql, {"edge.k": 2}, force=True)


def test_sums_past_bigint_are_retried_wide_and_stay_exact(spark, tmp_path, monkeypatch):
    """Per-fragment sums run as BIGINT; one that overflows makes the query run again with
    DECIMAL(38) sums, and the state equals the engine's exact one."""
    store = DeltaStore(tmp_path)
    big = 2 ** 62
    store.create_table("big", pa.table({
        "k": pa.array([1, 2, 3, 4, 5, 6], pa.int64()),
        "g": pa.array([1, 1, 1, 2, 2, 2], pa.int32()),
        # big + big passes BIGINT on the way (Spark adds in row order); the sum is big
        "v": pa.array([big, big, -big, -5, 7, 11], pa.int64()),
        "d": pa.array([Decimal("9999999999999999.99")] * 6, pa.decimal128(18, 2))}))
    collected: list[str] = []
    plain = _Bootstrap._collect

    def collect(self, sql, what):
        collected.append(sql)
        return plain(self, sql, what)

    monkeypatch.setattr(_Bootstrap, "_collect", collect)
    sql = "SELECT g, sum(v) AS sv, avg(v) AS av, sum(d) AS sd FROM big GROUP BY g"
    a = Maintainer(store, spark=spark, bootstrap="spark").register("a", sql, {"big.k": 1})
    b = Maintainer(store).register("b", sql, {"big.k": 1})
    assert_same_state(a, b, "sums past BIGINT")
    assert len(collected) == 2 and "DECIMAL(38,0)))" in collected[1]
    rows = {r["g"]: r for r in a.pipeline.result().data.to_pylist()}
    assert rows[1]["sv"] == big and rows[2]["sv"] == 13
    assert rows[1]["sd"] == Decimal("29999999999999999.97")


# -- loading state ------------------------------------------------------------------------------
def test_load_state_round_trip_and_refusal(spark, stores):
    store = stores["synthetic"]
    wq = next(q for q in QUERIES if q.name == "q_join")
    m = Maintainer(store, spark=spark)
    q = m.register("j", wq.sql, {"t5000g.a": 8})
    before = canonical_state(q.pipeline)
    # the snapshot of Spark-bootstrapped state restores into a fresh pipeline
    fresh = IncrementalQuery(q.plan, q.partitions)
    fresh.restore(q.pipeline.snapshot())
    assert canonical_state(fresh) == before
    # tables that do not fit are refused and change nothing
    tables = q.pipeline.state_tables()
    aggs = [op.op_id for op in q.pipeline.operators if isinstance(op, AggregateOp)]
    broken = {k: v for k, v in tables.items()
              if k not in {state_key(a, AggregateOp.GROUPS.name) for a in aggs}}
    with pytest.raises(SnapshotError):
        q.pipeline.load_state(broken)
    with pytest.raises(SnapshotError):
        q.pipeline.load_state({**tables, state_key(IncrementalQuery.MERGE,
                                                   MergeOp.COUNTS.name): pa.table(
            {"count": [1, 2]})})
    assert canonical_state(q.pipeline) == before
    with pytest.raises(BootstrapModeError):
        m.register("x", wq.sql, {"t5000g.a": 8}, bootstrap="gpu")
    with pytest.raises(BootstrapModeError):
        Maintainer(store, bootstrap="sometimes")


def test_auto_mode_without_spark_uses_the_engine(stores):
    """A maintainer that does not work with Spark never starts it for a bootstrap."""
    m = Maintainer(stores["synthetic"])
    assert not m.uses_spark()
    wq = next(q for q in QUERIES if q.name == "q_having_2")
    q = m.register("h", wq.sql, {"t5000g.a": 4})
    assert q.bootstrap == "engine" and q.bootstrap_run is None
