"""Semi-, anti- (also NOT IN) and outer joins on Spark.

Small random tables ``r`` and ``s`` of the differential harness (nullable join keys,
duplicate rows; ``s`` always holds a row whose NOT IN key is NULL), partitioned on ``r.a``
and ``s.c``. For every plan:

(a) its plain SQL returns the reference evaluator's rows (and, for the SQL the plan stands
    for, DuckDB's: NOT IN with NULLs and with an empty subquery, EXISTS, NOT EXISTS, LEFT
    and FULL joins);
(b) its annotated capture returns the reference's rows with their fragments (so their
    union is the reference sketch), and the capture query (``capture_sql``, run where the
    result's annotation columns differ in kind: partners' sets, NULL-padded sides) the
    reference sketch;
(c) the state bootstrapped on Spark equals the state of a pipeline fed the same tables
    from empty, and both stay exact (sketch and result against the reference) through
    random batches (for every shape of plan: a keyed join at the root, under an inner
    join, an aggregation, a top-k; NOT IN's facts; a self-join);
(d) where the sketch is safe for the plan, the query over the sketch's fragments returns
    the plain result.

One Spark session for the module (the shared ``spark`` fixture); the tables are views over
Arrow for (a), (b), (d) and a Delta store for (c). Each check runs where it adds coverage,
so that the module takes well under a minute once Spark runs.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Callable

import duckdb
import pyarrow as pa
import pytest
from diff_harness import RandChooser, World, col, gen_row, lit, op, qplan, scan, to_arrow
from state_canon import canonical_state, first_difference

from imp_core.engine.pipeline import IncrementalQuery
from imp_core.oracle.reference import reference_capture, reference_evaluate
from imp_core.plan.expr import BinaryOp, UnaryOp
from imp_core.plan.nodes import (
    AggCall,
    Aggregate,
    Join,
    NamedExpr,
    OuterJoin,
    PlanNode,
    Project,
    QueryPlan,
    Select,
    SemiJoin,
    SortKey,
    TopK,
)
from imp_core.sketch.partition import PartitionSet, RangePartition
from imp_core.spark import annotated_result, capture, plain_sql, use_sql
from imp_core.spark.bootstrap import bootstrap
from imp_core.spark.compile import ANNOTATION_COLUMN
from imp_core.storage import DeltaStore

pytestmark = pytest.mark.spark

R = ("a", "b", "c", "f", "m")
S = ("c", "d", "e")
NULL_KEY_ROW = (5, 1, None)  # an s row with c > 2 and a NULL e: NOT IN's NULL on the right


def _is_not_null(name: str) -> UnaryOp:
    return UnaryOp("is_not_null", col(name))


def _and(*parts) -> BinaryOp:
    out = parts[0]
    for p in parts[1:]:
        out = op("and", out, p)
    return out


@dataclass(frozen=True)
class Case:
    build: Callable[[], PlanNode]
    tables: tuple[str, ...] = ("r", "s")  # the tables the plan reads
    parts: tuple[str, ...] = ("r", "s")  # the partitioned ones (r.a, s.c)
    use: bool = False  # (d): run the query over the sketch (only where the sketch is safe)
    capture: bool = False  # (b): run the capture query too
    bootstrap: bool = False  # (c)


def _semi() -> PlanNode:
    return SemiJoin(scan("r", R), scan("s", S), op("=", col("r.b"), col("s.d")))


def _semi_residual() -> PlanNode:
    cond = _and(op("=", col("s.d"), col("r.b")), op("<>", col("s.e"), col("r.c")))
    return SemiJoin(scan("r", R), scan("s", S), cond)


def _anti_residual() -> PlanNode:
    cond = _and(op("=", col("r.b"), col("s.d")), op("<", col("s.c"), col("r.a")))
    return SemiJoin(scan("r", R), scan("s", S), cond, anti=True)


def _not_in(*where) -> Callable[[], PlanNode]:
    def build() -> PlanNode:
        right = Select(scan("s", S), _and(*where))
        return SemiJoin(scan("r", R), right, op("=", col("r.b"), col("s.e")), anti=True,
                        null_aware=True)
    return build


def _not_in_two_keys() -> PlanNode:
    right = Select(scan("s", S), _and(_is_not_null("s.d"), _is_not_null("s.e")))
    cond = _and(op("=", col("r.b"), col("s.d")), op("=", col("r.c"), col("s.e")))
    return SemiJoin(scan("r", R), right, cond, anti=True, null_aware=True)


def _exists_without_keys() -> PlanNode:
    right = Select(scan("s", S), op(">", col("s.e"), lit(3)))
    return SemiJoin(scan("r", R), right, None)


def _self_semi_anti() -> PlanNode:  # TPC-H q21's shape: one table on all three inputs
    r1, r2, r3 = scan("r", R, alias="r1"), scan("r", R, alias="r2"), scan("r", R, alias="r3")
    exists = SemiJoin(r1, r2, _and(op("=", col("r1.b"), col("r2.b")),
                                   op("<>", col("r2.c"), col("r1.c"))))
    return SemiJoin(exists, r3, _and(op("=", col("r1.b"), col("r3.b")),
                                     op(">", col("r3.a"), col("r1.a"))), anti=True)


def _left_outer() -> PlanNode:
    cond = _and(op("=", col("r.b"), col("s.d")), op(">", col("s.e"), lit(1)))
    return OuterJoin(scan("r", R), scan("s", S), cond, "left")


def _full_outer() -> PlanNode:
    return OuterJoin(scan("r", R), scan("s", S), op("=", col("r.c"), col("s.d")), "full")


def _count_over_left_outer() -> PlanNode:  # TPC-H q13's shape
    pre = Project(_left_outer(), (NamedExpr("a", col("r.a")), NamedExpr("sc", col("s.c"))))
    per_row = Aggregate(pre, ("a",), (AggCall("count", "sc", "n"),))
    return Aggregate(per_row, ("n",), (AggCall("count_star", None, "k"),))


def _sum_over_full_outer() -> PlanNode:  # groups of a padded side's key: NULL included
    return Aggregate(_full_outer(), ("s.d",), (AggCall("count_star", None, "n"),
                                               AggCall("sum", "r.a", "sa"),
                                               AggCall("max", "s.e", "me")))


def _join_over_semi() -> PlanNode:  # an inner join consuming a semi-join's output
    s2 = scan("s", S, alias="s2")
    return Join(_semi_residual(), s2, op("=", col("r.c"), col("s2.d")))


def _topk_over_semi() -> PlanNode:
    return TopK(_semi(), (SortKey("r.a", descending=True),), 3)


# the negated side of an anti-join is no provenance: a sketch filtering it is unsafe, so
# (d) runs only where the sketch is safe for the plan
CASES: dict[str, Case] = {
    "semi": Case(_semi, use=True, capture=True),
    "semi_residual": Case(_semi_residual, bootstrap=True),
    "anti_residual": Case(_anti_residual),
    "not_in_null_on_right": Case(_not_in(op(">", col("s.c"), lit(2))), parts=("r",),
                                 use=True, bootstrap=True),
    "not_in_no_null": Case(_not_in(op(">", col("s.c"), lit(2)), _is_not_null("s.e")),
                           parts=("r",)),
    "not_in_empty_right": Case(_not_in(op(">", col("s.c"), lit(100))), parts=("r",),
                               use=True, bootstrap=True),
    "not_in_two_keys": Case(_not_in_two_keys, parts=("r",)),
    "exists_without_keys": Case(_exists_without_keys),
    "self_semi_anti": Case(_self_semi_anti, tables=("r",), parts=("r",), bootstrap=True),
    "left_outer": Case(_left_outer, use=True, capture=True),
    "full_outer": Case(_full_outer, capture=True, bootstrap=True),
    "count_over_left_outer": Case(_count_over_left_outer, use=True, bootstrap=True),
    "sum_over_full_outer": Case(_sum_over_full_outer),
    "join_over_semi": Case(_join_over_semi, bootstrap=True),
    "topk_over_semi": Case(_topk_over_semi, use=True, bootstrap=True),
}


def _partitions(case: Case) -> PartitionSet:
    cuts = {"r": ("a", [3, 6]), "s": ("c", [2, 5, 8])}
    return PartitionSet(tuple(RangePartition.from_bounds(t, cuts[t][0], pa.int64(), cuts[t][1])
                              for t in case.parts))


def _random_tables(seed: int = 11) -> dict[str, pa.Table]:
    ch = RandChooser(seed)
    r = [gen_row("r", ch) for _ in range(14)]
    r += [r[0], r[3]]  # duplicate rows
    s = [gen_row("s", ch) for _ in range(10)] + [NULL_KEY_ROW, NULL_KEY_ROW]
    return {"r": to_arrow("r", r), "s": to_arrow("s", s)}


@pytest.fixture(scope="module")
def tables(spark) -> dict[str, pa.Table]:
    from imp_core.spark import register_tables

    data = _random_tables()
    register_tables(spark, data)
    return data


def _rows(table: pa.Table) -> Counter:
    return Counter(zip(*[c.to_pylist() for c in table.columns])) if table.num_rows \
        else Counter()


def _reference_rows(plan: QueryPlan, tables, partitions) -> Counter:
    out: Counter = Counter()
    for (row, _), m in reference_evaluate(plan.root, tables, partitions).items.items():
        out[row] += m
    return +out


def _annotated_rows(table: pa.Table) -> Counter:
    data = table.drop_columns([ANNOTATION_COLUMN])
    anns = [tuple(a) for a in table.column(ANNOTATION_COLUMN).to_pylist()]
    rows = zip(*[c.to_pylist() for c in data.columns])
    return Counter(r + (a,) for r, a in zip(rows, anns))


# -- (a) the SQL each plan stands for, on DuckDB ----------------------------------------------
DUCKDB = {
    "not_in_null_on_right": "SELECT * FROM r WHERE b NOT IN (SELECT e FROM s WHERE c > 2)",
    "not_in_no_null": "SELECT * FROM r WHERE b NOT IN "
                      "(SELECT e FROM s WHERE c > 2 AND e IS NOT NULL)",
    "not_in_empty_right": "SELECT * FROM r WHERE b NOT IN (SELECT e FROM s WHERE c > 100)",
    "semi_residual": "SELECT * FROM r WHERE EXISTS "
                     "(SELECT 1 FROM s WHERE s.d = r.b AND s.e <> r.c)",
    "anti_residual": "SELECT * FROM r WHERE NOT EXISTS "
                     "(SELECT 1 FROM s WHERE s.d = r.b AND s.c < r.a)",
    "left_outer": "SELECT * FROM r LEFT JOIN s ON r.b = s.d AND s.e > 1",
    "full_outer": "SELECT * FROM r FULL JOIN s ON r.c = s.d",
}


# -- (a) plain, (b) annotated capture, (d) use ----------------------------------------------
@pytest.fixture(scope="module")
def duck(tables) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    for name, table in tables.items():
        con.register(name, table)
    return con


@pytest.mark.parametrize("name", list(CASES))
def test_plain_capture_and_use_equal_the_reference(spark, tables, duck, name):
    case = CASES[name]
    plan, pset = qplan(CASES[name].build()), _partitions(case)
    ref = reference_capture(plan, tables, pset)
    plain = _rows(spark.sql(plain_sql(plan)).toArrow())
    assert plain == _reference_rows(plan, tables, pset), f"{name}: plain rows"
    if name in DUCKDB:
        want = _rows(duck.sql(DUCKDB[name]).to_arrow_table())
        assert plain == want, f"{name}: Spark {plain} != DuckDB {want}"
    got = _annotated_rows(annotated_result(spark, plan, pset, fragment_ids="view"))
    want = Counter({r + (a,): m for (r, a), m in ref.bag.items.items()})
    assert got == +want, f"{name}: annotated rows\n  extra {got - want}\n  missing {want - got}"
    fragments = {f for row in got for f in row[-1]}
    assert fragments == set(ref.sketch.fragments), f"{name}: the annotations' union"
    if case.capture:
        assert capture(spark, plan, pset, fragment_ids="case") == ref.sketch, name
    if case.use:
        used = _rows(spark.sql(use_sql(plan, ref.sketch)).toArrow())
        assert used == plain, f"{name}: the query over the sketch {ref.sketch}"


def test_the_tables_exercise_not_in_and_the_joins(tables, duck):
    """The data holds what the DuckDB comparisons need to mean something: a NULL on NOT
    IN's right side (no row kept), NULL left keys that an empty right keeps, and rows of
    every other query."""
    def count(name: str) -> int:
        return sum(_rows(duck.sql(DUCKDB[name]).to_arrow_table()).values())

    assert count("not_in_null_on_right") == 0
    assert count("not_in_empty_right") == tables["r"].num_rows
    assert tables["r"].column("b").null_count > 0
    assert all(count(name) > 0 for name in DUCKDB if name != "not_in_null_on_right")


# -- (c) bootstrap on Spark, then maintenance ---------------------------------------------------
@pytest.fixture(scope="module")
def store(tmp_path_factory, tables) -> DeltaStore:
    store = DeltaStore(tmp_path_factory.mktemp("keyed"))
    for name, table in tables.items():
        store.create_table(name, table)  # keyless: duplicate rows allowed
    return store


@pytest.mark.parametrize("name", [n for n, c in CASES.items() if c.bootstrap])
def test_bootstrap_then_batches_equal_the_engine(spark, tables, store, name):
    case = CASES[name]
    plan, pset = qplan(case.build()), _partitions(case)
    world = World(plan, pset, case.tables)
    world.apply({t: (list(zip(*[c.to_pylist() for c in tables[t].columns])),
                     [1] * tables[t].num_rows) for t in case.tables})
    on_spark = IncrementalQuery(plan, pset)
    run = bootstrap(spark, store, on_spark, {t: store.version(t) for t in case.tables})
    assert set(run.sources.values()) <= {"engine", "spark"}
    keyed = [o for o in on_spark.operators if o.kind in ("semi_join", "anti_join",
                                                          "outer_join")]
    assert keyed and all(run.sources[o.op_id] == "engine" for o in keyed)
    want = canonical_state(world.pipelines[0])
    got = canonical_state(on_spark)
    assert got == want, f"{name} bootstrap: {first_difference(got, want)}"
    world.pipelines.append(on_spark)
    ch = RandChooser(100 + list(CASES).index(name))
    for step in range(4):
        world.step(ch)  # checks both pipelines against the reference
        got, want = canonical_state(on_spark), canonical_state(world.pipelines[0])
        assert got == want, f"{name} step {step}: {first_difference(got, want)}"


# -- SQL through the service's coordinator ----------------------------------------------------
SQL = {  # name: (SQL, shards): EXISTS, NOT IN and a LEFT JOIN, sharded where provable
    "exists": ("SELECT a, count(*) AS n FROM t5000g WHERE EXISTS (SELECT 1 FROM tjoinhelp "
               "WHERE ttid = t5000g.a AND bb < 5000) GROUP BY a", 2),
    "not_in": ("SELECT id, a, b FROM t5000g WHERE b < 2000 AND a NOT IN "
               "(SELECT ttid FROM tjoinhelp WHERE aa < 2500)", 1),
    "left_join": ("SELECT a, count(ttid) AS n, sum(b) AS sb FROM t5000g LEFT JOIN tjoinhelp "
                  "ON a = ttid AND bb < 3000 GROUP BY a", 2),
}


def test_sql_queries_through_the_coordinator_equal_spark_recaptures(spark, tmp_path):
    """Planned from SQL, registered (one or two shards), maintained through updates of
    both tables: every fresh sketch equals a recapture by Spark at its table versions."""
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
        for name, (sql, shards) in SQL.items():
            c.register(QuerySpec(name, sql, partitions={"t5000g.a": 16}, shards=shards))
            assert c.info(name).shards == shards
            kinds = {op["kind"] for shard in c.diagnostics.operator_stats(name) for op in shard}
            assert kinds & {"semi_join", "anti_join", "outer_join"}, kinds
        rng = np.random.default_rng(5)
        for step, table in enumerate(("t5000g", "tjoinhelp")):
            ins, dels = random_batch(c.ctx.store, table, rng, 30, 6 * 10**7 + 1000 * step)
            c.apply_update(table, inserts=ins, deletes=dels)
        for name in SQL:
            assert_spark_exact(c, name)
    finally:
        c.close()


def test_bootstrap_and_maintenance_with_probed_sides_over_a_semi_join(spark, tables, tmp_path):
    """Both inputs of the inner join above a semi-join are probed in Spark: the left one
    is the semi-join's subtree (its Bloom filter of keys from Spark's annotated SQL), the
    join's output is Spark's; the semi-join's own sides, probed too, hold their versions
    and Bloom filters, and Spark evaluates it as well (nothing stepped on the driver)."""
    import numpy as np

    from imp_core.engine.operators.base import TableDelta
    from imp_core.engine.pipeline import EngineOptions
    from imp_core.engine.probed_side import is_probed
    from imp_core.query.data_layer import DataLayer, join_sides
    from imp_core.storage import ChangeReader

    store = DeltaStore(tmp_path)
    for name, table in tables.items():
        store.create_table(name, table)
    case = CASES["join_over_semi"]
    plan, pset = qplan(case.build()), _partitions(case)
    versions = {t: store.version(t) for t in case.tables}
    placement = frozenset(sid for sid, *_ in join_sides(plan.root))
    wiring = DataLayer(store, spark).wire(plan, pset, EngineOptions(), placement)
    wiring.context.begin(None, versions)
    run = bootstrap(spark, store, wiring.pipeline, versions)
    (join,) = [o for o in wiring.pipeline.operators if o.kind == "join"]
    (semi,) = [o for o in wiring.pipeline.operators if o.kind == "semi_join"]
    assert is_probed(join.left) and is_probed(join.right)
    assert is_probed(semi.left) and is_probed(semi.right)
    assert semi.left.versions == {t: versions[t] for t in semi.left.tables}
    assert run.sources[join.op_id] == "spark" and run.sources[semi.op_id] == "spark"
    engine = IncrementalQuery(plan, pset)
    engine.apply({t: TableDelta.inserts(tables[t]) for t in case.tables})
    got, want = canonical_state(wiring.pipeline), canonical_state(engine)
    probed = {join.op_id, semi.op_id}
    assert {k: v for k, v in got.items() if k not in probed} == \
        {k: v for k, v in want.items() if k not in probed}
    rng = np.random.default_rng(3)
    for step in range(2):
        s = store.read("s")
        dels = s.take(pa.array(rng.choice(s.num_rows, 3, replace=False)))
        ins = to_arrow("s", [gen_row("s", RandChooser(50 + step)) for _ in range(4)])
        store.apply("s", inserts=ins, deletes=dels)
        target = {t: store.version(t) for t in versions}
        reader = ChangeReader(store)
        wiring.context.begin(versions, target)
        wiring.pipeline.apply({t: reader.changes(t, versions[t], target[t])
                               for t in target if target[t] > versions[t]})
        versions = target
        ref = reference_capture(plan, {t: store.read(t, v) for t, v in versions.items()}, pset)
        assert wiring.pipeline.sketch() == ref.sketch, f"step {step}"
        assert wiring.pipeline.result().to_counter() == ref.bag.items, f"step {step}"
