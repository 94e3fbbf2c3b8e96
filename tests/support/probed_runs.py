"""Queries maintained through ``DataLayer`` as the query actors wire them, from a Delta
store's change feed, with every join side probed in the data layer: the tables, the random
changes and the check against the reference evaluator that the data-layer tests share."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from imp_core.engine.operators.base import TableDelta
from imp_core.engine.pipeline import EngineOptions
from imp_core.oracle.reference import reference_capture
from imp_core.query.data_layer import DataLayer, join_sides
from imp_core.query.driver import QueryDriver
from imp_core.query.prepare import StoreTables, prepare_query
from imp_core.storage import ChangeReader, DeltaStore

FACTS = pa.schema([("id", pa.int64()), ("k", pa.int64()), ("v", pa.int64())])
DIMS = pa.schema([("dk", pa.int64()), ("w", pa.int64()), ("label", pa.string())])
JOIN_SQL = ("SELECT k, sum(v) AS s, max(w) AS mw FROM facts JOIN dims ON k = dk "
            "WHERE w > 1 GROUP BY k HAVING sum(v) > 20")
TAGS = pa.schema([("tk", pa.int64()), ("z", pa.int64())])
CHAIN_SQL = ("SELECT k, sum(v) AS s, min(z) AS mz FROM facts JOIN dims ON k = dk "
             "JOIN tags ON w = tk GROUP BY k")
TOPK_SQL = ("SELECT k, v, w, label FROM facts JOIN dims ON k = dk "
            "ORDER BY v DESC, k LIMIT 3")


def tables_for(rng: np.random.Generator, n: int = 60) -> dict[str, pa.Table]:
    facts = pa.table({"id": np.arange(n), "k": rng.integers(0, 12, n),
                      "v": rng.integers(0, 20, n)}, schema=FACTS)
    dims = pa.table({"dk": rng.integers(0, 14, 20), "w": rng.integers(0, 6, 20),
                     "label": [f"l{i % 5}" for i in range(20)]}, schema=DIMS)
    tags = pa.table({"tk": rng.integers(0, 8, 10), "z": rng.integers(0, 50, 10)}, schema=TAGS)
    return {"facts": facts, "dims": dims, "tags": tags}


def store_of(path, tables: dict[str, pa.Table]) -> DeltaStore:
    store = DeltaStore(path)
    store.create_table("facts", tables["facts"], key=["id"])
    store.create_table("dims", tables["dims"])  # keyless: duplicate rows allowed
    store.create_table("tags", tables["tags"])
    return store


class ProbedRun:
    """One query maintained through the data layer from the store's change feed."""

    def __init__(self, store: DeltaStore, sql: str, options: EngineOptions,
                 probe_all: bool = True, place=None, layer: DataLayer | None = None):
        self.store = store
        self.prepared = prepare_query(sql, StoreTables(store), {"facts.k": 4})
        plan = self.prepared.plan
        # ``place``: plan root -> the placement (else every join side, or none)
        self.placement = place(plan.root) if place is not None else frozenset(
            s for s, *_ in join_sides(plan.root)) if probe_all else frozenset()
        self.layer = layer if layer is not None else DataLayer(store)
        self.driver = QueryDriver.start(plan, self.prepared.partitions, options, self.layer,
                                        self.placement)
        self.reader = ChangeReader(store)
        versions = dict(self.prepared.versions)
        self.driver.step(None, versions, {t: TableDelta.inserts(store.read(t, v))
                                          for t, v in versions.items()})

    @property
    def wiring(self):
        return self.driver.wiring

    @property
    def versions(self) -> dict[str, int]:
        return self.driver.versions

    def maintain(self) -> None:
        target = {t: self.store.version(t) for t in self.versions}
        changes = {t: self.reader.changes(t, self.versions[t], v,
                                          self.prepared.scan_specs.get(t))
                   for t, v in target.items() if v > self.versions[t]}
        self.driver.step(self.versions, target, changes)

    def check(self) -> None:
        tables = {t: self.store.read(t, v) for t, v in self.versions.items()}
        ref = reference_capture(self.prepared.plan, tables, self.prepared.partitions)
        assert self.driver.sketch() == ref.sketch
        assert self.wiring.pipeline.result().to_counter() == ref.bag.items


def random_change(store: DeltaStore, rng: np.random.Generator, salt: int) -> None:
    if rng.random() < 0.6:
        data = store.read("facts")
        dels = data.take(pa.array(rng.choice(data.num_rows, size=min(4, data.num_rows),
                                             replace=False)))
        ins = pa.table({"id": np.arange(salt, salt + 5), "k": rng.integers(0, 12, 5),
                        "v": rng.integers(0, 20, 5)}, schema=FACTS)
        store.apply("facts", inserts=ins, deletes=dels)
    else:
        data = store.read("dims")
        dels = data.take(pa.array(rng.choice(data.num_rows, size=min(3, data.num_rows),
                                             replace=False)))
        # strings as another writer's batch may carry them (e.g. read from a change
        # feed): the files of such a commit store string_view
        ins = pa.table({"dk": pa.array(rng.integers(0, 14, 3)),
                        "w": pa.array(rng.integers(0, 6, 3)),
                        "label": pa.array(["new", "l1", "x"], pa.string_view())})
        store.apply("dims", inserts=ins, deletes=dels)
