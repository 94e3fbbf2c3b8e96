"""Spark as the third oracle for the 22 TPC-H queries as written: after registering and
after two random update batches, the maintained result equals Spark running the query
text (ANSI off, a default session's semantics) over the same tables, types included.

Data: the smallest TPC-H of ``workload_data`` (SF 0.01 cut to its first orders), one
``Engine`` per query, the sketch attribute of the query's workload file. A batch deletes
random stored rows of one input (the sketched table, then another) and inserts modified
copies of others under fresh keys. Spark reads the engine's Arrow tables as temp views;
the only change to a text is Q15's ``create view``, which Spark makes a temporary view
(a permanent one cannot read temp views). Values are compared as ``same_rows`` does
(decimals exactly, doubles within 1e-9 relative), rows as multisets (a LIMIT cutting
through ties of its ORDER BY would show here as a difference: none does at this scale).
"""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pytest
from workload_data import tpch_tables

from imp_core.embedded.api import Engine
from imp_core.oracle.results import same_rows
from imp_core.workloads.queries import list_queries
from imp_core.workloads.schemas import TABLES

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.tpch]

QUERIES = list_queries("tpch22")
BATCHES = 2


class _SparkViews:
    """Spark temp views of Arrow tables, replaced only when a table changed."""

    def __init__(self, spark):
        self.spark = spark
        self.shown: dict[str, pa.Table] = {}

    def run(self, sql: str, tables: dict[str, pa.Table]) -> pa.Table:
        """The result of the last SELECT of ``sql``'s statements, ANSI off."""
        from imp_core.spark.tables import arrow_to_dataframe

        for name, data in tables.items():
            if name not in self.shown or not self.shown[name].equals(data):
                arrow_to_dataframe(self.spark, data).createOrReplaceTempView(name)
                self.shown[name] = data
        before = self.spark.conf.get("spark.sql.ansi.enabled")
        self.spark.conf.set("spark.sql.ansi.enabled", "false")
        try:
            result = None
            for body in filter(None, (part.strip() for part in
                                      re.sub(r"--[^\n]*", "", sql).split(";"))):
                if body.lower().startswith("create view"):
                    body = "create or replace temporary view" + body[len("create view"):]
                frame = self.spark.sql(body)
                if body.lower().lstrip("( \n").startswith(("select", "with")):
                    result = frame.toArrow()
            assert result is not None
            return result
        finally:
            self.spark.conf.set("spark.sql.ansi.enabled", before)


@pytest.fixture(scope="module")
def views(spark) -> _SparkViews:
    return _SparkViews(spark)


def _batch(eng: Engine, table: str, rng: np.random.Generator, salt: int) -> None:
    """Deletes up to 15 random rows of ``table`` and inserts up to 15 copies of others
    under fresh keys."""
    data = eng.table(table)
    n_del = min(int(rng.integers(1, 16)), data.num_rows)
    dels = data.take(pa.array(rng.choice(data.num_rows, n_del, replace=False), pa.int64()))
    ins = data.take(pa.array(rng.integers(0, data.num_rows, int(rng.integers(1, 16))),
                             pa.int64()))
    key = TABLES[table].key
    if key:
        col = key[-1]
        idx = ins.schema.get_field_index(col)
        fresh = pa.array(np.arange(salt, salt + ins.num_rows), ins.schema.field(col).type)
        ins = ins.set_column(idx, col, fresh)
    eng.apply(table, inserts=ins, deletes=dels)


@pytest.mark.parametrize("wq", QUERIES, ids=[q.name for q in QUERIES])
def test_maintained_result_equals_spark_running_the_text(views, wq):
    eng = Engine()
    for name, data in tpch_tables().items():
        info = TABLES[name]
        eng.create_table(name, data, key=info.key, domains=info.domains)
    q = eng.register(wq.sql, {f"{t}.{c}": 16 for t, c in wq.sketch}, name=wq.name)
    rng = np.random.default_rng(31)
    inputs = sorted(q.plan.root.tables())
    sketched = wq.sketch[0][0]
    others = [t for t in inputs if t != sketched] or [sketched]
    for step in range(BATCHES + 1):
        if step:
            table = sketched if step == 1 else others[int(rng.integers(len(others)))]
            _batch(eng, table, rng, 70_000_000 + 1000 * step)
        got, want = q.result(), views.run(wq.sql, eng.tables())
        when = "after registering" if step == 0 else f"after batch {step}"
        assert [f.type for f in got.schema] == [f.type for f in want.schema], \
            f"{wq.name} {when}: types {got.schema} vs Spark {want.schema}"
        assert same_rows(got, want.rename_columns(got.column_names)), \
            f"{wq.name} {when}:\nours  {got.to_pylist()[:5]}\nspark {want.to_pylist()[:5]}"
