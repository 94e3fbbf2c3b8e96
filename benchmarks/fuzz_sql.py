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
import functools
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from benchmarks.fuzz_grammar import DECIMAL_VALUES, QueryGen

DECIMAL_TYPE = pa.decimal128(7, 2)
AVG_ROUNDING = 1e-4  # DuckDB's AVG of a decimal is a double, Spark's rounded to s + 4 places


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
    # checks of a case whose attribute the safety analysis accepts: the query over the
    # sketch instance (the tables cut to the sketch's fragments) gave the full result
    sketch_instance_checks: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"queries": self.queries, "registered": self.registered,
                "batches": self.batches, "refused": dict(self.refused.most_common()),
                "oracle": self.oracle, "duckdb_skipped": self.duckdb_skipped,
                "spark_checks": self.spark_checks, "ansi_cases": self.ansi_cases,
                "ansi_raised": self.ansi_raised,
                "ansi_spark_divergences": self.ansi_spark_divergences,
                "shapes": self.shapes_json(),
                "sketch_instance_checks": self.sketch_instance_checks,
                "findings": self.findings, "seconds": round(self.seconds, 2)}

    def shapes_json(self) -> dict[str, dict[str, int]]:
        """Cases drawn and registered by shape (``QueryGen.shape``), the most drawn first."""
        return {shape: {"drawn": n, "registered": self.shapes_registered[shape]}
                for shape, n in self.shapes.most_common()}


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


@functools.cache
def _duckdb_database() -> Any:
    import duckdb

    return duckdb.connect()


def duckdb_connection() -> Any:
    """A DuckDB connection of its own (no registered tables, default settings): a cursor
    of one in-memory database per process, about 2 ms against about 30 ms to open a
    database (a cursor's registered Arrow tables and SET options are its own; tables made
    by CREATE TABLE would be shared)."""
    return _duckdb_database().cursor()


def _duckdb_rows(sql: str, tables: dict[str, pa.Table]) -> list[tuple]:
    con = duckdb_connection()
    con.execute("SET error_on_division_by_zero = false")  # x % 0 is NULL, as in Spark
    for name, data in tables.items():
        con.register(name, data)
    return _normalized(con.sql(sql).fetchall())


def check_case(sql: str, attribute: str, rng: random.Random, batches: int,
               report: FuzzReport, duckdb_sql: str | None = None,
               spark: SparkOracle | None = None, tag: dict[str, Any] | None = None,
               ansi: bool = False) -> None:
    """Register ``sql`` over fresh random tables and check it over ``batches`` batches.

    After registering and after every batch: sketch == recapture, the result equals
    DuckDB's for ``duckdb_sql`` (``sql`` spelled for DuckDB; None: no DuckDB comparison),
    and, when the safety analysis accepts the attribute (the case registers with force,
    so it need not), the query over the sketch instance gives the full result.
    With ``spark``, also after registering and after the last batch: the result (types and
    values) equals Spark's for ``sql`` itself. ``tag`` (seed, case) goes into findings.
    ``ansi``: Spark's ANSI mode; the query must raise exactly when the oracles do."""
    from imp_core.embedded.api import Engine
    from imp_core.errors import ImpError, SqlRuntimeError
    from imp_core.oracle.reference import reference_capture, restrict_to_sketch

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
    safe = all(v.safe for v in q.verdicts)  # registered with force: it may be unsafe
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
        elif safe and _over_sketch(ref, tables) != ref.rows():
            problem = "the attribute is accepted as safe, but the query over the sketch " \
                      "instance differs from the full result"
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

    def _over_sketch(ref: Any, tables: dict[str, pa.Table]) -> Any:
        report.sketch_instance_checks += 1
        cut, cut_raised = raised(lambda: reference_capture(
            q.plan, restrict_to_sketch(tables, ref.sketch), q.partitions))
        return cut_raised if cut is None else cut.rows()

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
