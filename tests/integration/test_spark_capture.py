"""Spark translation of plans: capture == reference sketch, plain/use rows == reference rows.

One local Spark session for the module. Tiny data (tests/support/workload_data.py): the synthetic
and crimes tables at 3000 rows and TPC-H SF 0.01 cut to 400 orders, registered from Arrow;
Parquet files only where rows read are measured.
"""

from __future__ import annotations

import datetime as dt
import math
from collections import Counter
from decimal import Decimal

import pyarrow as pa
import pytest
from workload_data import synthetic_tables, tpch_tables

from imp_core.oracle.reference import reference_capture, reference_evaluate, restrict_to_sketch
from imp_core.plan.nodes import PlanNode, QueryPlan
from imp_core.sketch.partition import PartitionSet, RangePartition
from imp_core.sketch.sketch import Sketch
from imp_core.sql import plan_sql
from imp_core.workloads.queries import list_queries, load_query

pytestmark = pytest.mark.spark

# the paper's workloads and the 22 TPC-H queries as written (subqueries, outer joins)
QUERIES = list_queries() + list_queries("tpch22")


@pytest.fixture(scope="module")
def spark():
    from imp_core.spark import SparkConfig, get_spark

    # Java 17+ is required (make test checks it): a missing runtime fails, never skips
    yield get_spark(SparkConfig(master="local[2]", driver_memory="2g"))
    # the session is cached per process; other Spark test modules may reuse it


@pytest.fixture(scope="module")
def tables(spark) -> dict[str, pa.Table]:
    from imp_core.spark import register_tables

    data = {**synthetic_tables(), **tpch_tables()}
    register_tables(spark, data)
    return data


def _catalog(tables):
    return {n: t.schema for n, t in tables.items()}


def _partitions(tables, attrs, fragments: int) -> PartitionSet:
    return PartitionSet(tuple(RangePartition.equi_depth(t, c, tables[t][c], fragments)
                              for t, c in attrs))


# -- comparing rows: decimals and everything else exactly, doubles almost --------------------
def _key(row: tuple) -> tuple:
    out = []
    for v in row:
        if isinstance(v, float):
            v = 0.0 if math.isnan(v) else float(f"{v:.6g}")
        out.append((v is None, type(v).__name__, 0 if v is None else v))
    return tuple(out)


def _same_value(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        if a is None or b is None:
            return a is b
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    return a == b


def assert_same_bag(got: Counter, want: Counter, what: str) -> None:
    got_rows = sorted(got.elements(), key=_key)
    want_rows = sorted(want.elements(), key=_key)
    assert len(got_rows) == len(want_rows), f"{what}: {len(got_rows)} rows, want {len(want_rows)}"
    for g, w in zip(got_rows, want_rows):
        assert len(g) == len(w) and all(_same_value(x, y) for x, y in zip(g, w)), \
            f"{what}: row {g} != {w}"


def _rows(table: pa.Table) -> Counter:
    return Counter(zip(*[c.to_pylist() for c in table.columns])) if table.num_rows else Counter()


def _annotated_rows(table: pa.Table) -> Counter:
    from imp_core.spark.compile import ANNOTATION_COLUMN

    data = table.drop_columns([ANNOTATION_COLUMN])
    anns = [tuple(a) for a in table.column(ANNOTATION_COLUMN).to_pylist()]
    rows = zip(*[c.to_pylist() for c in data.columns]) if data.num_columns else []
    return Counter(r + (a,) for r, a in zip(rows, anns))


def _reference_annotated(ref) -> Counter:
    return Counter({r + (a,): m for (r, a), m in ref.bag.items.items()})


def check_plan(spark, plan: QueryPlan | PlanNode, tables, partitions: PartitionSet,
               what: str, modes=("view",), bag: str | None = None):
    """capture == reference sketch (each fragment-id mode in ``modes``); with ``bag`` (a
    mode) also every result row's annotation == the reference's annotated bag."""
    from imp_core.spark import annotated_result, capture

    ref = reference_capture(plan, tables, partitions)
    for mode in modes:
        got = capture(spark, plan, partitions, fragment_ids=mode)
        assert got == ref.sketch, f"{what} [{mode}]: Spark {got} != reference {ref.sketch}"
    if bag:
        ann = annotated_result(spark, plan, partitions, fragment_ids=bag)
        assert_same_bag(_annotated_rows(ann), _reference_annotated(ref),
                        f"{what} annotated [{bag}]")
    return ref


# -- every workload query ----------------------------------------------------------------------
@pytest.mark.parametrize("wq", QUERIES, ids=[q.name for q in QUERIES])
def test_workload_query_on_spark(spark, tables, wq):
    from imp_core.spark import run_query

    plan = plan_sql(wq.sql, _catalog(tables))
    ref = None
    for fragments, modes, bag in ((4, ("case",), "view"), (64, ("view",), None)):
        parts = _partitions(tables, wq.sketch, fragments)
        ref = check_plan(spark, plan, tables, parts, f"{wq.name} @{fragments}", modes, bag)
    plain = run_query(spark, plan, measure=False)
    assert plain.rows.column_names == list(plan.root.column_names)
    assert_same_bag(_rows(plain.rows), ref.rows(), f"{wq.name} plain")
    used = run_query(spark, plan, ref.sketch, measure=False)
    assert_same_bag(_rows(used.rows), _rows(plain.rows), f"{wq.name} with sketch")


def test_many_fragments_binary_search_and_case_tree(spark, tables):
    """Over a thousand split points by JVM binary search, hundreds by the CASE tree."""
    wq = load_query("q_having_1")
    plan = plan_sql(wq.sql, _catalog(tables))
    parts = _partitions(tables, wq.sketch, 1500)
    assert parts.partitions[0].size > 1000
    check_plan(spark, plan, tables, parts, "q_having_1 @1500", modes=("view",))
    parts = _partitions(tables, wq.sketch, 300)
    check_plan(spark, plan, tables, parts, "q_having_1 @300", modes=("case",))


@pytest.mark.parametrize("bounds", [1, 63, 64, 65, 100, 999, 1500])
@pytest.mark.parametrize("kind", ["int", "string", "date", "decimal"])
def test_fragment_id_column_equals_engine_annotation(spark, bounds, kind):
    """Spark's fragment ids (one-level and two-level search) = the engine's, for values
    below, on, between and above the split points, and NULLs."""
    import random

    from imp_core.spark.run import fragment_id_column

    rng = random.Random(bounds * 7 + len(kind))
    ints = sorted(rng.sample(range(-10_000, 10_000), bounds))
    values = ints + [b + 1 for b in ints] + [b - 1 for b in ints] + \
        [rng.randrange(-11_000, 11_000) for _ in range(500)]
    make = {"int": (pa.int64(), lambda v: v),
            "string": (pa.string(), lambda v: f"{v + 20_000:06d}"),
            "date": (pa.date32(), lambda v: dt.date(2000, 1, 1) + dt.timedelta(days=v)),
            "decimal": (pa.decimal128(12, 2), lambda v: Decimal(v) / 4)}[kind]
    dtype, conv = make
    part = RangePartition.from_bounds("t", "v", dtype, [conv(b) for b in ints])
    col = pa.array([conv(v) for v in values] + [None], dtype)
    df = spark.createDataFrame(pa.table({"i": pa.array(range(len(col)), pa.int64()), "v": col}))
    got = df.select("i", fragment_id_column(part, 5).alias("f")).toArrow().sort_by("i")
    assert got.column("f").to_pylist() == (part.annotate(col) + 5).tolist()


# -- operators and values the workloads do not reach --------------------------------------------
EDGE = pa.table({
    "k": pa.array([None, 1, 1, 2, 3, 5, 8, 8, 13, None, 21, 34], pa.int64()),
    "g": pa.array([1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 5, 5], pa.int32()),
    "s": pa.array(["x", "x", "it's", None, "a\\b", "x", "y", "y", "z", "x", "it's", "q"]),
    "d": pa.array([Decimal(v) if v is not None else None for v in
                   ["1.10", "2.25", "-3.50", "4.00", None, "6.05", "7.10", "8.80", "9.99",
                    "0.01", "-1.00", "2.50"]], pa.decimal128(10, 2)),
    "dt": pa.array([dt.date(2020, 1, 1) + dt.timedelta(days=37 * i) for i in range(12)],
                   pa.date32()),
    "x": pa.array([1.5, 2.0, None, 0.0, -4.25, 3.0, 3.0, 1e10, 0.5, 7.0, 2.0, 1.0]),
    "y": pa.array([0.0, 1.0, 2.0, 0.0, 3.0, None, 2.0, 4.0, 0.0, 1.0, 2.0, 3.0]),
})
OTHER = pa.table({
    "id": pa.array([1, 2, 3, 5, 8, 13, 21, None], pa.int64()),
    "w": pa.array([10, 20, 30, 40, 50, 60, 70, 80], pa.int64()),
})

EDGE_QUERIES = {
    # top-k whose cut falls inside equal rows from different fragments: the annotation decides
    "topk_ties": "SELECT s FROM edge ORDER BY s LIMIT 3",
    "topk_desc_nulls": "SELECT k, s FROM edge ORDER BY k DESC LIMIT 4",
    "topk_nulls_last": "SELECT g, d FROM edge ORDER BY d ASC NULLS LAST, g DESC LIMIT 5",
    "distinct": "SELECT DISTINCT s, g FROM edge",
    "empty_global_agg": "SELECT sum(d) AS sd, count(*) AS c FROM edge WHERE g > 100",
    "global_agg": "SELECT sum(d) AS sd, avg(d) AS ad, min(s) AS ms, count(k) AS ck FROM edge",
    "div_by_zero": "SELECT k, x / y AS r, d / 4 AS q FROM edge",
    "case_in_like": "SELECT g, sum(CASE WHEN s LIKE 'a%' OR s IN ('y', 'q') THEN d ELSE 0 END) "
                    "AS sd FROM edge WHERE s NOT LIKE '%\\'s' GROUP BY g HAVING count(*) > 1",
    "self_join": "SELECT e1.g, count(*) AS c FROM edge e1 JOIN edge e2 ON e1.k = e2.k "
                 "GROUP BY e1.g",
    "two_tables": "SELECT g, sum(w) AS sw FROM edge JOIN other ON k = id "
                  "WHERE dt < DATE '2021-01-01' OR w > 40 GROUP BY g ORDER BY sw DESC LIMIT 2",
    "having_avg_double": "SELECT g, avg(x) AS ax FROM edge GROUP BY g HAVING avg(x) > 1.7",
}


@pytest.fixture(scope="module")
def edge_tables(spark):
    from imp_core.spark import register_tables

    data = {"edge": EDGE, "other": OTHER}
    register_tables(spark, data)
    return data


@pytest.mark.parametrize("attr", ["k", "s", "d", "dt"])
def test_edge_queries_on_spark(spark, edge_tables, attr):
    from imp_core.spark import run_query

    catalog = _catalog(edge_tables)
    for name, sql in EDGE_QUERIES.items():
        plan = plan_sql(sql, catalog)
        parts = [RangePartition.equi_depth("edge", attr, EDGE[attr], 4)]
        if name == "two_tables":
            parts.append(RangePartition.equi_depth("other", "id", OTHER["id"], 3))
        pset = PartitionSet(tuple(parts))
        ref = check_plan(spark, plan, edge_tables, pset, f"{name} on {attr}",
                         modes=("view",), bag="case")
        plain = run_query(spark, plan, measure=False)
        assert_same_bag(_rows(plain.rows), ref.rows(), f"{name} plain")
        # the use query reads D_P; for these (not always safe) queries compare to Q(D_P)
        restricted = restrict_to_sketch(edge_tables, ref.sketch)
        want = Counter()
        for (row, _), m in reference_evaluate(plan.root, restricted, pset).items.items():
            want[row] += m
        used = run_query(spark, plan, ref.sketch, measure=False)
        assert_same_bag(_rows(used.rows), want, f"{name} with sketch")


def test_sketch_predicate_literals_are_typed():
    from imp_core.spark import sketch_predicate

    part = RangePartition("edge", "s", pa.string(), ("a\\b", "it's", "y"))
    sk = Sketch(PartitionSet((part,)), [0, 2, 3])
    assert sketch_predicate(sk, "edge") == (
        "(((`s` < 'a\\\\b' OR `s` IS NULL)) OR (`s` >= 'it\\'s'))")
    dec = RangePartition("edge", "d", pa.decimal128(10, 2), (Decimal("1.50"), Decimal("7.00")))
    sk = Sketch(PartitionSet((dec,)), [1])
    assert sketch_predicate(sk, "edge") == \
        "`d` >= CAST('1.50' AS DECIMAL(10,2)) AND `d` < CAST('7.00' AS DECIMAL(10,2))"
    assert sketch_predicate(Sketch(PartitionSet((dec,)), []), "edge") == "FALSE"


# -- rows read with and without a sketch, on Parquet clustered on the sketch column ---------------
@pytest.mark.parametrize("name, row_group", [("q_having_2", 100), ("q10", 20)])
def test_sketch_reads_fewer_rows_from_clustered_parquet(spark, tables, tmp_path, name,
                                                        row_group):
    from imp_core.spark import register_tables, run_query, write_parquet

    wq = load_query(name)
    (table, column), = wq.sketch
    uri = write_parquet(tables[table], tmp_path / f"{table}.parquet", row_group_size=row_group,
                        sort_by=column)
    try:
        register_tables(spark, {table: [uri]})
        plan = plan_sql(wq.sql, _catalog(tables))
        parts = _partitions(tables, wq.sketch, 64)
        ref = reference_capture(plan, tables, parts)
        assert 0 < len(ref.sketch.fragments) < 32

        full = run_query(spark, plan)
        used = run_query(spark, plan, ref.sketch)
        assert_same_bag(_rows(used.rows), _rows(full.rows), f"{name} with sketch")
        assert_same_bag(_rows(full.rows), ref.rows(), f"{name} plain")
        # (other filters of the query may already skip row groups by their statistics)
        assert 0 < full.rows_read[table] <= tables[table].num_rows
        assert full.files_read[table] == 1
        assert 0 < used.rows_read[table] < full.rows_read[table] * 0.7, \
            (used.rows_read, full.rows_read)
        # skipping is by row group (or page): what is read is at most the sketch's rows plus
        # a row group at each end of each merged range
        in_sketch = restrict_to_sketch({table: tables[table]}, ref.sketch)[table].num_rows
        ranges = len(ref.sketch.ranges(table))
        assert used.rows_read[table] <= in_sketch + 2 * row_group * ranges
        print(f"{name}: read {used.rows_read[table]} of {full.rows_read[table]} rows "
              f"({in_sketch} in the sketch's {ranges} ranges)")
    finally:
        register_tables(spark, {table: tables[table]})


# -- session configuration (no Spark needed) ---------------------------------------------------
def test_missing_java_is_a_clear_error(monkeypatch):
    from imp_core.errors import SparkUnavailableError
    from imp_core.spark.session import _check_java

    monkeypatch.setenv("JAVA_HOME", "/nonexistent-java-home")
    with pytest.raises(SparkUnavailableError, match="Java 17"):
        _check_java()


def test_config_from_environment(monkeypatch):
    from imp_core.spark import SparkConfig

    monkeypatch.setenv("IMP_SPARK_MASTER", "spark://head:7077")
    monkeypatch.delenv("IMP_SPARK_CONNECT", raising=False)
    cfg = SparkConfig.from_env()
    assert cfg.master == "spark://head:7077" and not cfg.is_connect and not cfg.is_local
    conf = cfg.conf()
    assert conf["spark.sql.session.timeZone"] == "UTC"
    assert conf["spark.sql.execution.arrow.pyspark.enabled"] == "true"
    assert conf["spark.ui.enabled"] == "false"
    monkeypatch.setenv("IMP_SPARK_CONNECT", "sc://localhost:15002")
    cfg = SparkConfig.from_env()
    assert cfg.is_connect and "spark.ui.enabled" not in cfg.conf()
