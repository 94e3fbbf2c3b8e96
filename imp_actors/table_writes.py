"""Commits through the coordinator: one update batch becomes one table version, and its
changes go straight into the change feed.

Invariants: commits are serialized (one writer lock), so the feed records each version's
changes right after the store committed them; a refused batch commits nothing and
records nothing; the recorded changes are exactly the rows the store accepted, deletions
with weight -1 and insertions with +1.
"""

from __future__ import annotations

import threading
from typing import Callable, TypeVar

import numpy as np
import pyarrow as pa

from imp_actors.context import RuntimeContext
from imp_core.engine.operators.base import TableDelta

T = TypeVar("T")


class TableWriter:
    def __init__(self, ctx: RuntimeContext):
        self.ctx = ctx
        self._lock = threading.Lock()

    def commit(self, table: str, inserts: pa.Table | None = None,
               deletes: pa.Table | None = None,
               updates: tuple[pa.Table, pa.Table] | None = None) -> tuple[int, int, int]:
        """Commit deletions (and updates' old rows) and insertions (and updates' new rows)
        as one version of ``table``; returns (version, rows inserted, rows deleted)."""
        if updates is not None:
            old, new = updates
            deletes = old if deletes is None else pa.concat_tables(
                [deletes, old.select(deletes.schema.names)], promote_options="permissive")
            inserts = new if inserts is None else pa.concat_tables(
                [inserts, new.select(inserts.schema.names)], promote_options="permissive")
        n_ins = 0 if inserts is None else inserts.num_rows
        with self._lock:  # a keyed table's deletions by key become the stored rows
            deletes = self.ctx.store.complete_deletes(table, deletes)
        n_del = 0 if deletes is None else deletes.num_rows
        with self._lock:
            version = self.ctx.store.apply(table, inserts=inserts, deletes=deletes)
            if n_ins + n_del:
                self.ctx.feed.record(table, version, self._changes(table, inserts, deletes))
        self.ctx.probe.note(table, version)
        self.ctx.counters["updates"] += 1
        return version, n_ins, n_del

    def rewrite(self, table: str, write: Callable[[], T]) -> T:
        """Run ``write`` (a commit of ``table`` that changes no data, e.g. a layout
        rewrite) between the service's own commits, and note the version it made."""
        with self._lock:
            out = write()
            self.ctx.probe.note(table, self.ctx.store.version(table))
        return out

    def _changes(self, table: str, inserts: pa.Table | None, deletes: pa.Table | None
                 ) -> TableDelta:
        """The change feed of a version just committed: the store accepted exactly these
        rows (deleted rows equal stored ones), so they are it."""
        from imp_core.storage.batches import conform, plain_strings

        schema = self.ctx.feed.schema(table)
        parts, weights = [], []
        for batch, w, what in ((deletes, -1, "delete batch"), (inserts, 1, "insert batch")):
            if batch is not None and batch.num_rows:
                parts.append(plain_strings(conform(batch, schema, table, what)))
                weights.append(np.full(batch.num_rows, w, dtype=np.int64))
        return TableDelta(pa.concat_tables(parts), np.concatenate(weights))
