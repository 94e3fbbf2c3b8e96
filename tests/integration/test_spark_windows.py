"""Window functions on Spark: the user's SQL text, run unchanged by Spark, gives the rows
the engine maintains; the project's compiled SQL (plain, capture, sketch-filtered) gives
the engine's rows, the engine's sketch, and over the sketch instance the reference's
rows (issue 32, part 2)."""

from __future__ import annotations

from decimal import Decimal

import pyarrow as pa
import pytest
from test_spark_semantics import _spark_rows

from imp_core.embedded.api import Engine
from imp_core.oracle.reference import reference_capture, restrict_to_sketch
from imp_core.oracle.results import same_rows

pytestmark = [pytest.mark.spark, pytest.mark.integration]

D = Decimal
W = pa.table({
    "k": pa.array(range(1, 11), pa.int64()),
    "g": pa.array([1, 1, 1, 2, 2, 2, None, None, 3, 1], pa.int64()),
    "v": pa.array([5, 3, 5, None, 2, 9, 4, 4, 7, 1], pa.int64()),
    "d": pa.array([D("1.50"), D("2.25"), None, D("0.10"), D("9.99"), D("3.00"), D("1.00"),
                   D("4.20"), D("0.00"), D("7.77")], pa.decimal128(15, 2)),
})
CASES = {
    "rank_topk": "SELECT k, g, v, rk FROM (SELECT k, g, v, rank() OVER (PARTITION BY g "
                 "ORDER BY v DESC) AS rk FROM w) x WHERE rk <= 2",
    "dense_rank": "SELECT k, dense_rank() OVER (PARTITION BY g ORDER BY v) AS dr FROM w",
    "row_number": "SELECT k, row_number() OVER (PARTITION BY g ORDER BY v, k) AS rn FROM w",
    "partition_aggregates": "SELECT k, sum(d) OVER (PARTITION BY g) AS s, avg(v) OVER "
                            "(PARTITION BY g) AS a, count(v) OVER (PARTITION BY g) AS n, "
                            "min(d) OVER (PARTITION BY g) AS lo, max(v) OVER () AS hi FROM w",
    "running_rows": "SELECT k, sum(d) OVER (PARTITION BY g ORDER BY k ROWS BETWEEN "
                    "UNBOUNDED PRECEDING AND CURRENT ROW) AS cs FROM w",
    "running_range": "SELECT k, sum(v) OVER (PARTITION BY g ORDER BY v) AS cs, count(*) OVER "
                     "(ORDER BY g DESC) AS n FROM w",
    "over_aggregate": "SELECT g, sum(d) AS s, sum(sum(d)) OVER () AS total, rank() OVER "
                      "(ORDER BY sum(d) DESC) AS r FROM w GROUP BY g",
}


@pytest.fixture(scope="module")
def spark():
    from imp_core.spark import get_spark
    from imp_core.spark.tables import arrow_to_dataframe

    session = get_spark()
    arrow_to_dataframe(session, W).createOrReplaceTempView("w")
    return session


@pytest.mark.parametrize("name", list(CASES))
def test_window_results_sketches_and_filtered_queries_agree_with_spark(spark, name):
    from imp_core.spark import plain_sql
    from imp_core.spark.compile import use_sql
    from imp_core.spark.run import capture

    sql = CASES[name]
    eng = Engine()
    eng.create_table("w", W, key="k")
    q = eng.register(sql, {"w.k": [3, 5, 8]}, force=True)
    eng.delete("w", W.slice(1, 1))  # maintained, not only registered
    eng.insert("w", pa.table({"k": pa.array([11], pa.int64()), "g": pa.array([1], pa.int64()),
                              "v": pa.array([6], pa.int64()),
                              "d": pa.array([D("2.00")], pa.decimal128(15, 2))}))
    spark_table = eng.table("w")
    from imp_core.spark.tables import arrow_to_dataframe

    arrow_to_dataframe(spark, spark_table).createOrReplaceTempView("w")
    try:
        want = _spark_rows(spark, sql)
        got = q.result()
        assert [f.type for f in got.schema] == [f.type for f in want.schema], name
        assert same_rows(got, want), f"{name}: engine {got.to_pylist()} spark {want.to_pylist()}"
        compiled = _spark_rows(spark, plain_sql(q.plan))
        assert same_rows(compiled.rename_columns(got.column_names), got), name
        assert capture(spark, q.plan, q.partitions, fragment_ids="case") == q.sketch, name
        # the sketch-filtered query is the query over the sketch instance
        filtered = _spark_rows(spark, use_sql(q.plan, q.sketch))
        tables = restrict_to_sketch(eng.tables(), q.sketch)
        ref = reference_capture(q.plan, tables, q.partitions)
        want_rows = sorted(((tuple(r), m) for r, m in ref.rows().items()), key=repr)
        got_rows: dict = {}
        for row in filtered.to_pylist():
            key = tuple(row.values())
            got_rows[key] = got_rows.get(key, 0) + 1
        assert sorted(got_rows.items(), key=repr) == want_rows, name
    finally:
        arrow_to_dataframe(spark, W).createOrReplaceTempView("w")


def test_bootstrap_on_spark_equals_the_engine_and_keeps_up(spark, tmp_path):
    from imp_core.engine.operators.base import TableDelta
    from imp_core.engine.operators.window import WindowOp
    from imp_core.engine.pipeline import IncrementalQuery
    from imp_core.engine.state import group_state
    from imp_core.engine.zset import batch_from_arrow
    from imp_core.spark.bootstrap import bootstrap
    from imp_core.storage import DeltaStore

    store = DeltaStore(tmp_path / "store")
    store.create_table("w", W)
    eng = Engine()
    eng.create_table("w", W, key="k")
    q = eng.register(CASES["rank_topk"].replace("rk <= 2", "rk <= 1") + " AND g IS NOT NULL",
                     {"w.k": [3, 5, 8]}, force=True)
    on_spark = IncrementalQuery(q.plan, q.partitions)
    run = bootstrap(spark, store, on_spark, {"w": store.version("w")})
    windows = [o for o in on_spark.operators if isinstance(o, WindowOp)]
    assert windows and run.sources[windows[0].op_id] == "spark"

    def state(pipeline):
        grouped = group_state(pipeline.state_tables())
        return {o.op_id: batch_from_arrow(grouped[o.op_id]["rows"]).to_counter()
                for o in pipeline.operators if isinstance(o, WindowOp)}

    assert state(on_spark) == state(q.pipeline)
    assert on_spark.sketch() == q.sketch
    assert on_spark.result().to_counter() == q.pipeline.result().to_counter()
    # a batch that reorders the ranks of partition g = 1 and empties g = 3
    dead = W.filter(pa.array([k in (1, 3, 9) for k in W.column("k").to_pylist()]))
    eng.delete("w", dead)
    on_spark.apply({"w": TableDelta.deletes(dead)})
    assert on_spark.sketch() == q.sketch == q.reference().sketch
    assert on_spark.result().to_counter() == q.pipeline.result().to_counter()
