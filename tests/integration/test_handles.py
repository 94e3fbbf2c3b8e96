"""Handles that stay true (issue 50, item 4): the object ``register`` returns answers what
``query(name)`` answers for the query's whole life, across adaptive re-partitions, and
fails loudly once the query is dropped, in every embedded front.

The Maintainer's handle is checked after every skewed batch against the registry's
object and against the non-incremental reference (``reference_capture`` on the tables
at the handle's versions, on its current ranges): sketch, versions, ranges and result
rows. Before the fix the handle kept the first ranges and a sketch at table version 1
while the registry's query moved on."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from imp_core.embedded.api import Engine
from imp_core.embedded.maintainer import Maintainer
from imp_core.errors import DroppedQueryError, QueryExistsError, UnknownQueryError
from imp_core.oracle.reference import reference_capture
from imp_core.storage import DeltaStore

pytestmark = [pytest.mark.integration]

DOMAIN = 100_000
QUERIES = {
    "topk": "SELECT k, a, v FROM t ORDER BY a DESC LIMIT 5",
    "filter": "SELECT a, count(*) AS n FROM t WHERE a >= 500 AND a < 900 GROUP BY a",
    "having": "SELECT a, sum(v) AS s FROM t GROUP BY a HAVING sum(v) > 1500",
}


def _rows(rng: np.random.Generator, n: int, start: int, hot: float = 0.0) -> pa.Table:
    """``n`` rows with keys from ``start``; a share ``hot`` of them land in 1% of a's
    domain (the lowest fragment overflows), the rest uniformly."""
    a = rng.integers(0, DOMAIN, n)
    k = int(hot * n)
    a[:k] = rng.integers(0, DOMAIN // 100, k)
    return pa.table({"k": np.arange(start, start + n), "a": a,
                     "v": rng.integers(0, 1000, n)})


def _answers(q) -> dict:
    """Everything a caller reads of a maintained query's handle."""
    return {"sketch": q.sketch, "versions": dict(q.versions), "partitions": q.partitions,
            "bounds": q.bounds("t"), "ranges": q.sketch.ranges("t"),
            "rows": q.pipeline.result().to_counter(), "repartitions": list(q.repartitions),
            "history": len(q.history)}


def test_a_handle_held_across_repartitions_answers_what_the_registry_answers(tmp_path):
    rng = np.random.default_rng(7)
    store = DeltaStore(tmp_path)
    store.create_table("t", _rows(rng, 4000, 0), key="k", domains={"v": (0, None)})
    m = Maintainer(store)
    held = {name: m.register(name, sql, {"t.a": 16}) for name, sql in QUERIES.items()}
    first = {name: q.bounds("t") for name, q in held.items()}
    start = 10_000
    for _ in range(12):
        store.apply("t", inserts=_rows(rng, 400, start, hot=0.6))
        start += 400
        for name, handle in held.items():
            m.maintain(name)
            assert handle is m.query(name)
            assert _answers(handle) == _answers(m.query(name))
            # ... and what it answers is right: the reference at its versions, on its ranges
            assert handle.versions == {"t": store.version("t")}
            tables = {t: store.read(t, v) for t, v in handle.versions.items()}
            ref = reference_capture(handle.plan, tables, handle.partitions)
            assert handle.sketch == ref.sketch == m.reference_sketch(name)
            assert handle.pipeline.result().to_counter() == ref.bag.items
    for name, handle in held.items():
        # several re-partitions happened, and the handle carries the newest ranges
        assert len(handle.repartitions) >= 2, name
        assert handle.bounds("t") != first[name]
        assert handle.counts["t"].partition == handle.partitions.partitions[0]


def test_a_dropped_querys_handle_fails_clearly(tmp_path):
    rng = np.random.default_rng(3)
    store = DeltaStore(tmp_path)
    store.create_table("t", _rows(rng, 1000, 0), key="k", domains={"v": (0, None)})
    m = Maintainer(store)
    handle = m.register("q", QUERIES["filter"], {"t.a": 8})
    with pytest.raises(QueryExistsError, match="already registered"):
        m.register("q", QUERIES["topk"], {"t.a": 8})  # refused: the handle stays true
    assert not handle.dropped and handle.plan.sql == QUERIES["filter"]
    m.drop("q")
    assert handle.dropped and handle.name == "q"
    for read in (lambda: handle.sketch, lambda: handle.versions, lambda: handle.partitions,
                 lambda: handle.bounds("t"), lambda: handle.pipeline, lambda: handle.history,
                 handle.explain):
        with pytest.raises(DroppedQueryError, match="'q' was dropped"):
            read()
    with pytest.raises(UnknownQueryError):
        m.query("q")
    with pytest.raises(UnknownQueryError):
        m.drop("q")
    # the name is free again; the new query has a new handle, the old one stays dropped
    store.apply("t", inserts=_rows(rng, 50, 5000))
    again = m.register("q", QUERIES["topk"], {"t.a": 8})
    assert again is m.query("q") and again is not handle
    assert again.sketch == m.reference_sketch("q")
    with pytest.raises(DroppedQueryError):
        handle.sketch  # noqa: B018


def test_engine_handles_follow_the_registry_and_fail_once_dropped():
    """The in-memory ``Engine`` never re-partitions: its handle is the registry's object;
    dropped, it answers nothing (before: it kept answering from its last state)."""
    eng = Engine()
    rng = np.random.default_rng(5)
    eng.create_table("t", _rows(rng, 500, 0), key="k")
    handle = eng.register(QUERIES["filter"], {"t.a": 8}, name="q")
    eng.insert("t", _rows(rng, 100, 1000, hot=0.5))
    assert handle is eng.query("q") and handle.sketch == handle.reference().sketch
    before = len(handle.history)
    eng.drop("q")
    for read in (lambda: handle.sketch, lambda: handle.result_rows(), lambda: handle.plan,
                 lambda: handle.bounds("t"), lambda: handle.reference(),
                 lambda: handle.history, handle.explain):
        with pytest.raises(DroppedQueryError, match="'q' was dropped"):
            read()
    eng.insert("t", _rows(rng, 10, 2000))  # maintains no dropped query
    assert before == 1 and handle.dropped
    with pytest.raises(UnknownQueryError):
        eng.query("q")
