"""All 22 TPC-H queries as written: maintained sketch == recapture and maintained result ==
DuckDB's result of the same SQL text after every batch.

Data: tpchgen-cli at SF 0.01, whole or cut to its first orders (``workload_data``); a
query's result must be non-empty on at least one of them. Each query is
registered through the embedded ``Engine`` with the sketch attribute of its workload file
(safety checked, nothing forced), then fed random batches of these kinds:

- mixed: deletes of stored rows and inserts of modified copies with fresh keys, mostly on
  the sketched table, sometimes on another input;
- emptying: every lineitem of some orders deleted (empties groups, turns EXISTS false and
  NOT EXISTS true: q4, q21, q22) or every order of some customers (q13's zero counts, q22);
- reviving: lineitems inserted for orders that have none, orders for customers without.

After each batch the sketch must equal the non-incremental recapture (``reference``), the
annotated result the reference's, and the plain result DuckDB's (values compared as
numbers within 1e-6 relative, so decimal scales may differ).
"""

from __future__ import annotations

import datetime as dt
import decimal
import math

import duck
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from workload_data import tpch_full_tables, tpch_tables

from imp_core.embedded.api import Engine
from imp_core.oracle.reference import reference_capture
from imp_core.workloads.queries import list_queries
from imp_core.workloads.schemas import TABLES

QUERIES = list_queries("tpch22")
STEPS = 5
# on all of SF 0.01, substitution parameters that give these queries a non-empty result
# (no order has more than 313 units there; no Brand#42 'LG BAG' lineitem passes Q17)
SF001_PARAMETERS = {"h17": (("'Brand#42'", "'Brand#44'"), ("'LG BAG'", "'WRAP CAN'")),
                    "h18": (("> 313", "> 250"),)}


def _engine(full: bool) -> Engine:
    eng = Engine()
    for name, data in (tpch_full_tables() if full else tpch_tables()).items():
        info = TABLES[name]
        eng.create_table(name, data, key=info.key, domains=info.domains)
    return eng


def _value(v: object) -> object:
    if isinstance(v, bool) or v is None:
        return v
    if isinstance(v, (int, float, decimal.Decimal)):
        return float(v)
    if isinstance(v, (dt.date, dt.datetime)):
        return v.isoformat()
    return v


def _rows(table: pa.Table) -> list[tuple]:
    """The rows, values as comparable Python objects, in a canonical order."""
    rows = [tuple(_value(v) for v in row.values()) for row in table.to_pylist()]
    return sorted(rows, key=lambda r: tuple(
        (0, f"{v:.3g}") if isinstance(v, float) else (1, "") if v is None else (2, str(v))
        for v in r))


def _same(ours: list[tuple], theirs: list[tuple]) -> bool:
    """Equal row lists; numbers within 1e-5 relative (Spark's AVG of a decimal rounds to
    its result scale, DuckDB's is a double)."""
    if len(ours) != len(theirs):
        return False
    for a, b in zip(ours, theirs):
        if len(a) != len(b):
            return False
        for x, y in zip(a, b):
            if isinstance(x, float) and isinstance(y, float):
                if not math.isclose(x, y, rel_tol=1e-5, abs_tol=1e-6):
                    return False
            elif x != y:
                return False
    return True


def _duckdb_result(eng: Engine, sql: str) -> pa.Table:
    con = duck.connection()
    for name, data in eng.tables().items():
        # DuckDB reads string_view columns as plain VARCHAR once cast
        fixed = data.cast(pa.schema([
            pa.field(f.name, pa.string() if pa.types.is_string_view(f.type) else f.type)
            for f in data.schema]))
        con.register(name, fixed)
    result = None
    for statement in sql.split(";"):
        body = "\n".join(line for line in statement.splitlines()
                         if not line.strip().startswith("--")).strip()
        if not body:
            continue
        if body.lower().lstrip("( \n").startswith(("select", "with")):
            result = con.sql(body).to_arrow_table()
        else:
            con.execute(body)
    assert result is not None
    return result


def _fresh_keys(table: str, rows: pa.Table, start: int) -> pa.Table:
    key = TABLES[table].key
    if not key:
        return rows
    col = key[-1]
    idx = rows.schema.get_field_index(col)
    vals = pa.array(np.arange(start, start + rows.num_rows), type=rows.schema.field(col).type)
    return rows.set_column(idx, col, vals)


class _Batches:
    """Random batches (see the module docstring) applied to ``eng``."""

    def __init__(self, eng: Engine, seed: int):
        self.eng = eng
        self.rng = np.random.default_rng(seed)
        self.counter = 0

    def mixed(self, table: str, size: int = 20) -> None:
        data = self.eng.table(table)
        n_del = min(int(self.rng.integers(0, size + 1)), data.num_rows)
        n_ins = int(self.rng.integers(0, size + 1))
        dels = data.take(pa.array(self.rng.choice(data.num_rows, n_del, replace=False),
                                  type=pa.int64()))
        src = data.take(pa.array(self.rng.integers(0, data.num_rows, n_ins), type=pa.int64()))
        self.counter += n_ins + 1
        ins = _fresh_keys(table, src, 50_000_000 + self.counter * 1000)
        self.eng.apply(table, inserts=ins, deletes=dels)

    def empty_orders(self, count: int = 15) -> None:
        items = self.eng.table("lineitem")
        keys = pc.unique(items.column("l_orderkey"))
        chosen = keys.take(pa.array(self.rng.choice(len(keys), min(count, len(keys)),
                                                    replace=False), type=pa.int64()))
        self.eng.apply("lineitem", deletes=items.filter(
            pc.is_in(items.column("l_orderkey"), value_set=chosen)))

    def empty_customers(self, count: int = 40) -> None:
        orders = self.eng.table("orders")
        keys = pc.unique(orders.column("o_custkey"))
        chosen = keys.take(pa.array(self.rng.choice(len(keys), min(count, len(keys)),
                                                    replace=False), type=pa.int64()))
        self.eng.apply("orders", deletes=orders.filter(
            pc.is_in(orders.column("o_custkey"), value_set=chosen)))

    def revive(self) -> None:
        """Lineitems for orders without any, and orders for customers without any."""
        items, orders = self.eng.table("lineitem"), self.eng.table("orders")
        lonely = pc.filter(orders.column("o_orderkey"), pc.invert(pc.is_in(
            orders.column("o_orderkey"), value_set=items.column("l_orderkey"))))
        if len(lonely) and items.num_rows:
            n = min(len(lonely), 10)
            src = items.take(pa.array(self.rng.integers(0, items.num_rows, n), type=pa.int64()))
            src = src.set_column(src.schema.get_field_index("l_orderkey"), "l_orderkey",
                                 lonely.slice(0, n).cast(src.schema.field("l_orderkey").type))
            self.counter += n + 1
            self.eng.apply("lineitem", inserts=_fresh_keys("lineitem", src,
                                                           50_000_000 + self.counter * 1000))
        customers = self.eng.table("customer").column("c_custkey")
        without = pc.filter(customers, pc.invert(pc.is_in(customers,
                                                          value_set=orders.column("o_custkey"))))
        if len(without) and orders.num_rows:
            n = min(len(without), 10)
            src = orders.take(pa.array(self.rng.integers(0, orders.num_rows, n),
                                       type=pa.int64()))
            src = src.set_column(src.schema.get_field_index("o_custkey"), "o_custkey",
                                 without.slice(0, n).cast(src.schema.field("o_custkey").type))
            self.counter += n + 1
            self.eng.apply("orders", inserts=_fresh_keys("orders", src,
                                                         60_000_000 + self.counter * 1000))


def _check(eng: Engine, q, sql: str, when: str) -> None:
    ref = reference_capture(q.plan, eng.tables(), q.partitions)
    assert q.sketch == ref.sketch, f"{q.name} {when}: {q.sketch} != recapture {ref.sketch}"
    assert q.pipeline.result().to_counter() == ref.bag.items, f"{q.name} {when}: annotated"
    ours, theirs = _rows(q.result()), _rows(_duckdb_result(eng, sql))
    assert _same(ours, theirs), f"{q.name} {when}: result differs from DuckDB:\n" \
                                f"ours {ours[:5]}\nduckdb {theirs[:5]}"


@pytest.mark.parametrize("wq", QUERIES, ids=[q.name for q in QUERIES])
@pytest.mark.parametrize("seed", [1, 2])
def test_tpch22_maintained_equals_recapture_and_duckdb(wq, seed):
    # seed 1 on the first 400 orders (small groups, so batches empty many of them),
    # seed 2 on all of SF 0.01 (results that are empty on the cut are not there)
    full = seed == 2
    eng = _engine(full)
    sql = wq.sql
    for old, new in SF001_PARAMETERS.get(wq.name, ()) if full else ():
        assert old in sql
        sql = sql.replace(old, new)
    q = eng.register(sql, {f"{t}.{c}": 16 for t, c in wq.sketch}, name=wq.name)
    if full:  # real rows flow through every operator (not only SQL's row over none)
        assert len(q.pipeline.result()) > 0
    _check(eng, q, sql, "after registering")
    batches = _Batches(eng, seed)
    tables = sorted(q.plan.root.tables())
    sketched = wq.sketch[0][0]
    kinds = ["mixed", "empty_orders", "mixed", "empty_customers", "revive", "mixed"]
    for step, kind in enumerate(kinds[:STEPS + 1]):
        if kind == "mixed":
            table = sketched if batches.rng.random() < 0.6 else \
                tables[int(batches.rng.integers(len(tables)))]
            batches.mixed(table)
        else:
            getattr(batches, kind)()
        _check(eng, q, sql, f"after batch {step} ({kind})")
