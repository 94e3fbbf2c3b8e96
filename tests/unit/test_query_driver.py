"""The query driver every front uses (``imp_core.query.driver``): its placement rule, the
first-state feed cut to the scan spec, the versions that move only with the state, and
the fronts that no longer step a pipeline by hand."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from imp_core.engine.operators.base import TableDelta
from imp_core.engine.pipeline import EngineOptions
from imp_core.oracle.reference import reference_capture
from imp_core.query.data_layer import DataLayer, join_sides
from imp_core.query.driver import (
    QueryDriver,
    first_changes,
    place_sides,
    read_columns,
)
from imp_core.query.prepare import StoreTables, prepare_query
from imp_core.storage import DeltaStore
from imp_core.storage.scan_spec import restrict_delta

ROOT = Path(__file__).resolve().parents[2]
FACTS = pa.schema([("id", pa.int64()), ("k", pa.int64()), ("v", pa.int64()),
                   ("note", pa.string())])
DIMS = pa.schema([("dk", pa.int64()), ("w", pa.int64())])
SQL = ("SELECT k, sum(v) AS s FROM facts JOIN dims ON k = dk WHERE v > 3 AND w < 5 "
       "GROUP BY k HAVING sum(v) > 10")


@pytest.fixture
def store(tmp_path) -> DeltaStore:
    rng = np.random.default_rng(7)
    s = DeltaStore(tmp_path / "tables")
    s.create_table("facts", pa.table({"id": np.arange(200), "k": rng.integers(0, 20, 200),
                                      "v": rng.integers(0, 10, 200),
                                      "note": [f"n{i}" for i in range(200)]}, schema=FACTS),
                   key=["id"])
    s.create_table("dims", pa.table({"dk": np.arange(20), "w": rng.integers(0, 8, 20)},
                                    schema=DIMS))
    return s


def _prepared(store: DeltaStore):
    return prepare_query(SQL, StoreTables(store), {"facts.k": 4})


def test_first_changes_are_the_tables_cut_to_the_scan_spec(store):
    prepared = _prepared(store)
    fed = first_changes(store, prepared.versions, prepared.scan_specs)
    for t, v in prepared.versions.items():
        spec = prepared.scan_specs.get(t)
        whole = restrict_delta(TableDelta.inserts(store.read(t, v)), spec)
        assert fed[t].rows.equals(whole.rows), t
        assert np.array_equal(fed[t].weights, whole.weights)
    # the selection v > 3 was applied while reading, and "note" never read
    facts = prepared.scan_specs["facts"]
    assert read_columns(facts, FACTS) is not None and "note" not in read_columns(facts, FACTS)
    assert fed["facts"].rows.num_rows == sum(1 for v in store.read("facts")["v"].to_pylist()
                                             if v > 3)


def test_a_driven_bootstrap_and_steps_equal_the_reference(store):
    prepared = _prepared(store)
    driver = QueryDriver.start(prepared.plan, prepared.partitions, EngineOptions(),
                               DataLayer(store))
    assert driver.versions == {}
    driver.step(None, prepared.versions, first_changes(store, prepared.versions,
                                                       prepared.scan_specs))
    assert driver.versions == prepared.versions
    store.apply("facts", inserts=pa.table({"id": [500, 501], "k": [3, 3], "v": [9, 9],
                                           "note": ["a", "b"]}, schema=FACTS))
    target = {t: store.version(t) for t in driver.versions}
    from imp_core.storage import ChangeReader

    reader = ChangeReader(store)
    changes = {t: reader.changes(t, driver.versions[t], v, prepared.scan_specs.get(t))
               for t, v in target.items() if v > driver.versions[t]}
    driver.step(driver.versions, target, changes)
    assert driver.context.before == prepared.versions and driver.context.after == target
    ref = reference_capture(prepared.plan, {t: store.read(t, v) for t, v in target.items()},
                            prepared.partitions)
    assert driver.sketch() == ref.sketch


def test_a_failed_step_moves_neither_state_nor_versions(store):
    prepared = _prepared(store)
    driver = QueryDriver.start(prepared.plan, prepared.partitions, EngineOptions())
    driver.step(None, prepared.versions, first_changes(store, prepared.versions,
                                                       prepared.scan_specs))
    before_sketch, before = driver.sketch(), dict(driver.versions)
    bad = {"facts": TableDelta(pa.table({"nope": [1]}), np.ones(1, np.int64))}
    with pytest.raises(Exception):  # noqa: B017 - any error: what matters is what stays
        driver.step(before, {t: v + 1 for t, v in before.items()}, bad)
    assert driver.versions == before and driver.sketch() == before_sketch


def test_snapshot_and_restore_carry_the_versions(store):
    prepared = _prepared(store)
    a = QueryDriver.start(prepared.plan, prepared.partitions, EngineOptions())
    a.step(None, prepared.versions, first_changes(store, prepared.versions, prepared.scan_specs))
    blob = a.snapshot({"query": "q"})
    b = QueryDriver.start(prepared.plan, prepared.partitions, EngineOptions())
    meta = b.restore(blob)
    assert meta["query"] == "q" and b.versions == a.versions and b.sketch() == a.sketch()


def test_placement_rule(store):
    prepared = _prepared(store)
    plan, pset, versions = prepared.plan, prepared.partitions, prepared.versions
    data = DataLayer(store)
    every = frozenset(sid for sid, *_ in join_sides(plan.root))
    assert every
    # a query that may have several shards probes nothing, whatever the limits
    assert place_sides(plan, pset, versions, data, shards=2, memory_rows=0) == frozenset()
    assert place_sides(plan, pset, versions, None, memory_rows=0) == frozenset()
    # sides over the row limit are probed (footer bounds within it need no Spark)
    assert place_sides(plan, pset, versions, data, memory_rows=0) == every
    assert place_sides(plan, pset, versions, data, memory_rows=10**6) == frozenset()
    # no budget: nothing probed; with one, the estimate's choice wins over the footers
    assert place_sides(plan, pset, versions, data) == frozenset()
    one = frozenset(list(every)[:1])
    assert place_sides(plan, pset, versions, data, budget_bytes=1, estimated=one) == one
    assert place_sides(plan, pset, versions, data, budget_bytes=1) == \
        data.place(plan, pset, versions, 1)


def test_no_front_steps_a_pipeline_by_hand():
    """Every ``VersionContext.begin`` of a maintained pipeline is the driver's: the fronts
    (embedded engine, maintainer, shard workers, the Spark bootstrap of the service)
    call ``QueryDriver.step`` and never pair ``begin`` and ``apply`` themselves."""
    begin = re.compile(r"\.context\.begin\(|\bcontext\.begin\(")
    found = [str(p.relative_to(ROOT)) for pkg in ("imp_core", "imp_actors", "services")
             for p in (ROOT / pkg).rglob("*.py")
             if begin.search(p.read_text()) and p.name != "driver.py"]
    assert found == []
