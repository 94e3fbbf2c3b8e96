"""Random SQL over the supported grammar, maintained over random update streams.

Each case draws two small tables ``r(a, b, c)`` (key ``a``) and ``s(c, d, e)`` (key
``c``) of small integers with NULLs and duplicates, a query of the planner's grammar
(selections with AND/OR/IN/BETWEEN/IS NULL, inner joins, grouped and global aggregates
with HAVING, top-k, EXISTS / NOT EXISTS / IN / NOT IN and scalar subqueries, outer
joins, COUNT(DISTINCT)), registers it through the embedded ``Engine`` with a sketch on
a key column, and applies random insert / delete / mixed batches. After registering and
after every batch the maintained sketch must equal the non-incremental recapture and
the maintained result DuckDB's result of the same SQL over the same tables.

A finding is a mismatch or an exception that is not a refusal (``ImpError``: the
construct is unsupported, or the attribute unsafe); refusals are counted by kind. Used
by ``tests/unit/test_fuzz_sql.py`` (a bounded run) and ``imp bench fuzz`` (longer).
"""

from __future__ import annotations

import random
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

R_COLS = ("a", "b", "c")
S_COLS = ("c", "d", "e")
CMP = ("=", "<>", "<", "<=", ">", ">=")


@dataclass
class FuzzReport:
    """Counts of one run and its findings (each with the SQL and the seed to replay)."""

    queries: int = 0
    registered: int = 0
    batches: int = 0
    refused: Counter = field(default_factory=Counter)
    findings: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"queries": self.queries, "registered": self.registered,
                "batches": self.batches, "refused": dict(self.refused.most_common()),
                "findings": self.findings, "seconds": round(self.seconds, 2)}


class QueryGen:
    """Random queries of the supported grammar (``rng``: a ``random.Random``)."""

    def __init__(self, rng: random.Random):
        self.rng = rng

    def lit(self) -> str:
        return str(self.rng.randint(0, 4))

    def atom(self, cols: list[str]) -> str:
        col = self.rng.choice(cols)
        kind = self.rng.random()
        if kind < 0.5:
            return f"{col} {self.rng.choice(CMP)} {self.lit()}"
        if kind < 0.65:
            return f"{col} IS {'NOT ' if self.rng.random() < 0.5 else ''}NULL"
        if kind < 0.8:
            return f"{col} IN ({', '.join(self.lit() for _ in range(self.rng.randint(1, 3)))})"
        if kind < 0.9:
            lo = self.rng.randint(0, 3)
            return f"{col} BETWEEN {lo} AND {lo + self.rng.randint(0, 2)}"
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

    def query(self) -> tuple[str, str]:
        """(SQL, sketch attribute)."""
        source, cols, sketched = self.from_clause()
        where = []
        if self.rng.random() < 0.6:
            where.append(self.predicate(cols))
        if source == "r" and self.rng.random() < 0.4:
            where.append(self.subquery_atom())
        where_sql = f" WHERE {' AND '.join(where)}" if where else ""
        attribute = "r.a" if sketched == "r" else "s.c"
        shape = self.rng.random()
        if shape < 0.45:  # grouped aggregation
            group = self.rng.choice(cols)
            agg_col = self.rng.choice(cols)
            if self.rng.random() < 0.15:
                aggs = [f"count(DISTINCT {agg_col}) AS x1"]
            else:
                aggs = [f"{f}({agg_col}) AS x{i + 1}" for i, f in enumerate(
                    self.rng.sample(("sum", "count", "avg", "min", "max"),
                                    self.rng.randint(1, 3)))]
                if self.rng.random() < 0.3:
                    aggs.append("count(*) AS xn")
            having = ""
            if self.rng.random() < 0.4:
                having = f" HAVING sum({agg_col}) {self.rng.choice(CMP)} {self.lit()}"
            sql = (f"SELECT {group} AS x0, {', '.join(aggs)} FROM {source}{where_sql} "
                   f"GROUP BY {group}{having}")
        elif shape < 0.6:  # global aggregation
            agg_col = self.rng.choice(cols)
            sql = (f"SELECT count(*) AS n, sum({agg_col}) AS t, max({agg_col}) AS m "
                   f"FROM {source}{where_sql}")
        elif shape < 0.75 and sketched == "r" and "JOIN" not in source:  # top-k by the key
            k = self.rng.randint(1, 4)
            sql = f"SELECT r.a AS x0, r.b AS x1 FROM {source}{where_sql} ORDER BY r.a " \
                  f"{self.rng.choice(('ASC', 'DESC'))} LIMIT {k}"
        else:  # projection
            picked = self.rng.sample(cols, self.rng.randint(1, min(3, len(cols))))
            items = ", ".join(f"{c} AS x{i}" for i, c in enumerate(picked))
            sql = f"SELECT {items} FROM {source}{where_sql}"
        return sql, attribute


def _small(rng: random.Random) -> int | None:
    return None if rng.random() < 0.15 else rng.randint(0, 4)


def _rows(rng: random.Random, n: int, first: int) -> tuple[pa.Table, pa.Table]:
    nr, ns = rng.randint(0, n), rng.randint(0, n)
    r = pa.table({"a": pa.array(range(first, first + nr), pa.int64()),
                  "b": pa.array([_small(rng) for _ in range(nr)], pa.int64()),
                  "c": pa.array([_small(rng) for _ in range(nr)], pa.int64())})
    s = pa.table({"c": pa.array(range(first, first + ns), pa.int64()),
                  "d": pa.array([_small(rng) for _ in range(ns)], pa.int64()),
                  "e": pa.array([_small(rng) for _ in range(ns)], pa.int64())})
    return r, s


def _normalized(rows: list[tuple]) -> list[tuple]:
    out = [tuple(float(v) if isinstance(v, (float, int)) and not isinstance(v, bool)
                 and v is not None else (float(v) if hasattr(v, "as_tuple") else v)
                 for v in row) for row in rows]
    return sorted(out, key=repr)


def _same(ours: list[tuple], theirs: list[tuple]) -> bool:
    if len(ours) != len(theirs):
        return False
    for a, b in zip(ours, theirs):
        for x, y in zip(a, b):
            if x is None or y is None:
                if x is not y:
                    return False
            elif abs(float(x) - float(y)) > 1e-9 * max(1.0, abs(float(y))):
                return False
    return True


def check_case(sql: str, attribute: str, rng: random.Random, batches: int,
               report: FuzzReport) -> None:
    """Register ``sql`` over fresh random tables and check it over ``batches`` batches."""
    import duckdb

    from imp_core.embedded.api import Engine
    from imp_core.errors import ImpError
    from imp_core.oracle.reference import reference_capture

    eng = Engine()
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

    def check(step: int) -> bool:
        ref = reference_capture(q.plan, eng.tables(), q.partitions)
        con = duckdb.connect()
        for name, data in eng.tables().items():
            con.register(name, data)
        theirs = _normalized(con.sql(sql).fetchall())
        ours = _normalized([tuple(row.values()) for row in q.result().to_pylist()])
        problem = None
        if q.sketch != ref.sketch:
            problem = f"sketch {q.sketch} != recapture {ref.sketch}"
        elif not _same(ours, theirs):
            problem = f"result {ours[:6]} != DuckDB {theirs[:6]}"
        if problem:
            report.findings.append({"sql": sql, "attribute": attribute, "batch": step,
                                    "problem": problem})
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
                 seconds: float | None = None) -> FuzzReport:
    """``queries`` random cases (or as many as fit in ``seconds``) from ``seed``."""
    report = FuzzReport()
    t0 = time.perf_counter()
    for i in range(queries):
        if seconds is not None and time.perf_counter() - t0 > seconds:
            break
        rng = random.Random(seed * 1_000_003 + i)
        sql, attribute = QueryGen(rng).query()
        try:
            check_case(sql, attribute, rng, batches, report)
        except Exception as exc:  # noqa: BLE001 - a crash is a finding, not the end
            report.findings.append({"sql": sql, "attribute": attribute, "case": i,
                                    "problem": f"{type(exc).__name__}: {exc}"[:500]})
    report.seconds = time.perf_counter() - t0
    return report
