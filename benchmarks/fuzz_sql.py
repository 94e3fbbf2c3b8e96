"""Random SQL over the supported grammar, maintained over random update streams.

Each case draws two small tables ``r(a, b, c, m)`` (key ``a``) and ``s(c, d, e, n)`` (key
``c``): small integers from -3 to 4 and DECIMAL(7, 2) values (``m``, ``n``), with NULLs
and duplicates; a query of the planner's grammar (selections with AND/OR/IN/NOT IN (NULLs
in the lists too)/BETWEEN/IS NULL, inner joins, grouped and global aggregates with
HAVING, top-k, EXISTS / NOT EXISTS / IN / NOT IN and scalar subqueries, outer joins,
COUNT(DISTINCT), UNION / INTERSECT / EXCEPT [ALL] of r and s, nested and with ORDER BY ...
LIMIT; ``%``, ``pmod``, ``DIV`` and ``/`` of columns and literals, negative
ones too, projected, grouped on, aggregated and compared; window functions: a rank,
dense_rank or row_number cut in an outer query (partitioned top-k), aggregates over the
whole partition or the running frame, windows over a grouped aggregation; GROUP BY
ROLLUP / CUBE / GROUPING SETS with grouping() and grouping_id()); registers it through the
embedded ``Engine`` with a sketch on a key column, and applies random insert / delete /
mixed batches. After registering and after every batch the maintained sketch must equal
the non-incremental recapture and the maintained result DuckDB's result of the same SQL
(``pmod`` written out, zero divisors as NULLIF, window orders with Spark's NULL placement,
``grouping_id()`` as ``grouping(k1, ..)``, no grand total over an empty input) over the
same tables. ``FuzzReport.shapes`` counts the cases drawn and registered by shape.

The oracles. DuckDB (the default, fast) divides decimals into DOUBLE where Spark's
quotient is an exact decimal (3.30 / 3 is 1.0999999999999999 there, 1.1 in Spark), so a
query dividing a decimal is not compared with DuckDB (``FuzzReport.duckdb_skipped``
counts them); its AVG of a DECIMAL(p, s) is a DOUBLE, Spark's a decimal rounded to s + 4
places, so DuckDB's numbers are compared within 1e-4. With ``oracle="spark"`` a local Spark
session also runs the SQL text unchanged, ANSI off (a default session's semantics), over
temp views of the same Arrow tables after registering and after the last batch; result
types and values (decimals exactly) must be Spark's.

Every fourth case runs in ANSI mode (``Engine(ansi=True)``; Spark with
``spark.sql.ansi.enabled`` on): after each batch the query must raise exactly when the
reference evaluator raises (a zero divisor among the current rows, an overflow), Spark
must raise too where it runs, and where nothing raises the checks above apply.

A finding is a mismatch or an exception that is not a refusal (``ImpError``: the
construct is unsupported, or the attribute unsafe); refusals are counted by kind. Each
names the SQL, the seed and the case (``random.Random(seed * 1_000_003 + case)`` replays
it). Used by ``tests/unit/test_fuzz_sql.py`` (a bounded run, DuckDB),
``tests/integration/test_fuzz_sql_spark.py`` (Spark) and ``imp bench fuzz`` (longer;
``IMP_FUZZ_ORACLE=spark`` for Spark).
"""

from __future__ import annotations

import decimal
import random
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

import pyarrow as pa

R_COLS = ("a", "b", "c", "m")
S_COLS = ("c", "d", "e", "n")
DECIMALS = ("m", "n")  # DECIMAL(7, 2); the other columns are BIGINT
DECIMAL_TYPE = pa.decimal128(7, 2)
CMP = ("=", "<>", "<", "<=", ">", ">=")
DECIMAL_VALUES = ("-2.50", "-1.00", "0.00", "0.75", "1.00", "1.50", "3.30", "4.00")
AVG_ROUNDING = 1e-4  # DuckDB's AVG of a decimal is a double, Spark's rounded to s + 4 places
QUOTIENT_LITERALS = ("0.5", "1", "1.5", "-0.5", "1.1", "0.25", "2")


@dataclass
class FuzzReport:
    """Counts of one run and its findings (each with the SQL and the seed to replay)."""

    queries: int = 0
    registered: int = 0
    batches: int = 0
    refused: Counter = field(default_factory=Counter)
    findings: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0
    oracle: str = "duckdb"
    duckdb_skipped: int = 0  # registered cases dividing a decimal: not compared with DuckDB
    spark_checks: int = 0  # results compared with Spark's
    ansi_cases: int = 0  # registered cases run in ANSI mode
    ansi_raised: int = 0  # checks at which an ANSI case raised (and every oracle agreed)
    # ANSI cases where Spark raised and the engine (with the reference) did not, or the
    # reverse: Spark's optimizer chose which rows an expression runs on (a constraint
    # inferred across a join equality and pushed below it, a comparison it folded
    # away); the values agree wherever neither raises (docs/engine.md, ANSI mode)
    ansi_spark_divergences: list[dict[str, Any]] = field(default_factory=list)
    shapes: Counter = field(default_factory=Counter)  # cases drawn by shape
    shapes_registered: Counter = field(default_factory=Counter)  # ... and registered

    def to_json(self) -> dict[str, Any]:
        return {"queries": self.queries, "registered": self.registered,
                "batches": self.batches, "refused": dict(self.refused.most_common()),
                "oracle": self.oracle, "duckdb_skipped": self.duckdb_skipped,
                "spark_checks": self.spark_checks, "ansi_cases": self.ansi_cases,
                "ansi_raised": self.ansi_raised,
                "ansi_spark_divergences": self.ansi_spark_divergences,
                "shapes": self.shapes_json(),
                "findings": self.findings, "seconds": round(self.seconds, 2)}

    def shapes_json(self) -> dict[str, dict[str, int]]:
        """Cases drawn and registered by shape (``QueryGen.shape``), the most drawn first."""
        return {shape: {"drawn": n, "registered": self.shapes_registered[shape]}
                for shape, n in self.shapes.most_common()}


class QueryGen:
    """Random queries of the supported grammar (``rng``: a ``random.Random``).

    Besides the base grammar it draws NULLs in IN / NOT IN lists, ``%`` and ``pmod`` of
    negative values, ``DIV`` and ``/`` (of integers and of the DECIMAL columns), grouping
    on computed values and comparisons of quotients, window functions and grouping sets.
    ``duckdb_sql`` spells a drawn query for DuckDB with Spark's meaning (``pmod`` and zero
    divisors written out, and the spellings ``over`` and ``grouping_sets_query`` record),
    or is None when it divides a decimal: DuckDB's quotient is then a DOUBLE where Spark's
    is exact.
    """

    def __init__(self, rng: random.Random):
        self.rng = rng
        self._duck: dict[str, str] = {}  # a text of the query -> DuckDB's spelling
        self.decimal_quotient = False  # the query divides a decimal (Spark-only)
        self.shape = ""  # the shape query() drew (FuzzReport.shapes)

    def lit(self) -> str:
        return str(self.rng.randint(0, 4)) if self.rng.random() < 0.85 \
            else str(self.rng.randint(-2, -1))

    def in_list(self, col: str) -> str:
        """``col [NOT] IN (...)``, sometimes with a NULL in the list."""
        items = [self.lit() for _ in range(self.rng.randint(1, 3))]
        if self.rng.random() < 0.3:
            items.insert(self.rng.randint(0, len(items)), "NULL")
        negated = "NOT " if self.rng.random() < 0.4 else ""
        return f"{col} {negated}IN ({', '.join(items)})"

    def computed(self, cols: list[str]) -> str:
        """``%``, ``pmod``, ``DIV`` or ``/`` of a column and a column or literal."""
        decimals = [c for c in cols if c.split(".")[-1] in DECIMALS]
        kind = self.rng.randrange(5)
        x = self.rng.choice(decimals) if decimals and kind >= 3 and self.rng.random() < 0.7 \
            else self.rng.choice(cols)
        y = self.rng.choice(cols) if self.rng.random() < 0.6 else \
            self.rng.choice(("2", "-3", "0", "1.5", "-0.25"))
        dec = any(v.split(".")[-1] in DECIMALS or "." in v and v[0] in "-0123456789"
                  for v in (x, y))
        if kind == 0:
            return f"{x} % {y}"
        if kind == 1:
            text = f"pmod({x}, {y})"
            self._duck[text] = f"(CASE WHEN {x} % {y} < 0 THEN ({x} % {y} + {y}) % {y} " \
                               f"ELSE {x} % {y} END)"
            return text
        if kind == 2:
            text = f"{x} DIV {y}"
            self._duck[text] = f"({x} // {y})"
        else:
            text = f"{x} / {y}"
            self._duck[text] = f"({x} / NULLIF({y}, 0))"
        self.decimal_quotient |= dec
        return text

    def duckdb_sql(self, sql: str) -> str | None:
        """``sql`` for DuckDB with Spark's meaning, or None (a decimal is divided)."""
        if self.decimal_quotient:
            return None
        return self._spell(sql)

    def _spell(self, sql: str) -> str:
        """``sql`` with every recorded text in DuckDB's spelling (the longest first)."""
        if not self._duck:
            return sql
        keys = sorted(self._duck, key=len, reverse=True)
        return re.sub("|".join(re.escape(k) for k in keys), lambda m: self._duck[m[0]], sql)

    def atom(self, cols: list[str]) -> str:
        col = self.rng.choice(cols)
        kind = self.rng.random()
        if kind < 0.42:
            return f"{col} {self.rng.choice(CMP)} {self.lit()}"
        if kind < 0.54:
            return f"{col} IS {'NOT ' if self.rng.random() < 0.5 else ''}NULL"
        if kind < 0.7:
            return self.in_list(col)
        if kind < 0.78:
            lo = self.rng.randint(0, 3)
            return f"{col} BETWEEN {lo} AND {lo + self.rng.randint(0, 2)}"
        if kind < 0.9:
            return f"{self.computed(cols)} {self.rng.choice(CMP)} " \
                   f"{self.rng.choice(QUOTIENT_LITERALS)}"
        other = self.rng.choice(cols)
        return f"{col} {self.rng.choice(CMP)} {other}"

    def predicate(self, cols: list[str], depth: int = 0) -> str:
        if depth < 2 and self.rng.random() < 0.35:
            op = self.rng.choice(("AND", "OR"))
            return f"({self.predicate(cols, depth + 1)} {op} {self.predicate(cols, depth + 1)})"
        return self.atom(cols)

    def subquery_atom(self) -> str:
        """A subquery conjunct on r (outer) over s."""
        kind = self.rng.randrange(6)
        inner = f" AND s.e {self.rng.choice(CMP)} {self.lit()}" if self.rng.random() < 0.5 \
            else ""
        if kind == 0:
            return f"EXISTS (SELECT * FROM s WHERE s.d = r.b{inner})"
        if kind == 1:
            return f"NOT EXISTS (SELECT * FROM s WHERE s.d = r.b{inner})"
        if kind == 2:
            return f"r.c IN (SELECT e FROM s WHERE d {self.rng.choice(CMP)} {self.lit()})"
        if kind == 3:
            return f"r.b NOT IN (SELECT d FROM s WHERE e {self.rng.choice(CMP)} {self.lit()})"
        if kind == 4:
            agg = self.rng.choice(("avg", "max", "min", "sum"))
            return f"r.c {self.rng.choice(CMP)} (SELECT {agg}(e) FROM s)"
        return "r.b >= (SELECT min(e) FROM s WHERE s.d = r.c)"

    def from_clause(self) -> tuple[str, list[str], str]:
        """(FROM text, the columns it offers, the table whose key is sketched)."""
        kind = self.rng.random()
        r = [f"r.{c}" for c in R_COLS]
        s = [f"s.{c}" for c in S_COLS]
        if kind < 0.45:
            return "r", r, "r"
        if kind < 0.6:
            return "s", s, "s"
        if kind < 0.85:
            return "r JOIN s ON r.b = s.d", r + s, "r"
        join = self.rng.choice(("LEFT JOIN", "FULL OUTER JOIN"))
        return f"r {join} s ON r.c = s.e", r + s, "r"

    def _grouped(self, source: str, cols: list[str], where_sql: str) -> str:
        group = self.computed(cols) if self.rng.random() < 0.2 else self.rng.choice(cols)
        agg_col = self.computed(cols) if self.rng.random() < 0.15 else self.rng.choice(cols)
        if self.rng.random() < 0.15:
            aggs = [f"count(DISTINCT {agg_col}) AS x1"]
        else:
            aggs = [f"{f}({agg_col}) AS x{i + 1}" for i, f in enumerate(
                self.rng.sample(("sum", "count", "avg", "min", "max"),
                                self.rng.randint(1, 3)))]
            if self.rng.random() < 0.3:
                aggs.append("count(*) AS xn")
        having = ""
        roll = self.rng.random()
        if roll < 0.3:
            having = f" HAVING sum({agg_col}) {self.rng.choice(CMP)} {self.lit()}"
        elif roll < 0.4:  # a quotient of aggregates
            dec = self.rng.choice([c for c in cols if c.split(".")[-1] in DECIMALS])
            having = f" HAVING sum({dec}) / count(*) {self.rng.choice(CMP)} " \
                     f"{self.rng.choice(QUOTIENT_LITERALS)}"
            self.decimal_quotient = True
        return (f"SELECT {group} AS x0, {', '.join(aggs)} FROM {source}{where_sql} "
                f"GROUP BY {group}{having}")

    def query(self) -> tuple[str, str]:
        """(SQL, sketch attribute); ``self.shape`` names the shape drawn."""
        source, cols, sketched = self.from_clause()
        where = []
        if self.rng.random() < 0.6:
            where.append(self.predicate(cols))
        if source == "r" and self.rng.random() < 0.4:
            where.append(self.subquery_atom())
        where_sql = f" WHERE {' AND '.join(where)}" if where else ""
        attribute = "r.a" if sketched == "r" else "s.c"
        # the keys that make an order total: r.a of r, s.c of s, both over a join (an
        # outer join's padded rows included: (r.a, s.c) is unique)
        keys = [k for k in ("r.a", "s.c") if k in cols]
        roll = self.rng.random()
        if roll < 0.15:
            return self.window_query(source, cols, keys, where_sql), attribute
        if roll < 0.26:
            self.shape = "grouping_sets"
            return self.grouping_sets_query(source, cols, where_sql), attribute
        shape = self.rng.random()
        if shape < 0.45:  # grouped aggregation
            self.shape = "grouped"
            sql = self._grouped(source, cols, where_sql)
        elif shape < 0.6:  # global aggregation
            self.shape = "global"
            agg_col = self.rng.choice(cols)
            sql = (f"SELECT count(*) AS n, sum({agg_col}) AS t, max({agg_col}) AS m "
                   f"FROM {source}{where_sql}")
        elif shape < 0.75 and sketched == "r" and "JOIN" not in source:  # top-k by the key
            self.shape = "topk"
            k = self.rng.randint(1, 4)
            sql = f"SELECT r.a AS x0, r.b AS x1 FROM {source}{where_sql} ORDER BY r.a " \
                  f"{self.rng.choice(('ASC', 'DESC'))} LIMIT {k}"
        elif shape >= 0.9:  # a set operation of r and s (its own FROM and WHERE)
            self.shape = "set_operation"
            sql = self.set_operation()
            attribute = "r.a"
        else:  # projection
            self.shape = "projection"
            picked = [self.computed(cols) if self.rng.random() < 0.3 else c
                      for c in self.rng.sample(cols, self.rng.randint(1, min(3, len(cols))))]
            items = ", ".join(f"{c} AS x{i}" for i, c in enumerate(picked))
            sql = f"SELECT {items} FROM {source}{where_sql}"
        return sql, attribute

    def over(self, by: list[str], order: list[str], frame: str = "") -> str:
        """``OVER (PARTITION BY .. ORDER BY .. frame)``, each order key with a random
        direction and, sometimes, an explicit NULL placement; DuckDB's spelling (recorded)
        names the placement always: Spark puts NULLs first ascending, last descending,
        DuckDB last by default either way."""
        spark, duck = [], []
        if by:
            spark.append(f"PARTITION BY {', '.join(by)}")
            duck.append(f"PARTITION BY {', '.join(self._spell(b) for b in by)}")
        if order:
            s_keys, d_keys = [], []
            for key in order:
                direction = self.rng.choice(("", " ASC", " DESC"))
                nulls = "LAST" if direction == " DESC" else "FIRST"
                if self.rng.random() < 0.4:
                    nulls = self.rng.choice(("FIRST", "LAST"))
                    s_keys.append(f"{key}{direction} NULLS {nulls}")
                else:
                    s_keys.append(f"{key}{direction}")
                d_keys.append(f"{self._spell(key)}{direction} NULLS {nulls}")
            spark.append(f"ORDER BY {', '.join(s_keys)}")
            duck.append(f"ORDER BY {', '.join(d_keys)}")
        if frame:
            spark.append(frame)
            duck.append(frame)
        text = f"OVER ({' '.join(spark)})"
        self._duck[text] = f"OVER ({' '.join(duck)})"
        return text

    def window_query(self, source: str, cols: list[str], keys: list[str],
                     where_sql: str) -> str:
        """A window query: a partitioned top-k (rank, dense_rank or row_number cut in an
        outer query), aggregates over a window (the whole partition or the running frame
        of an ORDER BY), or windows over a grouped aggregation (``sum(sum(x)) OVER``).
        Orders that decide values are total: row_number and a ROWS frame order by the
        table keys last; rank, dense_rank and a RANGE frame are the same for any order
        of peers; a window over groups orders by the group keys or by an aggregate of a
        plain column that is not an AVG (DuckDB's AVG is a double, whose ties may differ
        from the engine's exact decimal)."""
        rng = self.rng
        kind = rng.random()
        if kind < 0.4:
            self.shape = "window_topk"
            func = rng.choice(("rank", "dense_rank", "row_number"))
            by = rng.sample(cols, rng.randint(0, 2))
            order = rng.sample([c for c in cols if c not in by], rng.randint(1, 2))
            if func == "row_number":
                order += [k for k in keys if k not in order]
            picked = rng.sample(cols, rng.randint(1, 3))
            items = ", ".join(f"{c} AS x{i}" for i, c in enumerate(picked))
            inner = (f"SELECT {items}, {func}() {self.over(by, order)} AS rk "
                     f"FROM {source}{where_sql}")
            cut = rng.choice((f"rk <= {rng.randint(1, 3)}", "rk = 1", f"rk < {rng.randint(2, 3)}"))
            if rng.random() < 0.25:  # a lossless aggregation above the cut
                return f"SELECT x0, count(*) AS n FROM ({inner}) t WHERE {cut} GROUP BY x0"
            return f"SELECT * FROM ({inner}) t WHERE {cut}"
        if kind < 0.75:
            self.shape = "window_aggregate"
            picked = rng.sample(cols, rng.randint(1, 2))
            items = [f"{c} AS x{i}" for i, c in enumerate(picked)]
            spec = self._window_spec(cols, keys)
            for i in range(rng.randint(1, 3)):
                if i and rng.random() < 0.4:
                    spec = self._window_spec(cols, keys)
                if rng.random() < 0.15:
                    call = "count(*)"
                else:
                    arg = self.computed(cols) if rng.random() < 0.15 else rng.choice(cols)
                    call = f"{rng.choice(('sum', 'avg', 'count', 'min', 'max'))}({arg})"
                items.append(f"{call} {self.over(*spec)} AS w{i}")
            if spec[1] and rng.random() < 0.2:
                items.append(f"{rng.choice(('rank', 'dense_rank'))}() "
                             f"{self.over(spec[0], spec[1])} AS rk")
            sql = f"SELECT {', '.join(items)} FROM {source}{where_sql}"
            if rng.random() < 0.15:  # a filter on a window's value (often unsafe: refused)
                return f"SELECT * FROM ({sql}) t WHERE w0 {rng.choice(CMP)} {self.lit()}"
            return sql
        self.shape = "window_over_group"
        g = rng.sample(cols, 2)
        value = rng.choice(cols)
        inner = f"{rng.choice(('sum', 'count', 'min', 'max'))}({value})"
        by = [g[0]] if rng.random() < 0.8 else []
        tail = [c for c in g if c not in by]  # unique among a partition's groups
        roll = rng.random()
        outer = rng.choice(("sum", "avg", "min", "max", "count"))
        if roll < 0.6:
            window = f"{outer}({inner}) {self.over(by, [])}"
        else:  # the running frame over the groups in a total order
            window = f"{outer}({inner}) {self.over(by, tail)}"
        items = [f"{g[0]} AS x0", f"{g[1]} AS x1", f"{inner} AS x2", f"{window} AS w0"]
        ranked = rng.random() < 0.5
        if ranked:
            func = rng.choice(("rank", "dense_rank", "row_number"))
            order = [inner] + (tail if func == "row_number" else [])
            items.append(f"{func}() {self.over(by, order)} AS rk")
        sql = f"SELECT {', '.join(items)} FROM {source}{where_sql} GROUP BY {g[0]}, {g[1]}"
        if ranked and rng.random() < 0.4:
            return f"SELECT * FROM ({sql}) t WHERE rk <= {rng.randint(1, 2)}"
        return sql

    def _window_spec(self, cols: list[str], keys: list[str]) -> tuple[list[str], list[str], str]:
        """(PARTITION BY, ORDER BY, frame) of a window aggregate."""
        rng = self.rng
        by = rng.sample(cols, rng.randint(0, 2))
        roll = rng.random()
        if roll < 0.35:  # the whole partition
            return by, [], ""
        order = rng.sample([c for c in cols if c not in by], rng.randint(1, 2))
        if roll < 0.75:  # the running RANGE frame (peers alike): any order
            frame = "RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW" \
                if rng.random() < 0.2 else ""
            return by, order, frame
        if roll < 0.9:  # the running ROWS frame: a total order
            return by, order + [k for k in keys if k not in order], \
                "ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW"
        return by, order, "ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING"

    def grouping_sets_query(self, source: str, cols: list[str], where_sql: str) -> str:
        """GROUP BY ROLLUP / CUBE / GROUPING SETS (/ WITH ROLLUP, a key beside a ROLLUP)
        with grouping() and grouping_id() in the select list, sometimes HAVING, ORDER BY
        every output column (with explicit NULL placement; no AVG then, DuckDB's being a
        double) and LIMIT, or a rank over the aggregates partitioned by grouping_id().
        DuckDB spells ``grouping_id()`` as ``grouping(k1, ..)`` of every key in their
        order of first appearance (Spark's bits: the first key highest)."""
        rng = self.rng
        keys = rng.sample(cols, rng.choice((1, 2, 2, 3)))
        if rng.random() < 0.15:
            keys[-1] = self.computed([c for c in cols if c.split(".")[-1] not in DECIMALS])
        n = len(keys)
        form = rng.randrange(6) if n > 1 else rng.randrange(3)
        if form == 0:
            group = f"ROLLUP({', '.join(keys)})"
        elif form == 1:
            group = f"CUBE({', '.join(keys)})"
        elif form == 2:
            subsets = [list(c) for size in range(n + 1) for c in combinations(range(n), size)]
            sets = rng.sample(subsets, rng.randint(1, min(4, len(subsets))))
            if not any(sets):  # a key must be named for the select list to show it
                sets.append(rng.choice(subsets[1:]))
            group = "GROUPING SETS (" + ", ".join(
                "(" + ", ".join(keys[i] for i in s) + ")" for s in sets) + ")"
            # the keys a set names, in their order of first appearance
            keys = [keys[i] for i in dict.fromkeys(i for s in sets for i in s)]
        elif form == 3:
            group = f"{keys[0]}, ROLLUP({', '.join(keys[1:])})"
        elif form == 4:
            group = f"{keys[0]}, CUBE({', '.join(keys[1:])})"
        else:
            group = f"{', '.join(keys)} WITH {rng.choice(('ROLLUP', 'CUBE'))}"
        duck_group = self._spell(group)
        if " WITH " in group:  # DuckDB has no WITH ROLLUP / WITH CUBE
            duck_group = f"{group.rsplit(' ', 1)[1]}({', '.join(self._spell(k) for k in keys)})"
        self._duck["grouping_id()"] = f"grouping({', '.join(self._spell(k) for k in keys)})"
        ordered = rng.random() < 0.2
        value = self.computed(cols) if rng.random() < 0.15 else rng.choice(cols)
        funcs = ("sum", "count", "min", "max") if ordered else ("sum", "count", "avg", "min",
                                                                  "max")
        outputs = list(keys) + [f"{f}({value})" for f in rng.sample(funcs, rng.randint(1, 2))]
        if rng.random() < 0.3:
            outputs.append("count(*)")
        outputs += [f"grouping({k})" for k in rng.sample(keys, rng.randint(0, len(keys)))]
        if rng.random() < 0.6:
            outputs.append("grouping_id()")
        if not ordered and rng.random() < 0.2:  # a rank of the groups of each set
            by = ["grouping_id()"]
            if len(keys) > 1 and rng.random() < 0.5:  # as TPC-DS q36 / q70 / q86 write it
                by = [f"grouping({keys[0]}) + grouping({keys[1]})",
                      f"CASE WHEN grouping({keys[1]}) = 0 THEN {keys[0]} END"]
            outputs.append(f"{rng.choice(('rank', 'dense_rank'))}() "
                           f"{self.over(by, [f'sum({rng.choice(cols)})'])}")
        roll = rng.random()
        having = ""
        if roll < 0.15:
            having = f"count(*) > {rng.randint(0, 2)}"
        elif roll < 0.3:
            # Spark resolves grouping() in HAVING only through its alias in the select list
            # (else UNRESOLVED_COLUMN or GROUPING_COLUMN_MISMATCH)
            grouping = f"grouping({rng.choice(keys)})"
            if grouping not in outputs:
                outputs.append(grouping)
            having = f"x{outputs.index(grouping)} = 1 OR sum({value}) {rng.choice(CMP)} " \
                     f"{self.lit()}"
        items = ", ".join(f"{o} AS x{i}" for i, o in enumerate(outputs))
        # Spark's grouping sets yield no row over an empty input, not even the empty set's
        # (it expands the input rows, then groups on the set's id too); DuckDB's yield the
        # empty set's grand total: its spelling keeps only groups of at least one row
        tail = f"GROUP BY {group}" + (f" HAVING {having}" if having else "")
        self._duck[tail] = f"GROUP BY {duck_group} HAVING " + (
            f"({self._spell(having)}) AND count(*) > 0" if having else "count(*) > 0")
        sql = f"SELECT {items} FROM {source}{where_sql} {tail}"
        if ordered:
            order = ", ".join(f"x{i} {rng.choice(('ASC', 'DESC'))} NULLS "
                              f"{rng.choice(('FIRST', 'LAST'))}" for i in range(len(outputs)))
            sql += f" ORDER BY {order} LIMIT {rng.randint(1, 5)}"
        return sql

    def set_operation(self) -> str:
        """``SELECT .. FROM r [WHERE ..] <op> SELECT .. FROM s [WHERE ..]`` (sometimes s
        first, sometimes a third operand in parentheses, sometimes ORDER BY all output
        columns with explicit NULL placement and LIMIT), one or two columns a side, the
        pairs of compatible types (BIGINT with BIGINT, DECIMAL(7, 2) with DECIMAL(7, 2))."""
        rng = self.rng
        pairs = rng.sample(SET_PAIRS, rng.randint(1, 2))

        def operand(table: str, side: int) -> str:
            # every operand names its columns (a column may be picked twice); the output
            # takes the first operand's names
            cols = [p[side] for p in pairs]
            items = ", ".join(f"{c} AS {'x' if side == first else 'y'}{i}"
                              for i, c in enumerate(cols))
            where = f" WHERE {self.predicate([f'{table}.{c}' for c in ALL_COLS[table]])}" \
                if rng.random() < 0.5 else ""
            return f"SELECT {items} FROM {table}{where}"

        first = 0 if rng.random() < 0.8 else 1  # the side of the first operand
        left, right = operand("r", 0), operand("s", 1)
        if first:
            left, right = right, left
        sql = f"{left} {rng.choice(SET_OPS)} {right}"
        if rng.random() < 0.2:
            sql = f"({sql}) {rng.choice(SET_OPS)} ({operand('r', 0)})"
        if rng.random() < 0.3:
            order = ", ".join(f"x{i} {rng.choice(('ASC', 'DESC'))} NULLS "
                              f"{rng.choice(('FIRST', 'LAST'))}" for i in range(len(pairs)))
            sql += f" ORDER BY {order} LIMIT {rng.randint(1, 4)}"
        return sql


SET_OPS = ("UNION ALL", "UNION", "INTERSECT", "INTERSECT ALL", "EXCEPT", "EXCEPT ALL")
# (r column, s column) pairs of equal types that a set operation may compare
SET_PAIRS = (("b", "d"), ("c", "e"), ("a", "c"), ("m", "n"), ("c", "d"), ("b", "e"))
ALL_COLS = {"r": R_COLS, "s": S_COLS}


def _small(rng: random.Random) -> int | None:
    return None if rng.random() < 0.15 else rng.randint(-3, 4)


def _decimal(rng: random.Random) -> decimal.Decimal | None:
    return None if rng.random() < 0.15 else decimal.Decimal(rng.choice(DECIMAL_VALUES))


def _rows(rng: random.Random, n: int, first: int) -> tuple[pa.Table, pa.Table]:
    nr, ns = rng.randint(0, n), rng.randint(0, n)
    r = pa.table({"a": pa.array(range(first, first + nr), pa.int64()),
                  "b": pa.array([_small(rng) for _ in range(nr)], pa.int64()),
                  "c": pa.array([_small(rng) for _ in range(nr)], pa.int64()),
                  "m": pa.array([_decimal(rng) for _ in range(nr)], DECIMAL_TYPE)})
    s = pa.table({"c": pa.array(range(first, first + ns), pa.int64()),
                  "d": pa.array([_small(rng) for _ in range(ns)], pa.int64()),
                  "e": pa.array([_small(rng) for _ in range(ns)], pa.int64()),
                  "n": pa.array([_decimal(rng) for _ in range(ns)], DECIMAL_TYPE)})
    return r, s


def _normalized(rows: list[tuple]) -> list[tuple]:
    """The rows, numbers as floats, sorted (by their values to 3 places, so values within
    ``_same``'s tolerance sort alike)."""
    out = [tuple(float(v) if isinstance(v, (float, int)) and not isinstance(v, bool)
                 and v is not None else (float(v) if hasattr(v, "as_tuple") else v)
                 for v in row) for row in rows]
    return sorted(out, key=lambda row: repr(tuple(
        round(v, 3) if isinstance(v, float) else v for v in row)))


def _same(ours: list[tuple], theirs: list[tuple]) -> bool:
    """Equal rows, numbers within 1e-9 relative or 1e-4 absolute: Spark's (and the
    engine's) AVG of a DECIMAL(p, s) is a DECIMAL(p + 4, s + 4) rounded half up, DuckDB's
    a DOUBLE (-0.16667 for a DECIMAL(2, 1) against -0.16666666666666666); the values drawn
    are multiples of 0.01 and 0.05, and the Spark oracle compares exactly."""
    if len(ours) != len(theirs):
        return False
    for a, b in zip(ours, theirs):
        for x, y in zip(a, b):
            if x is None or y is None:
                if x is not y:
                    return False
            elif abs(float(x) - float(y)) > max(1e-9 * abs(float(y)), AVG_ROUNDING):
                return False
    return True


class SparkOracle:
    """Spark running a query's text unchanged over temp views of the engine's Arrow tables,
    with ANSI mode off (a default session's semantics; the project's session has it on)."""

    def __init__(self, session: Any = None):
        if session is None:
            from imp_core.spark import SparkConfig, get_spark

            session = get_spark(SparkConfig(master="local[2]", driver_memory="2g"))
        self.spark = session

    def rows(self, sql: str, tables: dict[str, pa.Table], ansi: bool = False
             ) -> pa.Table | str:
        """Spark's rows for ``sql``, or (``ansi``) the error class it raises."""
        from imp_core.spark.tables import arrow_to_dataframe

        for name, data in tables.items():
            arrow_to_dataframe(self.spark, data).createOrReplaceTempView(name)
        before = self.spark.conf.get("spark.sql.ansi.enabled")
        self.spark.conf.set("spark.sql.ansi.enabled", "true" if ansi else "false")
        try:
            return self.spark.sql(sql).toArrow()
        except Exception as error:  # noqa: BLE001 - Spark's errors carry their class
            from imp_core.spark.errors import spark_error_class

            found = spark_error_class(error)
            if not ansi or found is None:
                raise
            return found
        finally:
            self.spark.conf.set("spark.sql.ansi.enabled", before)


def spark_difference(ours: pa.Table, theirs: pa.Table) -> str | None:
    """Why ``ours`` is not Spark's answer ``theirs`` (types, then rows), or None.

    Values are compared exactly (decimals as decimals), doubles within 1e-9 relative."""
    from imp_core.oracle.results import same_rows

    ours_t, theirs_t = [f.type for f in ours.schema], [f.type for f in theirs.schema]
    if ours_t != theirs_t:
        return f"types {ours_t} != Spark {theirs_t}"
    if not same_rows(ours, theirs.rename_columns(ours.column_names)):
        return f"result {ours.to_pylist()[:6]} != Spark {theirs.to_pylist()[:6]}"
    return None


def _duckdb_rows(sql: str, tables: dict[str, pa.Table]) -> list[tuple]:
    import duckdb

    con = duckdb.connect()
    con.execute("SET error_on_division_by_zero = false")  # x % 0 is NULL, as in Spark
    for name, data in tables.items():
        con.register(name, data)
    return _normalized(con.sql(sql).fetchall())


def check_case(sql: str, attribute: str, rng: random.Random, batches: int,
               report: FuzzReport, duckdb_sql: str | None = None,
               spark: SparkOracle | None = None, tag: dict[str, Any] | None = None,
               ansi: bool = False) -> None:
    """Register ``sql`` over fresh random tables and check it over ``batches`` batches.

    After registering and after every batch: sketch == recapture, and the result equals
    DuckDB's for ``duckdb_sql`` (``sql`` spelled for DuckDB; None: no DuckDB comparison).
    With ``spark``, also after registering and after the last batch: the result (types and
    values) equals Spark's for ``sql`` itself. ``tag`` (seed, case) goes into findings.
    ``ansi``: Spark's ANSI mode; the query must raise exactly when the oracles do."""
    from imp_core.embedded.api import Engine
    from imp_core.errors import ImpError, SqlRuntimeError
    from imp_core.oracle.reference import reference_capture

    eng = Engine(ansi=ansi)
    r, s = _rows(rng, 8, 0)
    eng.create_table("r", r, key="a")
    eng.create_table("s", s, key="c")
    report.queries += 1
    try:
        q = eng.register(sql, {attribute: rng.choice((1, 2, 4))}, force=True)
    except ImpError as exc:
        construct = getattr(exc, "construct", None) or str(exc).split(":")[0][:60]
        report.refused[f"{type(exc).__name__}: {construct}"] += 1
        return
    report.registered += 1
    report.ansi_cases += ansi
    if duckdb_sql is None:
        report.duckdb_skipped += 1

    def raised(fn) -> tuple[Any, str | None]:
        try:
            return fn(), None
        except SqlRuntimeError as error:
            return None, error.error_class

    def check(step: int) -> bool:
        tables = eng.tables()
        ref, ref_raised = raised(lambda: reference_capture(q.plan, tables, q.partitions))
        result, ours_raised = raised(q.result)
        problem = None
        if ours_raised is not None or ref_raised is not None:
            if ours_raised is None or ref_raised is None:
                problem = f"raised {ours_raised} != reference {ref_raised}"
            elif spark is not None and step in (0, batches):
                report.spark_checks += 1
                theirs = spark.rows(sql, tables, ansi=True)
                if not isinstance(theirs, str):
                    report.ansi_spark_divergences.append({
                        "sql": sql, **(tag or {}), "batch": step,
                        "engine": ours_raised, "spark": f"{theirs.num_rows} rows"})
            if problem is None:
                report.ansi_raised += 1
        elif q.sketch != ref.sketch:
            problem = f"sketch {q.sketch} != recapture {ref.sketch}"
        elif duckdb_sql is not None:
            theirs = _duckdb_rows(duckdb_sql, tables)
            ours = _normalized([tuple(row.values()) for row in result.to_pylist()])
            if not _same(ours, theirs):
                problem = f"result {ours[:6]} != DuckDB {theirs[:6]}"
        if problem is None and result is not None and spark is not None \
                and step in (0, batches):
            report.spark_checks += 1
            theirs = spark.rows(sql, tables, ansi=ansi)
            if isinstance(theirs, str) and ansi:
                report.ansi_spark_divergences.append({
                    "sql": sql, **(tag or {}), "batch": step, "engine": "rows",
                    "spark": theirs})
            else:
                problem = f"Spark raised {theirs}" if isinstance(theirs, str) \
                    else spark_difference(result, theirs)
        if problem:
            report.findings.append({"sql": sql, "attribute": attribute, **(tag or {}),
                                    "batch": step, "problem": problem})
        return problem is None

    if not check(0):
        return
    for step in range(1, batches + 1):
        table = rng.choice(("r", "s"))
        current = eng.table(table)
        kind = rng.choice(("insert", "delete", "mixed"))
        dels = None
        if kind != "insert" and current.num_rows:
            picks = rng.sample(range(current.num_rows), rng.randint(1, min(3, current.num_rows)))
            if kind == "delete" and rng.random() < 0.3:
                picks = list(range(current.num_rows))  # empty the table: groups vanish
            dels = current.take(pa.array(picks, pa.int64()))
        ins = None
        if kind != "delete":
            new_r, new_s = _rows(rng, 3, 100 * step)
            ins = new_r if table == "r" else new_s
        eng.apply(table, inserts=ins, deletes=dels)
        report.batches += 1
        if not check(step):
            return


def run_sql_fuzz(seed: int = 0, queries: int = 100, batches: int = 5,
                 seconds: float | None = None, oracle: str = "duckdb",
                 spark_session: Any = None, shapes: tuple[str, ...] | None = None
                 ) -> FuzzReport:
    """``queries`` random cases (or as many as fit in ``seconds``) from ``seed``.

    ``shapes``: check only the cases whose shape starts with one of these (e.g.
    ``("window", "grouping_sets")``); the others are drawn and skipped, not counted.

    ``oracle``: "duckdb" (every batch; queries dividing a decimal are not compared) or
    "spark" (DuckDB as well, and Spark running the text after registering and after the
    last batch; ``spark_session``: the session to use, default a local one)."""
    if oracle not in ("duckdb", "spark"):
        raise ValueError(f"oracle {oracle!r}: 'duckdb' or 'spark'")
    spark = SparkOracle(spark_session) if oracle == "spark" else None
    report = FuzzReport(oracle=oracle)
    t0 = time.perf_counter()
    for i in range(queries):
        if seconds is not None and time.perf_counter() - t0 > seconds:
            break
        rng = random.Random(seed * 1_000_003 + i)
        gen = QueryGen(rng)
        sql, attribute = gen.query()
        if shapes is not None and not gen.shape.startswith(shapes):
            continue
        tag = {"seed": seed, "case": i, "ansi": i % 4 == 3, "shape": gen.shape}
        report.shapes[gen.shape] += 1
        registered = report.registered
        try:
            check_case(sql, attribute, rng, batches, report, duckdb_sql=gen.duckdb_sql(sql),
                       spark=spark, tag=tag, ansi=i % 4 == 3)
        except Exception as exc:  # noqa: BLE001 - a crash is a finding, not the end
            report.findings.append({"sql": sql, "attribute": attribute, **tag,
                                    "problem": f"{type(exc).__name__}: {exc}"[:500]})
        report.shapes_registered[gen.shape] += report.registered > registered
    report.seconds = time.perf_counter() - t0
    return report
