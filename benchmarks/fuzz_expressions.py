"""Wide and deep expressions against ``imp serve`` in a process of its own (issue 50).

One registration used to kill the server (signal 11): an IN list of 15,000 values became
an Arrow filter 15,000 ORs deep. This fuzzer sends such shapes, and deeper ones, to a
real server started as a subprocess (``python -m services.cli serve``, local backend,
a fresh root holding a small ``lineitem``), so that a crash is seen (the process is
gone) and counted instead of ending the run, and the server is started again.

The shapes (``expression_cases``): IN and NOT IN lists of 10 to 100,000 values
(numbers, strings, over a column with NULLs), the issue's exact list of 1..14999 with
the sketch attribute named and chosen by the advisor, chains of OR and of AND, CASE
with thousands of branches, arithmetic chains (within and beyond the depth limit),
nested parentheses, function calls and NOTs. Every call must succeed or end with a
clear status (INVALID_ARGUMENT, RESOURCE_EXHAUSTED or UNIMPLEMENTED, with a message);
a query that registers is run with RunQuery with and without its sketch, and both
results must be DuckDB's for the same text over the same rows. A crash, another
status, an empty message or a wrong result is a finding.

Used by ``tests/integration/test_fuzz_expressions.py`` (a bounded run) and ``imp bench
fuzz --requests`` (the whole list).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import pyarrow as pa

TABLE = "lineitem"
CLEAR = frozenset({"INVALID_ARGUMENT", "RESOURCE_EXHAUSTED", "UNIMPLEMENTED"})
_GROUPED = "SELECT l_orderkey, sum(l_quantity) AS q FROM lineitem WHERE {} GROUP BY l_orderkey"
_NAMED = {f"{TABLE}.l_orderkey": 16}


@dataclass(frozen=True)
class ExpressionCase:
    """One query: ``shape`` and ``width`` (values or terms) say what it stresses;
    ``partitions`` as ``SketchClient.register`` takes them ("auto": the advisor)."""

    name: str
    shape: str
    width: int
    sql: str
    partitions: Mapping[str, int] | str


def lineitem(rows: int = 40_000, seed: int = 0) -> pa.Table:
    """A small ``lineitem``: 2 lines per order (keys 1..rows/2), a supplier column with
    NULLs (NOT IN over NULLs), a string column with NULLs."""
    rng = random.Random(seed)
    modes = ["AIR", "MAIL", "RAIL", "SHIP", "TRUCK", None]
    return pa.table({
        "l_orderkey": pa.array([i // 2 + 1 for i in range(rows)], pa.int64()),
        "l_linenumber": pa.array([i % 2 + 1 for i in range(rows)], pa.int32()),
        "l_quantity": pa.array([rng.randint(1, 50) for _ in range(rows)], pa.int64()),
        "l_suppkey": pa.array([None if i % 13 == 0 else rng.randint(1, 2000)
                               for i in range(rows)], pa.int64()),
        "l_shipmode": pa.array([modes[rng.randrange(len(modes))] for _ in range(rows)],
                               pa.string()),
    })


def _values(rng: random.Random, n: int, top: int) -> str:
    return ", ".join(str(rng.randint(1, top)) for _ in range(n))


def expression_cases(seed: int = 1, max_in: int = 100_000, draws: int = 6,
                     orders: int = 20_000) -> list[ExpressionCase]:
    """The fixed shapes, then ``draws`` random ones (sizes log-uniform up to ``max_in``
    values); ``orders``: the table's order keys (1..orders)."""
    rng = random.Random(seed)
    issue = _GROUPED.format(f"l_orderkey IN ({', '.join(map(str, range(1, 15_000)))})")
    cases = [
        ExpressionCase("issue_named", "in", 14_999, issue, _NAMED),
        ExpressionCase("issue_advisor", "in", 14_999, issue, "auto"),
        ExpressionCase("in_10", "in", 10, _GROUPED.format(
            f"l_orderkey IN ({_values(rng, 10, orders)})"), _NAMED),
        ExpressionCase(f"in_{max_in}", "in", max_in, _GROUPED.format(
            f"l_orderkey IN ({_values(rng, max_in, 2 * orders)})"), _NAMED),
        ExpressionCase("not_in_5000_nulls", "not_in", 5000, _GROUPED.format(
            f"l_suppkey NOT IN ({_values(rng, 5000, 2000)})"), _NAMED),
        ExpressionCase("in_strings_1000", "in", 1000, _GROUPED.format(
            "l_shipmode IN ({})".format(", ".join(
                f"'{rng.choice(['AIR', 'MAIL', 'RAIL'])}{i}'" for i in range(999))
                + ", 'MAIL'")), _NAMED),
        ExpressionCase("or_3000", "or", 3000, _GROUPED.format(" OR ".join(
            f"l_orderkey = {rng.randint(1, orders)}" for _ in range(3000))), _NAMED),
        ExpressionCase("or_mixed_2000", "or", 2000, _GROUPED.format(" OR ".join(
            f"l_orderkey = {rng.randint(1, orders)}" if i % 2 else
            f"l_suppkey = {rng.randint(1, 2000)}" for i in range(2000))), _NAMED),
        ExpressionCase("and_3000", "and", 3000, _GROUPED.format(" AND ".join(
            f"l_orderkey <> {rng.randint(1, orders)}" for _ in range(3000))), _NAMED),
        ExpressionCase("case_3000", "case", 3000,
                       "SELECT l_orderkey, sum(CASE " + " ".join(
                           f"WHEN l_quantity = {i} THEN {i % 7}" for i in range(3000))
                       + " ELSE -1 END) AS q FROM lineitem GROUP BY l_orderkey", _NAMED),
        ExpressionCase("arith_100", "arith", 100, "SELECT l_orderkey, sum(l_quantity"
                       + " + 1" * 100 + ") AS q FROM lineitem GROUP BY l_orderkey", _NAMED),
        ExpressionCase("arith_3000", "arith", 3000, "SELECT l_orderkey, sum(l_quantity"
                       + " + 1" * 3000 + ") AS q FROM lineitem GROUP BY l_orderkey", _NAMED),
        ExpressionCase("parens_30", "parens", 30, _GROUPED.format(
            "(" * 30 + "l_quantity > 3" + ")" * 30), _NAMED),
        ExpressionCase("parens_500", "parens", 500, _GROUPED.format(
            "(" * 500 + "l_quantity > 3" + ")" * 500), _NAMED),
        ExpressionCase("functions_30", "functions", 30, _GROUPED.format(
            "abs(" * 30 + "l_quantity - 20" + ")" * 30 + " > 5"), _NAMED),
        ExpressionCase("functions_300", "functions", 300, _GROUPED.format(
            "abs(" * 300 + "l_quantity - 20" + ")" * 300 + " > 5"), _NAMED),
        ExpressionCase("not_50", "not", 50, _GROUPED.format("NOT " * 50 + "l_quantity > 3"),
                       _NAMED),
    ]
    for i in range(draws):
        shape = rng.choice(["in", "not_in", "or", "and", "between"])
        n = int(10 ** rng.uniform(1, 5 if shape in ("in", "not_in") else 3.5))
        n = min(n, max_in)
        if shape in ("in", "not_in"):
            where = f"l_orderkey {'NOT ' if shape == 'not_in' else ''}IN " \
                    f"({_values(rng, n, 2 * orders)})"
        elif shape == "between":
            where = " OR ".join(f"l_orderkey BETWEEN {lo} AND {lo + rng.randint(0, 9)}"
                                for lo in (rng.randint(1, orders) for _ in range(n)))
        else:
            op, cmp = ("OR", "=") if shape == "or" else ("AND", "<>")
            where = f" {op} ".join(f"l_orderkey {cmp} {rng.randint(1, orders)}"
                                   for _ in range(n))
        cases.append(ExpressionCase(f"draw{i}_{shape}_{n}", shape, n, _GROUPED.format(where),
                                    rng.choice([_NAMED, "auto"])))
    return cases


# -- the server in a process of its own -------------------------------------------------------


class ServerProcess:
    """``imp serve`` as a subprocess on a free loopback port (local backend, no metrics,
    no supervisor: a crash must end the process, not be hidden by a restart)."""

    def __init__(self, root: Path, env: Mapping[str, str] | None = None,
                 log: Path | None = None):
        self.root = root
        self.extra = dict(env or {})
        self.log = log or root / "server.log"
        self.proc: subprocess.Popen | None = None
        self.address = ""
        self.starts = 0

    def start(self) -> ServerProcess:
        env = {k: v for k, v in os.environ.items() if not k.startswith("IMP_")}
        env.update(IMP_LISTEN="127.0.0.1:0", IMP_ROOT=str(self.root), IMP_BACKEND="local",
                   IMP_METRICS_LISTEN="off", IMP_SUPERVISE="off", IMP_GRACE_SECONDS="2",
                   **self.extra)
        log = open(self.log, "a")  # the child writes it until it ends
        self.proc = subprocess.Popen([sys.executable, "-m", "services.cli", "serve"],
                                     env=env, stdout=subprocess.PIPE, stderr=log, text=True)
        log.close()
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        if not line.startswith("imp: serving on "):
            self.stop()
            raise RuntimeError(f"imp serve did not start ({line!r}); see {self.log}")
        self.address = line.rsplit(" ", 1)[1].strip()
        self.starts += 1
        # whatever else it prints is read away: a full pipe would block the server
        threading.Thread(target=self.proc.stdout.read, daemon=True).start()
        return self

    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc else -1

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def exit_code(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# -- the run -------------------------------------------------------------------------------


@dataclass
class ExpressionFuzzReport:
    cases: int = 0
    calls: int = 0
    registered: int = 0
    statuses: Counter = field(default_factory=Counter)  # "Method STATUS" -> calls
    results_checked: int = 0
    crashes: int = 0
    server_starts: int = 0
    same_server: bool = True  # one process answered every call, and still does
    largest_in_registered: int = 0
    largest_in_seconds: float = 0.0
    register_seconds: dict[str, float] = field(default_factory=dict)
    registered_cases: list[str] = field(default_factory=list)
    refused_cases: dict[str, str] = field(default_factory=dict)  # case -> status
    findings: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"cases": self.cases, "calls": self.calls, "registered": self.registered,
                "statuses": dict(self.statuses.most_common()),
                "results_checked": self.results_checked, "crashes": self.crashes,
                "server_starts": self.server_starts, "same_server": self.same_server,
                "largest_in_registered": self.largest_in_registered,
                "largest_in_register_seconds": round(self.largest_in_seconds, 2),
                "register_seconds": {k: round(v, 2) for k, v in self.register_seconds.items()},
                "registered_cases": self.registered_cases, "refused_cases": self.refused_cases,
                "findings": self.findings, "seconds": round(self.seconds, 1)}


def _rows(table: pa.Table) -> list[tuple]:
    return sorted((tuple(r.values()) for r in table.to_pylist()), key=repr)


def duckdb_rows(sql: str, tables: Mapping[str, pa.Table]) -> list[tuple]:
    from benchmarks.fuzz_sql import duckdb_connection

    con = duckdb_connection()
    con.execute("SET max_expression_depth TO 1000000")  # DuckDB's own guard: 1,000
    for name, data in tables.items():
        con.register(name, data)
    return sorted(con.execute(sql).fetchall(), key=repr)


def run_expression_fuzz(cases: list[ExpressionCase], rows: int = 40_000, seed: int = 0,
                        env: Mapping[str, str] | None = None, root: Path | None = None,
                        progress: Callable[[str], None] | None = None
                        ) -> ExpressionFuzzReport:
    """Each case against one ``imp serve`` subprocess over a fresh root holding
    ``lineitem(rows)`` (``env``: more IMP_* settings; the SQL length limit is raised to
    fit the longest case); a server that died is counted and started again."""
    report = ExpressionFuzzReport(cases=len(cases))
    started = time.perf_counter()
    with _fresh_root(root) as where:
        from imp_core.storage import DeltaStore

        data = lineitem(rows, seed)
        DeltaStore(where).create_table(TABLE, data, key=("l_orderkey", "l_linenumber"))
        longest = max((len(c.sql) for c in cases), default=0)
        settings = {"IMP_MAX_SQL_CHARS": str(max(100_000, 2 * longest)),
                    "IMP_SPARK_DRIVER_MEMORY": "2g", **dict(env or {})}
        server = ServerProcess(where, settings).start()
        first_pid = server.pid
        try:
            for case in cases:
                if progress:
                    progress(f"{case.name}: {case.shape}, {case.width:,} wide, "
                             f"{len(case.sql):,} characters")
                _one_case(case, server, data, report)
                if not server.alive():
                    report.crashes += 1
                    report.same_server = False
                    report.findings.append({"case": case.name, "finding": "the server died",
                                            "exit_code": server.exit_code(),
                                            "log": str(server.log)})
                    server.start()
            report.same_server = report.same_server and server.alive() \
                and server.pid == first_pid and _healthy(server)
        finally:
            report.server_starts = server.starts
            server.stop()
    report.seconds = time.perf_counter() - started
    return report


@contextmanager
def _fresh_root(path: Path | None) -> Iterator[Path]:
    """``path`` (made if missing), else a temporary folder removed afterwards."""
    if path is not None:
        path.mkdir(parents=True, exist_ok=True)
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="imp-fuzz-expr-") as tmp:
        yield Path(tmp)


def _healthy(server: ServerProcess) -> bool:
    from services.client import SketchClient

    with SketchClient(server.address, retries=0) as client:
        try:
            return client.health() == "SERVING"
        except Exception:  # noqa: BLE001 - not answering is the answer
            return False


def _one_case(case: ExpressionCase, server: ServerProcess, data: pa.Table,
              report: ExpressionFuzzReport) -> None:
    """Register ``case``, run it with and without its sketch, drop it."""
    from services.client import RemoteError, SketchClient

    def call(method: str, fn: Callable[[], Any]) -> tuple[Any, RemoteError | None]:
        report.calls += 1
        try:
            out = fn()
        except RemoteError as error:
            report.statuses[f"{method} {error.code}"] += 1
            if not server.alive():
                return None, error  # counted by the caller
            if error.code not in CLEAR or not error.message.strip():
                report.findings.append({"case": case.name, "method": method,
                                        "finding": "not a clear status",
                                        "status": error.code, "message": error.message[:500]})
            return None, error
        report.statuses[f"{method} OK"] += 1
        return out, None

    with SketchClient(server.address, retries=0, timeout=600) as client:
        t0 = time.perf_counter()
        info, error = call("RegisterQuery", lambda: client.register(
            case.name, case.sql, partitions=case.partitions))
        seconds = time.perf_counter() - t0
        report.register_seconds[case.name] = seconds
        if info is None:
            report.refused_cases[case.name] = error.code if error is not None else "?"
            return
        report.registered += 1
        report.registered_cases.append(case.name)
        if case.shape == "in" and case.width > report.largest_in_registered:
            report.largest_in_registered, report.largest_in_seconds = case.width, seconds
        expected = duckdb_rows(case.sql, {TABLE: data})
        for use_sketch in (False, True):
            run, _ = call("RunQuery", lambda u=use_sketch: client.run_query(
                query=case.name, use_sketch=u))
            if run is None:
                continue
            report.results_checked += 1
            got = _rows(run.rows)
            if got != expected:
                report.findings.append({
                    "case": case.name, "method": "RunQuery", "use_sketch": use_sketch,
                    "finding": "rows differ from DuckDB's", "rows": len(got),
                    "expected_rows": len(expected),
                    "first_difference": next((repr((a, b)) for a, b in zip(got, expected)
                                              if a != b), "")})
        call("DropQuery", lambda: client.drop(case.name))
