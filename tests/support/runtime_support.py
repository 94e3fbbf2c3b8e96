"""Shared pieces of the actor-runtime tests: table stores, random update batches and the
non-incremental oracle (recapture by the reference evaluator at a sketch's versions)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
from workload_data import synthetic_tables, tpch_tables

from imp_actors.coordinator import Coordinator
from imp_actors.runtime_config import EvictionPolicy, RuntimeConfig
from imp_actors.types import QuerySpec, SketchVersion
from imp_core.oracle.reference import reference_capture
from imp_core.sketch.sketch import Sketch
from imp_core.storage import DeltaStore
from imp_core.workloads.queries import load_query
from imp_core.workloads.schemas import TABLES


def fill_store(root: Path, suites: tuple[str, ...] = ("synthetic",)) -> None:
    """Create the workload tables of ``suites`` in a table store at ``root``."""
    store = DeltaStore(root)
    for suite in suites:
        tables = tpch_tables() if suite == "tpch" else synthetic_tables()
        for name, data in tables.items():
            if name in store.tables():
                continue
            info = TABLES[name]
            store.create_table(name, data, key=info.key, domains=info.domains)


def make_config(root: Path, backend: str = "local", **changes) -> RuntimeConfig:
    base = dict(root=str(root), backend=backend, poll_seconds=0.2, warm_actors=0,
                lease_seconds=1.0,
                eviction=EvictionPolicy(max_live_actors=None, idle_seconds=None))
    base.update(changes)
    return RuntimeConfig(**base)


def workload_spec(name: str, query: str, fragments: int = 16, **kw) -> QuerySpec:
    wq = load_query(query)
    parts = {f"{t}.{c}": fragments for t, c in wq.sketch}
    return QuerySpec(name, wq.sql, partitions=parts, **kw)


def reference_sketch(c: Coordinator, name: str, version: SketchVersion) -> Sketch:
    """The oracle: recapture from scratch at the version's table versions, on the
    version's own ranges (adaptive ranges may have given the query new ones since)."""
    q = c.ctx.queries.get(name)
    tables = {t: c.ctx.store.read(t, v) for t, v in version.versions.items()}
    return reference_capture(q.plan, tables, version.sketch.partitions).sketch


def assert_spark_exact(c: Coordinator, name: str) -> None:
    """The query's fresh sketch equals a recapture by Spark at the same table versions."""
    sv = c.get_sketch(name)
    fm, _ = c.recapture(name, sv.versions, sv.sketch.partitions)
    assert sv.sketch == fm, (name, sorted(sv.fragments), sorted(fm.fragments))


def random_batch(store: DeltaStore, table: str, rng: np.random.Generator, size: int,
                 salt: int) -> tuple[pa.Table, pa.Table]:
    """(inserts, deletes) of about ``size`` changed rows: deletions of stored rows, the
    same rows re-inserted with a non-key column's values permuted among them (updates),
    and, for single-column keys, copies of stored rows under fresh keys."""
    data = store.read(table)
    key = TABLES[table].key or ()
    n_del = min(max(size // 3, 1), data.num_rows // 2)
    dels = data.take(pa.array(rng.choice(data.num_rows, n_del, replace=False), pa.int64()))
    updated = dels
    movable = [f.name for f in dels.schema
               if f.name not in key and (pa.types.is_integer(f.type)
                                         or pa.types.is_decimal(f.type))]
    if movable and n_del > 1:
        col = movable[int(rng.integers(0, len(movable)))]
        i = dels.schema.get_field_index(col)
        perm = pa.array(rng.permutation(n_del), pa.int64())
        updated = dels.set_column(i, dels.schema.field(col), dels.column(col).take(perm))
    parts = [updated.slice(0, n_del // 2)]
    n_new = size - n_del - n_del // 2
    if len(key) == 1 and n_new > 0:
        new = data.take(pa.array(rng.integers(0, data.num_rows, n_new), pa.int64()))
        i = new.schema.get_field_index(key[0])
        fresh = pa.array(np.arange(salt, salt + n_new)).cast(new.schema.field(key[0]).type)
        parts.append(new.set_column(i, new.schema.field(key[0]), fresh))
    return pa.concat_tables(parts), dels
