"""Every registered TPC-DS query at SF 0.01, maintained over random batches: after each
batch the maintained sketch equals the recapture and the maintained result DuckDB's.

Which queries. Each file of the ``tpcds99`` suite is registered through the embedded
``Engine`` as ``imp bench coverage`` does (``benchmarks.coverage``): on its header
attribute with 64 fragments, and when that attribute is unsafe on the attribute advisor's
choice (``partitions="auto"``). Which files register is pinned here: ``REGISTERED`` (94)
and ``REFUSED`` (9), each refusal with its error class and fragments of its message. A
file that is refused though listed as registering fails its test, and so does a listed
refusal that no longer happens or happens for another reason (then its test checks the
refusal only); every file is in exactly one of the two. Data: tpcgen-cli's SF 0.01 tables
(``workload_data.tpcds_tables``, generated once and cached); each test builds an engine
over the tables its query reads and registers the query once. Two of the heaviest queries
(``YEARS_READ``: ds72, ds04) get the rows of the weeks of the years they read only: the
rows left out cannot reach their results.

Batches (a seeded ``numpy`` generator per query, so a failure replays):

1. insert: copies of fact rows with fresh order / ticket numbers (whole orders or
   tickets, so per-ticket counts and "other warehouse of the same order" still see their
   siblings; with the matching rows of the channel's returns table when the query reads
   it, so sales-returns joins still hit), some of them with measure columns perturbed
   within the declared domains (``tpcds_schemas``); rows of a table without an order or
   ticket number (``inventory``, ``date_dim``) are updated in place instead;
2. emptying: every row of one live fragment of a sketched attribute deleted (a
   partition of the sketch empties; the smallest live one, to keep batches small),
   then every fact row of a few items and of one date (groups vanish, EXISTS turns
   false), and a few item rows (joins stop hitting);
3. mixed: random fact rows deleted, copies inserted with measures scaled up and down
   (groups change rank: top-k cuts and window ranks move), and rows of a dimension the
   query reads updated, their referenced columns taken from other rows (rows change
   groups).

Rows are drawn mostly from the live fragments of the sketched table, so the batches touch
what the query reads. After each batch: (a) ``q.sketch`` equals ``q.reference().sketch``
(the non-incremental recapture) and the annotated result the reference's; (b) the result
equals DuckDB's for the same text, transpiled Spark -> DuckDB by sqlglot (which spells
Spark's NULL ordering, ``/`` and date arithmetic for DuckDB). Rows compare as multisets,
numbers as floats within ``benchmarks.fuzz_sql``'s tolerance (1e-9 relative, 1e-4
absolute: Spark's AVG and quotients of decimals are rounded decimals, DuckDB's doubles);
strings and dates exactly.

Ties at a LIMIT. ``ORDER BY k LIMIT n`` picks any n rows when the n-th and the (n+1)-th
tie on k, and Spark (the engine) and DuckDB may pick different ones. So for an outer
ORDER BY .. LIMIT n DuckDB runs the query without the LIMIT (the whole ordered result
R), and with b the order key of R's n-th row the engine's n rows must hold every row of
R strictly before the tie group of b exactly (as a multiset), and the rest must be rows
of that tie group (keys equal within the tolerance, so float rounding does not split a
tie). An order key that is no output column (nor an ORDER BY position), and a LIMIT
without ORDER BY, leave only membership: the engine's rows are min(n, |R|) rows of R.

A hypothesis test draws batch sequences for four representative shapes (a window, a
ROLLUP, a set operation, an EXISTS / IN inside OR), the first registering query of each
shape's candidates.
"""

from __future__ import annotations

import datetime as dt
import decimal
import functools
import zlib
from collections import defaultdict
from typing import Any

import duck
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
import sqlglot
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlglot import exp
from workload_data import tpcds_tables

from benchmarks.coverage import DEFAULT_FRAGMENTS, classify, make_engine
from benchmarks.fuzz_sql import AVG_ROUNDING
from imp_core.embedded.api import Engine, RegisteredQuery
from imp_core.errors import ImpError, UnsafeSketchError
from imp_core.workloads.queries import WorkloadQuery, list_queries, load_query
from imp_core.workloads.tpcds_schemas import FACT_TABLES, TPCDS

pytestmark = [pytest.mark.tpcds, pytest.mark.slow]

QUERIES = list_queries("tpcds99")
REL_TOL = 1e-9  # benchmarks.fuzz_sql._same: 1e-9 relative or AVG_ROUNDING absolute
FRESH = 1_000_000_000  # order / ticket numbers and surrogate keys from here on are new
# the order / ticket number column of each sales and returns table, and the returns
# table of each sales table with its (item, number) columns
NUMBER = {"store_sales": "ss_ticket_number", "catalog_sales": "cs_order_number",
          "web_sales": "ws_order_number", "store_returns": "sr_ticket_number",
          "catalog_returns": "cr_order_number", "web_returns": "wr_order_number"}
RETURNS = {"store_sales": ("store_returns", ("ss_item_sk", "ss_ticket_number"),
                           ("sr_item_sk", "sr_ticket_number")),
           "catalog_sales": ("catalog_returns", ("cs_item_sk", "cs_order_number"),
                             ("cr_item_sk", "cr_order_number")),
           "web_sales": ("web_returns", ("ws_item_sk", "ws_order_number"),
                         ("wr_item_sk", "wr_order_number"))}
# Which files register (header attribute, else the advisor's) at SF 0.01, found by
# registering each file as ``_register`` does; every other file is refused as REFUSED says.
REGISTERED = frozenset({
    "ds01", "ds02", "ds03", "ds04", "ds05", "ds06", "ds07", "ds08", "ds09", "ds10", "ds11",
    "ds12", "ds13", "ds15", "ds16", "ds17", "ds19", "ds20", "ds21", "ds23a", "ds24a", "ds24b",
    "ds25", "ds26", "ds27", "ds28", "ds29", "ds30", "ds31", "ds32", "ds33", "ds34", "ds35",
    "ds36", "ds37", "ds38", "ds39a", "ds39b", "ds40", "ds41", "ds42", "ds43", "ds44", "ds45",
    "ds46", "ds47", "ds48", "ds50", "ds52", "ds53", "ds54", "ds55", "ds56", "ds57", "ds58",
    "ds59", "ds60", "ds61", "ds62", "ds63", "ds64", "ds65", "ds66", "ds68", "ds69", "ds70",
    "ds71", "ds72", "ds73", "ds74", "ds75", "ds76", "ds78", "ds79", "ds80", "ds81", "ds82",
    "ds83", "ds84", "ds85", "ds86", "ds87", "ds88", "ds89", "ds90", "ds91", "ds92", "ds93",
    "ds94", "ds95", "ds96", "ds97", "ds98", "ds99",
})
# The refused files: the error (on the header attribute; the advisor finds no safe one
# either) and fragments of its message: the attribute and why it is unsafe. The wrong
# answer each refusal prevents: tests/unit/test_tpcds_refusals.py.
REFUSED: dict[str, tuple[type[ImpError], str, str]] = {
    "ds14a": (UnsafeSketchError, "store_sales.ss_item_sk is unsafe: HAVING",
              "it tests an aggregate of groups that may be partial"),
    "ds14b": (UnsafeSketchError, "store_sales.ss_item_sk is unsafe: the top-k",
              "ties on its order keys are broken by sum("),
    "ds18": (UnsafeSketchError, "catalog_sales.cs_item_sk is unsafe: the top-k",
             "ties on its order keys are broken by avg("),
    "ds22": (UnsafeSketchError, "inventory.inv_date_sk is unsafe: the top-k",
             "it ranks on avg(inventory.inv_quantity_on_hand)"),
    "ds23b": (UnsafeSketchError, "store_sales.ss_item_sk is unsafe: HAVING",
              "it tests an aggregate of groups that may be partial"),
    "ds49": (UnsafeSketchError, "store_sales.ss_item_sk is unsafe: HAVING rank()",
             "a rank within a partition the sketch instance may hold only in part"),
    "ds51": (UnsafeSketchError, "store_sales.ss_item_sk is unsafe: store_sales is read",
             "NULL-supplying right side of FULL OUTER JOIN"),
    "ds67": (UnsafeSketchError, "store_sales.ss_item_sk is unsafe: the window",
             "partitions or orders on sum("),
    "ds77": (UnsafeSketchError, "store_sales.ss_item_sk is unsafe: the top-k",
             "ties on its order keys are broken by sum(sum("),
}
# representative shapes for the hypothesis test: candidates in order, first registering
SHAPES = {
    "window": ("ds53", "ds63", "ds98", "ds44", "ds12", "ds20", "ds89", "ds47"),
    "rollup": ("ds27", "ds36", "ds86", "ds70", "ds67", "ds18", "ds22", "ds77", "ds80",
               "ds05", "ds14a"),
    "set operation": ("ds87", "ds38", "ds71", "ds76", "ds60", "ds33", "ds56"),
    "exists or in inside or": ("ds10", "ds35", "ds45"),
}


# -- registering -----------------------------------------------------------------------------


# Two of the heaviest queries read only the sales of a few years (ds72 catalog sales of 1999
# against the inventory of the same weeks, its join of catalog_sales and inventory on the
# item alone being ~12 million rows over all years; ds04 the years 2001 and 2002): their
# rows dated outside the weeks of those years are left out (of date_dim too where every
# date the query joins is a sale's date of those years: not for ds72, whose ship dates run
# later), rows that no filter of the query lets reach the result, so results and sketches
# are those of the whole tables at a fraction of every capture's and recapture's cost.
# (ds02, cut the same way to the weeks of 2000 and 2001, got no faster: left whole.)
YEARS_READ = {
    "ds72": ((1999,), {"catalog_sales": "cs_sold_date_sk", "inventory": "inv_date_sk"}),
    "ds04": ((2001, 2002), {"store_sales": "ss_sold_date_sk",
                            "catalog_sales": "cs_sold_date_sk",
                            "web_sales": "ws_sold_date_sk", "date_dim": "d_date_sk"}),
}


@functools.cache
def _dates_in_weeks_of(years: tuple[int, ...]) -> pa.Array:
    """The date keys of every week holding a day of ``years``."""
    dates = tpcds_tables()["date_dim"]
    year = pc.is_in(dates.column("d_year"),
                    value_set=pa.array(years, dates.schema.field("d_year").type))
    weeks = pc.unique(dates.filter(year).column("d_week_seq"))
    return dates.filter(pc.is_in(dates.column("d_week_seq"), value_set=weeks)) \
        .column("d_date_sk").combine_chunks()


def _data(wq: WorkloadQuery) -> dict[str, pa.Table]:
    """The TPC-DS tables ``wq`` reads (for ``YEARS_READ``'s queries the facts of the weeks
    of the years they read)."""
    data = tpcds_tables()
    tables = {t: data[t] for t in _tables_read(wq.sql)}
    years, dated = YEARS_READ.get(wq.name, ((), {}))
    for table, column in dated.items():
        keep = pc.is_in(tables[table].column(column), value_set=_dates_in_weeks_of(years))
        tables[table] = tables[table].filter(keep)
    return tables


def _engine(wq: WorkloadQuery) -> Engine:
    """An engine over the TPC-DS tables ``wq`` reads (keys and domains declared)."""
    return make_engine(_data(wq), "tpcds")


@functools.cache
def _tables_read(sql: str) -> tuple[str, ...]:
    tree = sqlglot.parse_one(_body(sql), read="spark")
    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    return tuple(sorted({t.name.lower() for t in tree.find_all(exp.Table)} - ctes))


def _register(eng: Engine, wq: WorkloadQuery) -> RegisteredQuery:
    """``wq`` registered as ``imp bench coverage`` does (header attribute, else the
    advisor's after an unsafe one); a refusal raises the header attribute's error."""
    header = {f"{t}.{c}": DEFAULT_FRAGMENTS for t, c in wq.sketch}
    try:
        return eng.register(wq.sql, header, name=wq.name)
    except UnsafeSketchError as unsafe:
        try:
            return eng.register(wq.sql, "auto", fragments=DEFAULT_FRAGMENTS, name=wq.name)
        except ImpError:
            raise unsafe from None


def _refusal(exc: ImpError) -> str:
    """A refusal as ``imp bench coverage`` reports it: error, construct, reason."""
    info = classify(exc)
    why = info["construct"] + (f" ({info['reason']})" if info.get("reason") else "")
    return f"{type(exc).__name__}: {why[:500]}"


def _registered(eng: Engine, wq: WorkloadQuery) -> RegisteredQuery | None:
    """``wq`` registered (a file of ``REGISTERED``), or None once its refusal was checked
    against ``REFUSED``; a file refused otherwise, or registered though listed as
    refused, fails the test."""
    if wq.name in REFUSED:
        error, *fragments = REFUSED[wq.name]
        try:
            q = _register(eng, wq)
        except ImpError as exc:
            assert isinstance(exc, error) and all(f in str(exc) for f in fragments), \
                f"{wq.name} is refused for another reason than REFUSED's: {_refusal(exc)}"
            return None
        raise AssertionError(f"{wq.name} registers now (sketched on {q.partitions}): move "
                             "it from REFUSED to REGISTERED")
    try:
        return _register(eng, wq)
    except ImpError as exc:
        raise AssertionError(f"{wq.name} of REGISTERED is refused: {_refusal(exc)}") from exc


# -- DuckDB and comparing --------------------------------------------------------------------


def _body(sql: str) -> str:
    lines = [line for line in sql.splitlines() if not line.strip().startswith("--")]
    return "\n".join(lines).strip().rstrip(";")


def _value(v: Any) -> Any:
    if v is None or isinstance(v, (bool, str, dt.date)):
        return v
    if isinstance(v, (int, float, decimal.Decimal)):
        return float(v)
    return v


def _arrow_rows(table: pa.Table) -> list[tuple]:
    """The rows by position (a repeated output name, as in ds39, keeps both columns)."""
    columns = [c.to_pylist() for c in table.columns]
    return [tuple(_value(v) for v in row) for row in zip(*columns)] if columns else []


def _close(x: Any, y: Any) -> bool:
    if isinstance(x, float) and isinstance(y, float):
        return abs(x - y) <= max(REL_TOL * abs(y), AVG_ROUNDING)
    return x == y


def _same_row(a: tuple, b: tuple) -> bool:
    return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))


def _bucket(row: tuple) -> tuple:
    return tuple(round(v, 2) if isinstance(v, float) else v for v in row)


def _unmatched(ours: list[tuple], theirs: list[tuple]) -> tuple[list[tuple], list[tuple]]:
    """The rows of each side left over by a multiset matching within the tolerance
    (equal rounded rows first, then any close row)."""
    pool: dict[tuple, list[tuple]] = defaultdict(list)
    for row in theirs:
        pool[_bucket(row)].append(row)
    left = []
    for row in ours:
        same = pool.get(_bucket(row))
        hit = next((i for i, r in enumerate(same or ()) if _same_row(row, r)), None)
        if hit is None:
            left.append(row)
        else:
            same.pop(hit)
    rest = [r for rows in pool.values() for r in rows]
    still = []
    for row in left:
        hit = next((i for i, r in enumerate(rest) if _same_row(row, r)), None)
        if hit is None:
            still.append(row)
        else:
            rest.pop(hit)
    return still, rest


class DuckOracle:
    """DuckDB's answer to a Spark SQL text, and whether the engine's rows match it."""

    def __init__(self, sql: str):
        tree = sqlglot.parse_one(_body(sql), read="spark")
        self.sql = tree.sql(dialect="duckdb")
        limit = tree.args.get("limit")
        self.limit = None
        if isinstance(limit, exp.Limit) and isinstance(limit.expression, exp.Literal):
            self.limit = int(limit.expression.this)
            uncut = tree.copy()
            uncut.set("limit", None)
            self.sql = uncut.sql(dialect="duckdb")
        order = tree.args.get("order")
        self.order = list(order.expressions) if order is not None else []
        self.selects = list(tree.selects) if isinstance(tree, exp.Select) else []

    def _key_positions(self, names: list[str]) -> list[int] | None:
        """The output positions of the ORDER BY keys, or None (one is no output column)."""
        lower = [n.lower() for n in names]
        out = []
        for ordered in self.order:
            key = ordered.this
            if isinstance(key, exp.Literal) and key.is_int:
                out.append(int(key.this) - 1)
                continue
            text = key.sql(dialect="spark")
            by_text = [i for i, s in enumerate(self.selects)
                       if s.unalias().sql(dialect="spark") == text]
            if len(by_text) == 1 and len(self.selects) == len(names):
                out.append(by_text[0])
            elif isinstance(key, exp.Column) and lower.count(key.name.lower()) == 1:
                out.append(lower.index(key.name.lower()))
            else:
                return None
        return out

    def rows(self, eng: Engine) -> tuple[list[tuple], list[str]]:
        con = duck.connection()
        for name, data in eng.tables().items():
            con.register(name, data)
        rel = con.sql(self.sql)
        names = list(rel.columns)
        return [tuple(_value(v) for v in row) for row in rel.fetchall()], names

    def difference(self, eng: Engine, result: pa.Table) -> str | None:
        """Why the engine's ``result`` is not DuckDB's (see the module docstring)."""
        ours = _arrow_rows(result)
        full, names = self.rows(eng)
        if result.num_columns != len(names):
            return f"{result.num_columns} columns, DuckDB {len(names)}"
        n = self.limit
        if n is None or len(full) <= n:
            extra, missing = _unmatched(ours, full)
            if extra or missing:
                return (f"{len(ours)} rows, DuckDB {len(full)}; ours only {extra[:4]}, "
                        f"DuckDB only {missing[:4]}")
            return None
        if len(ours) != n:
            return f"{len(ours)} rows under LIMIT {n}, DuckDB has {len(full)} uncut"
        positions = self._key_positions(names) if self.order else None
        if positions is None:  # no tie structure to use: membership only
            extra, _ = _unmatched(ours, full)
            return f"rows not in DuckDB's uncut result: {extra[:4]}" if extra else None

        def key(row: tuple) -> tuple:
            return tuple(row[i] for i in positions)

        boundary = key(full[n - 1])
        above = [r for r in full[:n] if not _same_row(key(r), boundary)]
        tied = [r for r in full if _same_row(key(r), boundary)]
        rest, missing = _unmatched(ours, above)
        if missing:
            return f"rows above the LIMIT's tie group missing: {missing[:4]}"
        extra, _ = _unmatched(rest, tied)
        if extra:
            return f"rows beyond the LIMIT's tie group {boundary}: {extra[:4]}"
        return None


def _check(eng: Engine, q: RegisteredQuery, duck: DuckOracle, when: str,
           recapture: bool = True) -> None:
    """After a batch: sketch and annotated result against the recapture (``recapture``;
    right after registering the state is a capture itself), result against DuckDB."""
    if recapture:
        ref = q.reference()
        assert q.sketch == ref.sketch, f"{q.name} {when}: sketch {q.sketch} != recapture " \
                                       f"{ref.sketch}"
        assert q.pipeline.result().to_counter() == ref.bag.items, \
            f"{q.name} {when}: annotated result != recapture's"
    problem = duck.difference(eng, q.result())
    assert problem is None, f"{q.name} {when}: result differs from DuckDB: {problem}"


# -- batches -----------------------------------------------------------------------------------


def _columns_used(sql: str) -> frozenset[str]:
    tree = sqlglot.parse_one(_body(sql), read="spark")
    return frozenset(c.name.lower() for c in tree.find_all(exp.Column))


def _max_decimal(dtype: pa.Decimal128Type) -> decimal.Decimal:
    return decimal.Decimal(10) ** (dtype.precision - dtype.scale) - \
        decimal.Decimal(1).scaleb(-dtype.scale)


class Batches:
    """Random batches of a query's tables (the module docstring's three kinds)."""

    def __init__(self, eng: Engine, q: RegisteredQuery, seed: int):
        self.eng, self.q = eng, q
        self.rng = np.random.default_rng(seed)
        read = set(q.plan.root.tables())
        self.facts = [t for t in FACT_TABLES if t in read]
        self.dims = sorted(read - set(self.facts))
        self.used = _columns_used(q.sql)
        self.fresh = FRESH

    # row picking
    def _live(self, table: str) -> np.ndarray:
        """Positions of ``table``'s rows in the sketch's fragments (all rows when the
        table is not sketched or none is live)."""
        data = self.eng.table(table)
        found = self.q.partitions.for_table(table)
        if found is not None:
            live = self.q.sketch.table_fragments(table)
            ids = found[0].annotate(data.column(found[0].column))
            hits = np.flatnonzero(np.isin(ids, live))
            if len(hits):
                return hits
        return np.arange(data.num_rows)

    def _pick(self, table: str, n: int, live_share: float = 0.7) -> np.ndarray:
        data = self.eng.table(table)
        if data.num_rows == 0 or n <= 0:
            return np.zeros(0, np.int64)
        live = self._live(table)
        k = int(round(n * live_share))
        chosen = np.concatenate([self.rng.choice(live, min(k, len(live)), replace=False),
                                 self.rng.choice(data.num_rows, min(n - k, data.num_rows),
                                                 replace=False)])
        return np.unique(chosen)

    def _take(self, table: str, positions: np.ndarray) -> pa.Table:
        return self.eng.table(table).take(pa.array(positions, type=pa.int64()))

    # row changing
    def _perturb(self, table: str, rows: pa.Table, share: float) -> pa.Table:
        """``rows`` with the measure columns of about ``share`` of them scaled (decimals)
        or redrawn in their domain (integers), within the declared domains."""
        info = TPCDS[table]
        key = set(info.key)
        which = self.rng.random(rows.num_rows) < share
        if not which.any():
            return rows
        for i, field in enumerate(rows.schema):
            name = field.name
            if name in key or name.endswith(("_sk", "_number")) or \
                    not (pa.types.is_decimal(field.type) or pa.types.is_integer(field.type)):
                continue
            low, high = info.domains.get(name, (None, None))
            values = rows.column(i).to_pylist()
            out = []
            for v, change in zip(values, which):
                if v is None or not change:
                    out.append(v)
                elif pa.types.is_decimal(field.type):
                    factor = decimal.Decimal(str(self.rng.choice([0, 0.5, 1.5, 3, 10])))
                    top = _max_decimal(field.type) if high is None else \
                        min(decimal.Decimal(high), _max_decimal(field.type))
                    new = (v * factor).quantize(decimal.Decimal(1).scaleb(-field.type.scale))
                    new = max(min(new, top), -_max_decimal(field.type))
                    out.append(new if low is None else max(new, decimal.Decimal(low)))
                else:
                    lo = int(low) if low is not None else max(int(v) - 50, 0)
                    hi = int(high) if high is not None else int(v) + 50
                    out.append(int(self.rng.integers(lo, hi + 1)))
            rows = rows.set_column(i, field, pa.array(out, type=field.type))
        return rows

    def _fresh_numbers(self, values: pa.ChunkedArray | pa.Array) -> dict[Any, int]:
        mapping = {}
        for v in pc.unique(values).to_pylist():
            self.fresh += 1
            mapping[v] = self.fresh
        return mapping

    def insert_copies(self, table: str, n: int, perturb: float) -> None:
        """Copies of about ``n`` rows of ``table`` under fresh keys (whole orders or
        tickets of a sales table, with their returns when read), some perturbed."""
        positions = self._pick(table, n)
        if len(positions) == 0:
            return
        src = self._take(table, positions)
        number = NUMBER.get(table)
        if number is None:  # no free key column: update in place
            self.eng.apply(table, inserts=self._perturb(table, src, max(perturb, 0.5)),
                           deletes=src)
            return
        data = self.eng.table(table)
        if table in RETURNS:  # whole orders / tickets, capped
            chosen = pc.unique(src.column(number))
            src = data.filter(pc.is_in(data.column(number), value_set=chosen)).slice(0, 4 * n)
        mapping = self._fresh_numbers(src.column(number))
        renumber = pa.array([mapping[v] for v in src.column(number).to_pylist()],
                            type=src.schema.field(number).type)
        copies = src.set_column(src.schema.get_field_index(number),
                                src.schema.field(number), renumber)
        self.eng.apply(table, inserts=self._perturb(table, copies, perturb))
        ret = RETURNS.get(table)
        if ret is not None and ret[0] in self.eng.tables():
            rtable, (s_item, s_num), (r_item, r_num) = ret
            returns = self.eng.table(rtable)
            pairs = src.select([s_item, s_num]).rename_columns([r_item, r_num])
            matched = returns.join(pairs, [r_item, r_num], join_type="left semi")
            if matched.num_rows:
                renum = pa.array([mapping[v] for v in matched.column(r_num).to_pylist()],
                                 type=matched.schema.field(r_num).type)
                matched = matched.set_column(matched.schema.get_field_index(r_num),
                                             matched.schema.field(r_num), renum)
                self.eng.apply(rtable, inserts=self._perturb(rtable, matched, perturb))

    def update_dimension(self, table: str, n: int) -> None:
        """``n`` rows of ``table`` (keys kept) with the columns the query uses (else two
        others) taken from other random rows: rows move between groups."""
        data = self.eng.table(table)
        if data.num_rows < 2:
            return
        key = set(TPCDS[table].key)
        columns = [f.name for f in data.schema if f.name not in key]
        used = [c for c in columns if c in self.used]
        swap = used or [str(c) for c in self.rng.choice(columns, min(2, len(columns)),
                                                          replace=False)]
        old = self._take(table, self._pick(table, n, live_share=0.5))
        donors = self._take(table, self.rng.integers(0, data.num_rows, old.num_rows))
        new = old
        for c in swap:
            i = new.schema.get_field_index(c)
            new = new.set_column(i, new.schema.field(c), donors.column(c))
        self.eng.apply(table, inserts=new, deletes=old)

    def delete_rows(self, table: str, n: int) -> None:
        positions = self._pick(table, n)
        if len(positions):
            self.eng.apply(table, deletes=self._take(table, positions))

    def delete_where(self, table: str, column: str, values: list[Any]) -> None:
        data = self.eng.table(table)
        gone = data.filter(pc.is_in(data.column(column),
                                    value_set=pa.array(values, data.schema.field(column).type)))
        if gone.num_rows:
            self.eng.apply(table, deletes=gone)

    def empty_fragments(self) -> None:
        """Every row of one fragment of one sketched attribute: the live fragment with
        the fewest rows (a fragment of a few stores' sales would make a batch of
        thousands of rows), else the smallest non-empty one."""
        parts = self.q.partitions.partitions
        part = parts[int(self.rng.integers(len(parts)))]
        data = self.eng.table(part.table)
        ids = part.annotate(data.column(part.column))
        counts = np.bincount(ids, minlength=part.size)
        live = [f for f in self.q.sketch.table_fragments(part.table) if counts[f]] or \
            np.flatnonzero(counts).tolist()
        if not live:
            return
        fragment = min(live, key=lambda f: (counts[f], self.rng.random()))
        self.eng.apply(part.table, deletes=data.filter(pa.array(ids == fragment)))

    def empty_groups(self) -> None:
        """Every fact row of a few items and of one date; a few item rows."""
        for table in self.facts[:2]:
            data = self.eng.table(table)
            if data.num_rows == 0:
                continue
            rows = self._take(table, self._pick(table, 4))
            items = [c for c in data.column_names if c.endswith("item_sk")]
            dates = [c for c in data.column_names if c.endswith("date_sk")]
            if items:
                self.delete_where(table, items[0], rows.column(items[0]).to_pylist())
            if dates:
                self.delete_where(table, dates[0], rows.column(dates[0]).to_pylist()[:1])
        if "item" in self.dims:
            self.delete_rows("item", 3)

    # the three kinds
    def insert(self) -> None:
        targets = self.facts[:2] or self.dims[:1]
        for table in targets:
            self.insert_copies(table, 25, perturb=0.3)

    def emptying(self) -> None:
        self.empty_fragments()
        self.empty_groups()

    def mixed(self) -> None:
        main = (self.facts or self.dims)[0]
        self.delete_rows(main, 20)
        self.insert_copies(main, 20, perturb=0.8)
        dims = [d for d in self.dims if self.eng.table(d).num_rows > 1]
        if dims:
            self.update_dimension(dims[int(self.rng.integers(len(dims)))], 4)

    KINDS = ("insert", "emptying", "mixed")


def _seed(name: str, salt: int = 0) -> int:
    return zlib.crc32(name.encode()) + salt


# -- the tests -------------------------------------------------------------------------------


def test_every_file_is_pinned_as_registering_or_refused():
    names = {q.name for q in QUERIES}
    assert len(names) == len(QUERIES) == 103
    assert not REGISTERED & set(REFUSED)
    assert REGISTERED | set(REFUSED) == names, (sorted(names - REGISTERED - set(REFUSED)),
                                                sorted((REGISTERED | set(REFUSED)) - names))
    assert (len(REGISTERED), len(REFUSED)) == (94, 9)
    for shape, candidates in SHAPES.items():
        assert REGISTERED & set(candidates), f"no {shape} query registers"


@pytest.mark.parametrize("wq", QUERIES, ids=[q.name for q in QUERIES])
def test_maintained_sketch_and_result_equal_recapture_and_duckdb(wq):
    eng = _engine(wq)
    q = _registered(eng, wq)
    if q is None:
        return  # refused, for the reason REFUSED gives
    duck = DuckOracle(wq.sql)
    _check(eng, q, duck, "after registering", recapture=False)
    batches = Batches(eng, q, _seed(wq.name))
    for kind in Batches.KINDS:
        getattr(batches, kind)()
        _check(eng, q, duck, f"after the {kind} batch")


def _shape_query(shape: str) -> tuple[WorkloadQuery, Engine, RegisteredQuery]:
    """The first candidate of ``shape`` that registers (``REGISTERED``), with its engine
    and registration."""
    name = next(n for n in SHAPES[shape] if n in REGISTERED)
    wq = load_query(f"tpcds99/{name}")
    eng = _engine(wq)
    return wq, eng, _registered(eng, wq)


# Examples per shape: about ten seconds of this 2-core machine each, as every example
# registers the query anew on an engine over the SF 0.01 tables and checks each batch
# against a recapture and DuckDB. Measured per example (1 to 3 batches): window (ds53)
# 0.3-0.5 s, ROLLUP (ds27) 0.6-1.4 s, set operation (ds87) 0.25-0.6 s, EXISTS / IN inside
# OR (ds10) 2.3-3.8 s, most of it its registration: 8.5, 11, 11 and 19 s per test. The
# last gets fewest for that. Derandomized: the same sequences each run, so the suite's
# time and outcome do not vary (a failing sequence's kinds and seed are in its message).
# No health check is suppressed: drawing the lists and seeds is instant.
EXAMPLES = {"window": 25, "rollup": 10, "set operation": 20, "exists or in inside or": 5}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_hypothesis_batch_sequences(shape):
    wq, eng, q = _shape_query(shape)
    duck = DuckOracle(wq.sql)
    # the registration that found the query serves the first example (untouched, it is
    # what registering afresh gives); every other example, replays included, registers anew
    spare = [(eng, q)]

    @settings(max_examples=EXAMPLES[shape], deadline=None, derandomize=True)
    @given(kinds=st.lists(st.sampled_from(Batches.KINDS + ("dimension",)), min_size=1,
                          max_size=3),
           seed=st.integers(0, 2**31 - 1))
    def run(kinds: list[str], seed: int) -> None:
        if spare:
            eng, q = spare.pop()
        else:
            eng = _engine(wq)
            q = _registered(eng, wq)
        batches = Batches(eng, q, seed)
        for step, kind in enumerate(kinds):
            if kind == "dimension":
                for d in batches.dims[:2]:
                    batches.update_dimension(d, 5)
            else:
                getattr(batches, kind)()
            _check(eng, q, duck, f"after batch {step} ({kind}, seed {seed})")

    run()
