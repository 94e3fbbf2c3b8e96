"""Large Spark results reach the driver through Parquet files, not the driver's result
limit: the spilled path returns what ``toArrow`` returns, and a bootstrap whose every
collect spills builds the same state as one that collects."""

from __future__ import annotations

import pyarrow as pa
import pytest
from state_canon import canonical_state, first_difference
from workload_data import workload_stores

from imp_core.embedded.maintainer import Maintainer
from imp_core.spark import collect
from imp_core.workloads.queries import list_queries

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def spark():
    from imp_core.spark import get_spark

    return get_spark()


def _sorted(table: pa.Table) -> pa.Table:
    return table.sort_by([(n, "ascending") for n in ("id",)])


def test_spilled_rows_equal_collected_rows(spark):
    df = spark.sql("""
        SELECT id, CAST(id * 7 % 13 AS DECIMAL(15, 2)) AS `sum(x)`,
               DATE_ADD(DATE'1995-01-01', CAST(id AS INT)) AS d,
               TIMESTAMP'2020-01-01 00:00:00' + MAKE_INTERVAL(0, 0, 0, 0, 0, 0, id) AS ts,
               IF(id % 5 = 0, NULL, CONCAT('s', CAST(id AS STRING))) AS `a b`,
               ARRAY(CAST(id AS INT), CAST(id + 1 AS INT)) AS __imp_ann,
               id % 2 = 0 AS flag
        FROM RANGE(0, 400000, 1, 4)""")
    want = df.toArrow()
    got = collect.spilled(df)
    assert got.schema == want.schema
    assert _sorted(got).equals(_sorted(want))
    # the threshold picks the path: above Spark's estimate collects, below spills
    assert collect.estimated_bytes(df) > 0
    assert _sorted(collect.collect_arrow(df, spill_above=0)).equals(_sorted(want))
    assert collect.collect_arrow(df, spill_above=1 << 40).equals(want)
    empty = df.where("id < 0")
    assert collect.spilled(empty).schema == want.schema
    assert collect.spilled(empty).num_rows == 0


class _LimitedFrame:
    """A DataFrame whose ``toArrow`` fails as Spark's does on the driver's result limit
    (the limit is a SparkContext setting, fixed for the shared session)."""

    def __init__(self, df, error: str):
        self._df, self._error = df, error

    def __getattr__(self, name):
        return getattr(self._df, name)

    def toArrow(self):  # noqa: N802 - pyspark's name
        raise RuntimeError(self._error)


def test_a_collect_over_the_result_limit_runs_again_through_files(spark):
    df = spark.sql("SELECT id, CAST(id AS STRING) AS s FROM RANGE(0, 50000, 1, 2)")
    want = df.toArrow()
    refused = _LimitedFrame(df, "Job aborted due to stage failure: Total size of serialized "
                                "results of 2 tasks (1100.0 MiB) is bigger than "
                                "spark.driver.maxResultSize (1024.0 MiB)")
    got = collect.collect_arrow(refused, spill_above=1 << 40)
    assert _sorted(got).equals(_sorted(want))
    other = _LimitedFrame(df, "Job aborted due to stage failure: disk full")
    with pytest.raises(RuntimeError, match="disk full"):
        collect.collect_arrow(other, spill_above=1 << 40)


def test_size_settings():
    assert collect.size_setting("1g") == 1 << 30
    assert collect.size_setting("512m") == 512 << 20
    assert collect.size_setting("2048") == 2048
    assert collect.size_setting("0") == 0
    assert collect.size_setting(None) == collect.DEFAULT_RESULT_LIMIT
    assert collect.size_setting("lots") == collect.DEFAULT_RESULT_LIMIT


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    return workload_stores(tmp_path_factory.mktemp("collect"))


@pytest.mark.parametrize("name", ["q03", "q09", "q_having_2", "q_topk"])
def test_a_bootstrap_through_files_builds_the_same_state(spark, stores, monkeypatch, name):
    wq = {q.name: q for q in list_queries()}[name]
    store = stores["tpch" if wq.suite == "tpch" else "synthetic"]
    parts = {f"{t}.{c}": 8 for t, c in wq.sketch}
    plain = Maintainer(store, spark=spark).register(wq.name, wq.sql, parts)
    calls = []
    real = collect.spilled

    def spy(df):
        calls.append(df)
        return real(df)

    monkeypatch.setattr(collect, "spill_threshold", lambda df: -1)
    monkeypatch.setattr(collect, "spilled", spy)
    through_files = Maintainer(store, spark=spark).register(wq.name, wq.sql, parts)
    assert calls and through_files.bootstrap == "spark"
    a, b = canonical_state(plain.pipeline), canonical_state(through_files.pipeline)
    assert a == b, f"{wq.name}: {first_difference(a, b)}"
    assert plain.sketch == through_files.sketch
