"""Set operations on Spark: the user's SQL text run by Spark, the compiled SQL, the
annotated capture and the state bootstrap.

(a) For each SQL text with UNION [ALL], INTERSECT [ALL], EXCEPT [ALL] (nested, with ORDER
    BY ... LIMIT, widened types, as a derived table), registered in the embedded Engine
    and maintained through update batches (among them batches that copy rows of one
    table into the other and delete them again), after every batch: Spark's rows for the
    same text equal the maintained result, and so do the rows of the compiled plain SQL;
    the annotated capture on Spark gives the reference's rows with their fragments and
    the capture query the maintained sketch; where the sketch is safe, the query over
    the sketch's fragments returns the same rows.
(b) The state bootstrapped on Spark equals the state of a pipeline fed the same tables
    from empty, and both stay exact through random batches.
(c) Queries registered through the service's coordinator (no ``force``: their sketches
    are safe) keep sketches equal to Spark's recaptures through updates of both tables.
"""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pytest
from diff_harness import RandChooser, World, col, gen_row, qplan, scan, to_arrow
from state_canon import canonical_state, first_difference

from imp_core.embedded.api import Engine
from imp_core.engine.pipeline import IncrementalQuery
from imp_core.oracle.reference import reference_capture
from imp_core.oracle.results import same_rows
from imp_core.plan.nodes import (
    AggCall,
    Aggregate,
    NamedExpr,
    PlanNode,
    Project,
    SetOp,
    SortKey,
    TopK,
)
from imp_core.safety import check_attribute
from imp_core.sketch.partition import PartitionSet, RangePartition
from imp_core.spark import annotated_result, capture, plain_sql, use_sql
from imp_core.spark.bootstrap import bootstrap
from imp_core.spark.compile import ANNOTATION_COLUMN
from imp_core.storage import DeltaStore

pytestmark = [pytest.mark.spark, pytest.mark.integration]

RS = "SELECT b, c FROM r {op} SELECT d, e FROM s"
CASES = {
    "union_all": RS.format(op="UNION ALL"),
    "union": RS.format(op="UNION"),
    "intersect": RS.format(op="INTERSECT"),
    "intersect_all": RS.format(op="INTERSECT ALL"),
    "except": RS.format(op="EXCEPT"),
    "except_all": RS.format(op="EXCEPT ALL"),
    "minus_reversed": "SELECT d, e FROM s MINUS SELECT b, c FROM r WHERE a > 2",
    "self_except_all": "SELECT a, b FROM r EXCEPT ALL SELECT a, c FROM r WHERE c > 1",
    "nested": "(SELECT b FROM r UNION ALL SELECT d FROM s) INTERSECT ALL "
              "(SELECT e FROM s UNION ALL SELECT c FROM r)",
    "precedence": "SELECT b FROM r UNION SELECT d FROM s INTERSECT SELECT e FROM s",
    "top_k": "SELECT b, c FROM r UNION ALL SELECT d, e FROM s ORDER BY b DESC, c LIMIT 4",
    "derived": "SELECT x, count(*) AS n FROM (SELECT b AS x FROM r EXCEPT ALL "
               "SELECT d FROM s) u GROUP BY x",
    "widened": "SELECT CAST(b AS INT) AS b, m FROM r UNION SELECT d, CAST(e AS DECIMAL(30, 4)) "
               "FROM s",
}


def _tables(seed: int) -> dict[str, pa.Table]:
    ch = RandChooser(seed)
    r = [gen_row("r", ch) for _ in range(12)]
    s = [gen_row("s", ch) for _ in range(8)] + [(r[0][0] + 20, r[0][1], r[0][2])]
    return {"r": to_arrow("r", r + [r[1], r[1]]), "s": to_arrow("s", s)}


def _spark_rows(spark, sql: str) -> pa.Table:
    """``sql`` as written, run by Spark with ANSI mode off."""
    before = spark.conf.get("spark.sql.ansi.enabled")
    spark.conf.set("spark.sql.ansi.enabled", "false")
    try:
        return spark.sql(sql).toArrow()
    finally:
        spark.conf.set("spark.sql.ansi.enabled", before)


def _annotated_rows(table: pa.Table) -> Counter:
    data = table.drop_columns([ANNOTATION_COLUMN])
    anns = [tuple(a) for a in table.column(ANNOTATION_COLUMN).to_pylist()]
    rows = zip(*[c.to_pylist() for c in data.columns])
    return Counter(r + (a,) for r, a in zip(rows, anns))


def _check(spark, eng: Engine, q, sql: str, name: str, safe: bool) -> None:
    from imp_core.spark import register_tables

    register_tables(spark, eng.tables())
    got = q.result()
    want = _spark_rows(spark, sql)
    assert [f.type for f in got.schema] == [f.type for f in want.schema], name
    assert same_rows(got, want), f"{name}: engine {got.to_pylist()} spark {want.to_pylist()}"
    compiled = _spark_rows(spark, plain_sql(q.plan))
    assert same_rows(compiled.rename_columns(got.column_names), got), f"{name}: plain SQL"
    ref = reference_capture(q.plan, eng.tables(), q.partitions)
    assert ref.sketch == q.sketch, name
    annotated = _annotated_rows(annotated_result(spark, q.plan, q.partitions, "case"))
    expected = Counter({r + (a,): m for (r, a), m in ref.bag.items.items()})
    assert annotated == +expected, f"{name}: annotated rows\n  extra {annotated - expected}" \
                                   f"\n  missing {expected - annotated}"
    assert capture(spark, q.plan, q.partitions, fragment_ids="case") == q.sketch, name
    if safe:
        used = _spark_rows(spark, use_sql(q.plan, q.sketch))
        assert same_rows(used.rename_columns(got.column_names), got), \
            f"{name}: the query over the sketch {q.sketch}"


def _flip(eng: Engine, step: int) -> tuple[str, pa.Table | None, pa.Table | None]:
    """Copy the compared columns of two r rows into s, or delete the s rows equal to
    r rows (alternating)."""
    r, s = eng.table("r"), eng.table("s")
    if step % 2 == 0:
        rows = r.slice(0, 2)
        first = 1000 + 10 * step
        new = pa.table({"c": pa.array([first, first + 1], pa.int64()),
                        "d": rows.column("b"), "e": rows.column("c")})
        return "s", new, None
    values = set(zip(r.column("b").to_pylist(), r.column("c").to_pylist()))
    hit = [i for i, v in enumerate(zip(s.column("d").to_pylist(), s.column("e").to_pylist()))
           if v in values]
    return "s", None, s.take(pa.array(hit, pa.int64())) if hit else None


@pytest.mark.parametrize("name", list(CASES))
def test_set_operations_equal_spark_through_updates(spark, name):
    sql = CASES[name]
    data = _tables(7)
    eng = Engine()
    eng.create_table("r", data["r"])
    eng.create_table("s", data["s"])
    parts = {"r.a": [3, 6], **({"s.c": [4]} if "FROM s" in sql else {})}
    q = eng.register(sql, parts, force=True)
    columns = {t: eng.table(t).column_names for t in ("r", "s")}
    safe = all(check_attribute(q.plan, t, c, table_columns=columns).safe
               for t, c in (("r", "a"), ("s", "c")) if t in q.plan.root.tables())
    _check(spark, eng, q, sql, name, safe)
    ch = RandChooser(31)
    for step in range(4):
        if step % 2:
            table, inserts, deletes = _flip(eng, step)
        else:
            table = ("r", "s")[step // 2 % 2]
            current = eng.table(table)
            inserts = to_arrow(table, [gen_row(table, ch) for _ in range(3)])
            deletes = current.slice(0, 2) if current.num_rows else None
        eng.apply(table, inserts=inserts, deletes=deletes)
        _check(spark, eng, q, sql, f"{name} step {step}", safe)


# -- (b) bootstrap on Spark, then maintenance ---------------------------------------------------
R = ("a", "b", "c")
S = ("c", "d", "e")


def _sides() -> tuple[PlanNode, PlanNode]:
    left = Project(scan("r", R), (NamedExpr("x", col("r.b")), NamedExpr("y", col("r.c"))))
    right = Project(scan("s", S), (NamedExpr("sx", col("s.d")), NamedExpr("sy", col("s.e"))))
    return left, right


def _plain(kind: str, distinct: bool):
    def build() -> PlanNode:
        return SetOp(*_sides(), kind, distinct)
    return build


def _counted() -> PlanNode:
    return Aggregate(SetOp(*_sides(), "intersect", False), ("x",),
                     (AggCall("count_star", None, "n"),))


def _topk_union() -> PlanNode:
    return TopK(SetOp(*_sides(), "union", False), (SortKey("x", True), SortKey("y")), 3)


BOOTSTRAP = {
    "except_all": _plain("except", False),
    "union": _plain("union", True),
    "intersect": _plain("intersect", True),
    "count_over_intersect_all": _counted,
    "topk_over_union_all": _topk_union,
}


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> DeltaStore:
    store = DeltaStore(tmp_path_factory.mktemp("setops"))
    for name, table in _tables(5).items():
        store.create_table(name, table)  # keyless: duplicate rows allowed
    return store


@pytest.mark.parametrize("name", list(BOOTSTRAP))
def test_bootstrap_then_batches_equal_the_engine(spark, store, name):
    plan = qplan(BOOTSTRAP[name]())
    pset = PartitionSet((RangePartition.from_bounds("r", "a", pa.int64(), [3, 6]),
                         RangePartition.from_bounds("s", "c", pa.int64(), [4])))
    tables = _tables(5)
    world = World(plan, pset, ("r", "s"))
    world.apply({t: (list(zip(*[c.to_pylist() for c in tables[t].columns])),
                     [1] * tables[t].num_rows) for t in ("r", "s")})
    on_spark = IncrementalQuery(plan, pset)
    run = bootstrap(spark, store, on_spark, {t: store.version(t) for t in ("r", "s")})
    setops = [o for o in on_spark.operators if o.kind == "set_op"]
    assert all(run.sources[o.op_id] == "engine" for o in setops)
    want = canonical_state(world.pipelines[0])
    got = canonical_state(on_spark)
    assert got == want, f"{name} bootstrap: {first_difference(got, want)}"
    world.pipelines.append(on_spark)
    ch = RandChooser(200 + list(BOOTSTRAP).index(name))
    for step in range(4):
        world.step(ch)  # checks both pipelines against the reference
        got, want = canonical_state(on_spark), canonical_state(world.pipelines[0])
        assert got == want, f"{name} step {step}: {first_difference(got, want)}"


# -- SQL through the service's coordinator ----------------------------------------------------
COORDINATOR_SQL = {  # safe sketches on t5000g.a: the attribute is a compared column
    "union_grouped": "SELECT a, count(*) AS n FROM (SELECT a, b FROM t5000g WHERE b < 3000 "
                     "UNION SELECT ttid, bb FROM tjoinhelp) u GROUP BY a",
    "intersect_all": "SELECT a, c FROM t5000g INTERSECT ALL SELECT ttid, cc FROM tjoinhelp",
    "except_tied": "SELECT a, b FROM t5000g EXCEPT SELECT a, b FROM t5000g WHERE c < 2000",
}


def test_sql_queries_through_the_coordinator_equal_spark_recaptures(spark, tmp_path):
    """Planned from SQL, registered through the coordinator (state bootstrapped by the
    service), maintained through updates of both tables: every fresh sketch equals a
    recapture by Spark at its table versions."""
    import numpy as np
    from runtime_support import assert_spark_exact, make_config, random_batch
    from workload_data import synthetic_tables

    from imp_actors.coordinator import Coordinator
    from imp_actors.types import QuerySpec
    from imp_core.workloads.schemas import TABLES

    store = DeltaStore(tmp_path)
    data = synthetic_tables()
    for name in ("t5000g", "tjoinhelp"):
        store.create_table(name, data[name], key=TABLES[name].key,
                           domains=TABLES[name].domains)
    c = Coordinator(make_config(tmp_path)).start()
    try:
        for name, sql in COORDINATOR_SQL.items():
            c.register(QuerySpec(name, sql, partitions={"t5000g.a": 16}))
            assert_spark_exact(c, name)
        rng = np.random.default_rng(9)
        for step, table in enumerate(("t5000g", "tjoinhelp", "t5000g")):
            ins, dels = random_batch(c.ctx.store, table, rng, 30, 7 * 10**7 + 1000 * step)
            c.apply_update(table, inserts=ins, deletes=dels)
            for name in COORDINATOR_SQL:
                assert_spark_exact(c, name)
    finally:
        c.close()
