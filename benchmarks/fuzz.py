"""``imp bench fuzz``: the SQL fuzzer and the request fuzzer, longer than the suite runs.

The SQL part (``benchmarks.fuzz_sql``) needs nothing but the embedded engine and DuckDB;
with Spark as the oracle (``oracle="spark"``, or ``IMP_FUZZ_ORACLE=spark`` in the
environment of ``imp bench fuzz``) a local Spark session also runs each query's text,
ANSI off, after registering and after the last batch;
the request part (``benchmarks.fuzz_requests``) starts a real server (in-process
coordinator on the ``local`` backend, gRPC on a free loopback port, a bearer token)
over a fresh root holding ``t1000g``, registers one query, and sends mutated requests;
then (``benchmarks.fuzz_expressions``) wide and deep expressions go to ``imp serve``
started as a subprocess over a root holding a small ``lineitem``, so a crash is counted
(and the server started again) rather than ending the run: IN lists up to 100,000
values, the issue's 15,000, OR / AND chains, CASE, arithmetic, nesting.
The report holds the counts (queries × batches, requests by method and status, the
expression cases by status, crashes, the largest IN list that registered and its time)
and every finding with what replays it.
"""

from __future__ import annotations

import os
import secrets
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import environment

QUERY_SQL = "SELECT a, sum(b) AS s FROM t1000g GROUP BY a HAVING sum(b) > 10"
ENV_ORACLE = "IMP_FUZZ_ORACLE"  # the SQL fuzzer's oracle when not given: duckdb or spark


def _log(progress: bool, text: str) -> None:
    if progress:
        print(text, file=sys.stderr, flush=True)


def service_state(coordinator: Any) -> tuple:
    """What a refused request must leave unchanged: the queries (name, seq, versions,
    shards, fragments) and the table versions."""
    queries = tuple((q.name, q.sketch_seq, tuple(sorted(q.versions.items())), q.shards,
                     q.sketch_fragments) for q in coordinator.queries())
    tables = tuple((t, coordinator.ctx.store.version(t)) for t in sorted(coordinator.tables()))
    return queries, tables


def run_request_part(requests: int, seed: int, progress: bool) -> dict[str, Any]:
    from benchmarks.fuzz_requests import base_requests, run_request_fuzz
    from imp_actors.coordinator import Coordinator
    from imp_actors.runtime_config import EvictionPolicy, RuntimeConfig
    from imp_core.storage import DeltaStore
    from imp_core.workloads.schemas import TABLES
    from imp_core.workloads.synthetic import generate_groups_table
    from services.server import SketchServer
    from services.server_config import ServerConfig

    with tempfile.TemporaryDirectory(prefix="imp-fuzz-") as tmp:
        root = Path(tmp)
        info = TABLES["t1000g"]
        DeltaStore(root).create_table("t1000g", generate_groups_table(1000, 3000, seed=seed),
                                      key=info.key, domains=info.domains)
        token = secrets.token_hex(16)
        (root / "tokens").write_text(token + "\n")
        config = RuntimeConfig(root=str(root), backend="local", warm_actors=0,
                               eviction=EvictionPolicy(max_live_actors=None, idle_seconds=None))
        with Coordinator(config).start() as coordinator:
            server = SketchServer(ServerConfig(listen="127.0.0.1:0",
                                               auth_token_file=str(root / "tokens")),
                                  coordinator).start()
            try:
                from services.client import SketchClient

                def ensure() -> None:
                    if "groups" not in {q.name for q in coordinator.queries()}:
                        with SketchClient(server.address, token=token) as client:
                            client.register("groups", QUERY_SQL, partitions={"t1000g.a": 8})

                ensure()
                base = base_requests(coordinator.ctx.store.read("t1000g"), "groups", QUERY_SQL)
                _log(progress, f"request fuzz: {requests} mutated requests to "
                               f"{server.address}")
                report = run_request_fuzz(server.address, token,
                                          lambda: service_state(coordinator), base,
                                          rounds=requests, seed=seed, ensure=ensure)
            finally:
                server.stop(0)
    return report.to_json()


def run_expression_part(seed: int, progress: bool) -> dict[str, Any]:
    """Every shape of ``benchmarks.fuzz_expressions`` (and 12 random draws) against an
    ``imp serve`` subprocess."""
    from benchmarks.fuzz_expressions import expression_cases, run_expression_fuzz

    cases = expression_cases(seed=seed, max_in=100_000, draws=12)
    _log(progress, f"expression fuzz: {len(cases)} wide and deep queries to imp serve "
                   "in a process of its own")
    return run_expression_fuzz(cases, seed=seed,
                               progress=(lambda s: _log(True, f"  {s}")) if progress
                               else None).to_json()


def run_fuzz_bench(sql_cases: int, batches: int, seconds: float | None, requests: int,
                   seed: int, progress: bool = True, oracle: str | None = None
                   ) -> dict[str, Any]:
    """Both fuzzers; ``oracle`` of the SQL part: "duckdb" or "spark" (default: the
    ``IMP_FUZZ_ORACLE`` environment variable, else "duckdb")."""
    from benchmarks.fuzz_sql import run_sql_fuzz

    oracle = oracle or os.environ.get(ENV_ORACLE, "").strip().lower() or "duckdb"
    t0 = time.perf_counter()
    report: dict[str, Any] = {"environment": environment(), "parameters": {
        "sql_cases": sql_cases, "batches": batches, "seconds": seconds,
        "requests": requests, "seed": seed, "oracle": oracle}}
    if sql_cases:
        _log(progress, f"SQL fuzz: up to {sql_cases} random queries × {batches} batches"
                       + (f", at most {seconds:g} s" if seconds else "")
                       + f", oracle {oracle}")
        report["sql"] = run_sql_fuzz(seed=seed, queries=sql_cases, batches=batches,
                                     seconds=seconds, oracle=oracle).to_json()
    if requests:
        report["requests"] = run_request_part(requests, seed, progress)
        report["expressions"] = run_expression_part(seed, progress)
    findings = sum(len(report.get(part, {}).get("findings", ()))
                   for part in ("sql", "requests", "expressions"))
    expressions = report.get("expressions", {})
    report["summary"] = {
        "sql_queries": report.get("sql", {}).get("queries", 0),
        "sql_registered": report.get("sql", {}).get("registered", 0),
        "sql_batches": report.get("sql", {}).get("batches", 0),
        "sql_spark_checks": report.get("sql", {}).get("spark_checks", 0),
        "sql_ansi_cases": report.get("sql", {}).get("ansi_cases", 0),
        "sql_sketch_instance_checks": report.get("sql", {}).get("sketch_instance_checks", 0),
        "sql_ansi_raised": report.get("sql", {}).get("ansi_raised", 0),
        "sql_ansi_spark_divergences": len(
            report.get("sql", {}).get("ansi_spark_divergences", ())),
        "sql_shapes": report.get("sql", {}).get("shapes", {}),
        "requests": report.get("requests", {}).get("requests", 0),
        "expression_cases": expressions.get("cases", 0),
        "expression_registered": expressions.get("registered", 0),
        "expression_crashes": expressions.get("crashes", 0),
        "largest_in_registered": expressions.get("largest_in_registered", 0),
        "largest_in_register_seconds": expressions.get("largest_in_register_seconds", 0.0),
        "findings": findings,
        "seconds": round(time.perf_counter() - t0, 1),
    }
    report["results"] = report["summary"]
    return report
