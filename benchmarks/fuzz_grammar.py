"""The SQL fuzzer's grammar (``QueryGen``): random queries over ``r(a, b, c, m)`` and
``s(c, d, e, n)`` in Spark's dialect, with their DuckDB spelling.

What it draws is listed in ``benchmarks.fuzz_sql``'s docstring. Invariants: every query
is one the planner's grammar holds or refuses by name (an ``ImpError``); its DuckDB
spelling keeps Spark's meaning (NULL placement, ``pmod``, zero divisors, grouping ids,
no grand total over an empty input) or is None where DuckDB cannot match it.
"""

from __future__ import annotations

import random
import re
from itertools import combinations

R_COLS = ("a", "b", "c", "m")
S_COLS = ("c", "d", "e", "n")
DECIMALS = ("m", "n")  # DECIMAL(7, 2); the other columns are BIGINT
CMP = ("=", "<>", "<", "<=", ">", ">=")
DECIMAL_VALUES = ("-2.50", "-1.00", "0.00", "0.75", "1.00", "1.50", "3.30", "4.00")
QUOTIENT_LITERALS = ("0.5", "1", "1.5", "-0.5", "1.1", "0.25", "2")


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
        # correlated: a plain column (a moved value flips only the rows between its old
        # and new value) or an expression of the outer row against a per-key aggregate
        outer = self.rng.choice(("r.b", "r.m", "r.c + r.a"))
        agg = self.rng.choice(("avg", "max", "min", "sum", "count"))
        scaled = self.rng.choice(("", " * 2", " + 1"))
        key = self.rng.choice(("r.c", "r.b"))
        return (f"{outer} {self.rng.choice(CMP)} (SELECT {agg}(e){scaled} FROM s "
                f"WHERE s.d = {key}{inner})")

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

    def _twice(self, grouped: str) -> str:
        """``grouped`` as a CTE read twice: joined with itself, or its groups compared
        with their average."""
        if self.rng.random() < 0.5:
            return (f"WITH g AS ({grouped}) SELECT x.x0 AS x0, x.x1 AS x1, y.x1 AS y1 "
                    "FROM g x JOIN g y ON x.x0 = y.x0")
        return (f"WITH g AS ({grouped}) SELECT x0, x1 FROM g WHERE x1 "
                f"{self.rng.choice(CMP)} (SELECT avg(x1) FROM g)")

    def _scalar_item(self) -> str:
        """An uncorrelated scalar subquery over s for the SELECT list (several over s
        are merged into one aggregation)."""
        agg = self.rng.choice(("count(*)", "count(e)", "avg(e)", "sum(d)", "min(e)",
                               "max(d)", "count(e) * 2 + coalesce(max(e), 1)"))
        where = f" WHERE {self.predicate([f's.{c}' for c in S_COLS])}" \
            if self.rng.random() < 0.8 else ""
        return f"(SELECT {agg} FROM s{where})"

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
            if self.rng.random() < 0.2:  # its groups read twice: one shared operator
                self.shape = "cte_twice"
                sql = self._twice(sql)
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
            if source == "r" and self.rng.random() < 0.35:
                self.shape = "scalar_list"
                items += "".join(f", {self._scalar_item()} AS q{i}"
                                 for i in range(self.rng.randint(2, 4)))
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
        double) and LIMIT, or a rank over the aggregates partitioned by grouping_id()
        (half of those ORDER BY grouping_id() DESC, then the keys, and LIMIT: the grand
        total first, as TPC-DS q36 / q70 / q86 sort).
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
        first_total = False
        if not ordered and rng.random() < 0.2:  # a rank of the groups of each set
            # half of them sort as TPC-DS q36 / q70 / q86 do: the grand total first
            first_total = rng.random() < 0.5
            if first_total and "grouping_id()" not in outputs:
                outputs.append("grouping_id()")
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
        elif first_total:  # grouping_id() and the keys tell every row apart
            order = ", ".join([f"x{outputs.index('grouping_id()')} DESC"] + [
                f"x{i} {rng.choice(('ASC', 'DESC'))} NULLS {rng.choice(('FIRST', 'LAST'))}"
                for i in range(len(keys))])
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
