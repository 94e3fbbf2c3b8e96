"""Spark Connect: a real local Connect server (its own JVM, ``python -m
imp_core.spark.connect_server --port 0``: it picks a free loopback port) and a client session from
``SparkConfig(connect_url="sc://127.0.0.1:PORT")``. Capture, a sketch-filtered query, delta
extraction, the state bootstrap and join sides served by Spark run through it and equal
the embedded session's results.

A Connect session switches pyspark's functions to Connect mode for the whole process, so
the embedded results are computed first, and the module restores classic mode at the end
(later modules start a new embedded session).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from state_canon import canonical_state, first_difference
from workload_data import synthetic_tables

from imp_core.embedded.maintainer import Maintainer
from imp_core.oracle.results import same_rows
from imp_core.storage import DeltaStore
from imp_core.storage.delta_store import WriteOptions
from imp_core.workloads.queries import load_query
from imp_core.workloads.schemas import TABLES

pytestmark = [pytest.mark.spark, pytest.mark.integration]

REPO = Path(__file__).resolve().parents[2]
QUERY = "q_having_2"
JOIN_QUERY = "q_join"
PARTS = {"t5000g.a": 16}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    # small row groups on data clustered on the sketch column: the sketch lets scans skip
    store = DeltaStore(tmp_path_factory.mktemp("connect"), WriteOptions(max_row_group_size=100))
    tables = synthetic_tables()
    for name in ("t5000g", "tjoinhelp"):
        info = TABLES[name]
        store.create_table(name, tables[name], key=info.key, domains=info.domains,
                           cluster_by=("a",) if name == "t5000g" else ())
    return store


def _batch(store, rng, salt):
    data = store.read("t5000g")
    dels = data.take(pa.array(rng.choice(data.num_rows, size=20, replace=False)))
    ins = data.take(pa.array(rng.integers(0, data.num_rows, size=20), type=pa.int64()))
    ins = ins.set_column(0, ins.schema.field("id"), pa.array(np.arange(salt, salt + 20)))
    store.apply("t5000g", inserts=ins, deletes=dels)


def _run_all(spark, store, versions: dict[str, int], delta_range: tuple[int, int]) -> dict:
    """Everything the module compares, computed with ``spark`` for the tables at
    ``versions`` (the delta pulled for ``delta_range`` of t5000g)."""
    from imp_core.spark import capture, register_tables, run_query
    from imp_core.spark.deltas import SparkDeltaSource

    m = Maintainer(store, spark=spark, bootstrap="spark")
    q = m.register(QUERY, load_query(QUERY).sql, PARTS)
    assert q.versions == versions
    register_tables(spark, {t: store.file_uris(t, v) for t, v in versions.items()})
    plain = run_query(spark, q.plan)
    used = run_query(spark, q.plan, q.sketch)
    delta = SparkDeltaSource(store, spark).changes("t5000g", *delta_range, q.scan_specs["t5000g"])
    rows = zip(*[c.to_pylist() for c in delta.rows.columns])
    return {"maintainer": m, "query": q, "sketch": q.sketch,
            "capture": capture(spark, q.plan, q.partitions),
            "plain": plain, "used": used, "state": canonical_state(q.pipeline),
            "delta": Counter(dict(Counter(zip(rows, delta.weights.tolist()))))}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A Spark Connect server for this module; it starts (a JVM, tens of seconds) while
    the embedded results are computed. The server picks its port (one found free here
    could be taken by another test's process before the JVM binds it)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("SPARK_CONNECT_MODE_ENABLED", None)
    errors = tmp_path_factory.mktemp("connect-server") / "stderr.log"
    with open(errors, "w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "imp_core.spark.connect_server", "--port", "0"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
            text=True, cwd=REPO, env=env)
    ready: list[str] = []
    reader = threading.Thread(target=lambda: ready.append(proc.stdout.readline()),
                              daemon=True)
    reader.start()
    try:
        yield reader, ready, errors
    finally:
        proc.stdin.close()  # the server stops Spark and exits
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def embedded(store, server):
    """The embedded session's results, before any Connect session exists."""
    from imp_core.spark import get_spark

    v0 = store.version("t5000g")
    _batch(store, np.random.default_rng(1), 80_000_000)
    versions = {"t5000g": store.version("t5000g")}
    return _run_all(get_spark(), store, versions, (v0, versions["t5000g"]))


@pytest.fixture(scope="module")
def connect(server, embedded):
    """A client session of the module's Spark Connect server."""
    from imp_core.spark import SparkConfig, get_spark, stop_spark

    reader, ready, errors = server
    reader.join(timeout=240)
    if not (ready and ready[0].startswith("READY ")):
        pytest.fail("the Spark Connect server did not start; its stderr ends with:\n"
                    + errors.read_text()[-4000:])
    port = int(ready[0].split()[1])
    try:
        yield get_spark(SparkConfig(connect_url=f"sc://127.0.0.1:{port}"))
    finally:
        stop_spark()
        os.environ.pop("SPARK_CONNECT_MODE_ENABLED", None)  # back to classic pyspark


@pytest.fixture(scope="module")
def through_connect(connect, store, embedded):
    q = embedded["query"]
    v1 = q.versions["t5000g"]
    return _run_all(connect, store, dict(q.versions), (v1 - 1, v1))


def test_the_session_is_a_connect_client(connect):
    from imp_core.spark.session import current_config, is_connect_session

    assert is_connect_session(connect)
    assert current_config().is_connect
    assert connect.sql("SELECT 1 AS one").toArrow().column("one").to_pylist() == [1]


def test_capture_through_connect(through_connect, embedded):
    assert through_connect["capture"] == embedded["capture"] == embedded["sketch"]


def test_sketch_filtered_query_through_connect(through_connect, embedded):
    got, want = through_connect, embedded
    assert same_rows(got["used"].rows, want["used"].rows)
    assert same_rows(got["plain"].rows, want["plain"].rows)
    assert same_rows(got["used"].rows, got["plain"].rows)
    # under Connect the executed plan is out of reach: the scans' row counts come from
    # the query's execution info, summed over all tables
    assert got["plain"].rows_read["*"] == want["plain"].rows_read["t5000g"] > 0
    assert got["used"].rows_read["*"] == want["used"].rows_read["t5000g"]
    assert got["used"].rows_read["*"] < got["plain"].rows_read["*"]


def test_delta_extraction_through_connect(through_connect, embedded):
    assert through_connect["delta"] == embedded["delta"]
    assert sum(through_connect["delta"].values()) > 0


def test_bootstrap_through_connect(through_connect, embedded, store):
    got, want = through_connect["state"], embedded["state"]
    assert got == want, first_difference(got, want)
    q = through_connect["query"]
    assert q.bootstrap == "spark" and q.bootstrap_run.spark_queries > 0
    # ... and maintenance from deltas pulled through Connect stays exact
    from imp_core.spark.deltas import SparkDeltaSource

    m = through_connect["maintainer"]
    m.source = SparkDeltaSource(store, m.spark())
    _batch(store, np.random.default_rng(2), 81_000_000)
    m.maintain(QUERY)
    assert q.sketch == m.reference_sketch(QUERY)


def test_join_sides_served_through_connect(connect, store):
    from imp_core.spark.joins import SparkJoinSide

    wq = load_query(JOIN_QUERY)
    m = Maintainer(store, join_memory_rows=0, spark=connect)
    q = m.register(JOIN_QUERY, wq.sql, PARTS)
    sides = [s for op in q.pipeline.operators if op.kind == "join"
             for s in (op.left, op.right)]
    assert sides and all(isinstance(s, SparkJoinSide) for s in sides)
    assert q.sketch == m.reference_sketch(JOIN_QUERY)
    _batch(store, np.random.default_rng(3), 82_000_000)
    # and one row that surely has a partner: a probe the Bloom filter cannot rule out
    row = store.read("t5000g").slice(0, 1)
    partner = store.read("tjoinhelp").column("ttid")[0].as_py()
    for name, value in (("id", 82_500_000), ("a", partner), ("b", 1)):
        i = row.schema.get_field_index(name)
        row = row.set_column(i, row.schema.field(name),
                             pa.array([value]).cast(row.schema.field(name).type))
    store.apply("t5000g", inserts=row)
    m.maintain(JOIN_QUERY)
    assert q.sketch == m.reference_sketch(JOIN_QUERY)
    assert sum(s.spark_calls for s in sides) > 0
