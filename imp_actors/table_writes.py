"""Commits through the coordinator: one update batch becomes one table version, and its
changes go straight into the change feed.

Invariants: commits are serialized (one writer lock), so the feed records each version's
changes right after the store committed them; a refused batch commits nothing and
records nothing; the recorded changes are exactly the rows the store accepted, deletions
with weight -1 and insertions with +1. A call with an idempotency key is committed at most
once (``imp_core.storage.calls``): its key is looked up in the table's log under the
writer lock before anything is read or written, and a server whose store lease was taken
over commits nothing.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable, TypeVar

import numpy as np
import pyarrow as pa

from imp_actors.context import RuntimeContext
from imp_core.engine.operators.base import TableDelta
from imp_core.errors import IdempotencyKeyError
from imp_core.process.failpoints import failpoint
from imp_core.storage.calls import AppliedCall, CallTag, is_concurrent_call

T = TypeVar("T")


@dataclass(frozen=True)
class Committed:
    """What a commit did: the table version, rows inserted and deleted; ``replayed``: the
    call was committed before (a retry with its idempotency key) and nothing was done now
    (``version`` -1: its commit is no longer in the table's history)."""

    version: int
    inserted: int
    deleted: int
    replayed: bool = False


class TableWriter:
    def __init__(self, ctx: RuntimeContext):
        self.ctx = ctx
        self._lock = threading.Lock()

    def commit(self, table: str, inserts: pa.Table | None = None,
               deletes: pa.Table | None = None,
               updates: tuple[pa.Table, pa.Table] | None = None,
               call: CallTag | None = None) -> Committed:
        """Commit deletions (and updates' old rows) and insertions (and updates' new rows)
        as one version of ``table``.

        ``call``: the idempotency key of this logical call. When a commit with the key is
        already in the table's log (a retry of a call whose reply was lost), nothing is
        committed and that commit's outcome is returned (``Committed.replayed``); the
        same key with another request is refused (``IdempotencyKeyError``)."""
        if updates is not None:
            old, new = updates
            deletes = old if deletes is None else pa.concat_tables(
                [deletes, old.select(deletes.schema.names)], promote_options="permissive")
            inserts = new if inserts is None else pa.concat_tables(
                [inserts, new.select(inserts.schema.names)], promote_options="permissive")
        n_ins = 0 if inserts is None else inserts.num_rows
        with self._lock:
            if call is not None:
                # before anything else: a retried keyed delete names rows already gone
                found = self._applied(table, call)
                if found is not None:
                    return found
            # a keyed table's deletions by key become the stored rows
            deletes = self.ctx.store.complete_deletes(table, deletes)
            n_del = 0 if deletes is None else deletes.num_rows
            if self.ctx.lease is not None and n_ins + n_del:
                self.ctx.lease.check()  # a server that lost the store commits nothing
            try:
                version = self.ctx.store.apply(table, inserts=inserts, deletes=deletes,
                                               call=call)
            except Exception as error:
                # lost to a concurrent commit: if that one carried this key (another
                # server applying the same call), its outcome is this call's
                found = self._applied(table, call) if call is not None and \
                    is_concurrent_call(error) else None
                if found is None:
                    raise
                return found
            failpoint("table_writes.after_commit")  # committed, not yet acknowledged
            if n_ins + n_del:
                self.ctx.feed.record(table, version, self._changes(table, inserts, deletes))
        self.ctx.probe.note(table, version)
        self.ctx.counters["updates"] += 1
        return Committed(version, n_ins, n_del)

    def applied(self, table: str, key: str) -> AppliedCall | None:
        """The call ``key`` as committed to ``table``, or None (``DeltaStore.applied_call``)."""
        return self.ctx.store.applied_call(table, key)

    def _applied(self, table: str, call: CallTag) -> Committed | None:
        found = self.ctx.store.applied_call(table, call.key)
        if found is None:
            return None
        if not found.same_request(call):
            raise IdempotencyKeyError(
                f"idempotency key {call.key!r} was used before for another request "
                f"({found.method} on {table}, version {found.version}): a key names one "
                "logical call, and its retries must send the same request")
        self.ctx.counters["updates_replayed"] += 1
        return Committed(found.version, found.inserted, found.deleted, replayed=True)

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
