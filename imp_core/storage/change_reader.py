"""The one delta-source policy: where the changes of a version range are read from.

``ChangeReader`` reads the change feed of versions ``(start, end]`` of a table:

- through Spark when a Spark source is configured and the range's change files are large
  (more than ``spark_min_bytes`` of the files the direct read would read: the commits'
  cdc files, or their added and removed data files when they have none; sizes from the
  log entries),
  or always with ``path="spark"``;
- otherwise in-process: a short range commit by commit from its change files (no table
  snapshot to load), a long one in one change-feed scan by delta-rs.

Both the service's shared feed (``imp_actors.feed.DeltaFeed``, which caches the pieces)
and the embedded ``Maintainer`` read through it.

Invariant: the pieces of ``pieces(t, a, b)`` cover ``(a, b]`` in version order without
gaps or overlaps, and together equal the table's change feed of that range exactly
(weight +1 per inserted row, -1 per deleted row); ``changes(t, a, b, spec)`` is that
feed cut down by ``restrict_delta`` to what a scan spec needs.
"""

from __future__ import annotations

from typing import Any, Callable, Collection, Literal, Protocol

import numpy as np
import pyarrow as pa

from imp_core.engine.operators.base import TableDelta
from imp_core.storage.changes import (
    COMMIT_VERSION,
    commit_change_files,
    read_change_files,
    to_weighted,
)
from imp_core.storage.scan_spec import ScanSpec, restrict_delta

Path = Literal["auto", "direct", "spark"]
PATHS = ("auto", "direct", "spark")

# up to this many versions are read commit by commit from their change files; longer
# ranges in one change-feed scan
FILE_READ_MAX_VERSIONS = 16


class DeltaSource(Protocol):
    """A reader of annotated deltas (e.g. ``imp_core.spark.deltas.SparkDeltaSource``)."""

    def changes(self, table: str, from_version: int, to_version: int,
                spec: ScanSpec | None = None) -> TableDelta: ...


class ChangeReader:
    """See the module docstring. ``spark_source`` is a ``DeltaSource`` or a zero-argument
    callable making one on first use (starting Spark costs seconds)."""

    def __init__(self, store: Any,
                 spark_source: DeltaSource | Callable[[], DeltaSource] | None = None,
                 spark_min_bytes: int = 16 << 20, path: Path = "auto"):
        if path not in PATHS:
            raise ValueError(f"unknown delta path {path!r}; use one of {', '.join(PATHS)}")
        self.store = store
        self._spark_source = spark_source
        self.spark_min_bytes = spark_min_bytes
        self.path = path
        self.last_path = "direct"
        self._schemas: dict[str, pa.Schema] = {}

    @property
    def has_spark(self) -> bool:
        return self._spark_source is not None

    def spark_source(self) -> DeltaSource:
        src = self._spark_source
        if src is None:
            raise ValueError("this change reader has no Spark source")
        if not hasattr(src, "changes"):
            src = self._spark_source = src()  # type: ignore[operator]
        return src  # type: ignore[return-value]

    def schema(self, table: str) -> pa.Schema:
        """The table's user schema (cached: a table's schema never changes)."""
        schema = self._schemas.get(table)
        if schema is None:
            schema = self._schemas[table] = self.store.schema(table)
        return schema

    def columns_schema(self, table: str, columns: Collection[str] | None) -> pa.Schema:
        """The table's schema cut to ``columns`` (in the table's order; all with None);
        a column the table lacks raises ``KeyError``."""
        schema = self.schema(table)
        if columns is None:
            return schema
        unknown = set(columns) - set(schema.names)
        if unknown:
            raise KeyError(f"{table} has no column {sorted(unknown)[0]!r}")
        return pa.schema([f for f in schema if f.name in columns])

    # -- the policy ----------------------------------------------------------------------
    def uses_spark(self, table: str, start: int, end: int) -> bool:
        """Whether ``(start, end]`` of ``table`` is read through Spark."""
        if self.path == "direct" or self._spark_source is None:
            return False
        if self.path == "spark":
            return True
        location = self.store.entry(table).location
        size = 0
        for v in range(start + 1, end + 1):
            # what the direct read would read: a commit's cdc files when it has them (a
            # delete of a few rows rewrites whole data files, but its cdc files hold only
            # those rows), else its added and removed data files
            size += sum(f.size for f in commit_change_files(location, v))
            if size > self.spark_min_bytes:
                return True
        return False

    def pieces(self, table: str, start: int, end: int,
               columns: Collection[str] | None = None) -> list[tuple[int, int, TableDelta]]:
        """The changes of ``(start, end]`` as ``(from, to, delta)`` pieces: one per version
        when the read says which version each row belongs to, else one. Rows are whole,
        or hold only ``columns`` (in the table's order) when given: change files are
        then read narrow."""
        if end <= start:
            return []
        schema = self.columns_schema(table, columns)
        if self.uses_spark(table, start, end):
            self.last_path = "spark"
            delta = self.spark_source().changes(table, start, end, None)
            if columns is not None:
                delta = TableDelta(delta.rows.select(schema.names), delta.weights)
            return [(start, end, delta)]
        self.last_path = "direct"
        if end - start <= FILE_READ_MAX_VERSIONS:
            location = self.store.entry(table).location
            out = []
            for v in range(start + 1, end + 1):
                feed = read_change_files(commit_change_files(location, v), schema)
                out.append((v - 1, v, TableDelta(*to_weighted(feed))))
            return out
        feed = self.store.changes(table, start, end)
        versions = feed.column(COMMIT_VERSION).to_numpy()
        rows, weights = to_weighted(feed)
        if columns is not None:
            rows = rows.select(schema.names)
        out = []
        for v in range(start + 1, end + 1):
            idx = np.flatnonzero(versions == v)
            out.append((v - 1, v, TableDelta(rows.take(pa.array(idx, type=pa.int64())),
                                             np.asarray(weights)[idx])))
        return out

    def changes(self, table: str, start: int, end: int,
                spec: ScanSpec | None = None) -> TableDelta:
        """The changes of ``(start, end]`` cut down to ``spec`` (Spark applies the spec
        itself: it reads only those columns and rows)."""
        if end <= start:
            return restrict_delta(TableDelta.inserts(self.schema(table).empty_table()), spec)
        if spec is not None and self.uses_spark(table, start, end):
            self.last_path = "spark"
            return self.spark_source().changes(table, start, end, spec)
        return restrict_delta(concat_deltas([d for _, _, d in self.pieces(table, start, end)]),
                              spec)


def concat_deltas(parts: list[TableDelta]) -> TableDelta:
    """One delta of ``parts`` in order (empty parts dropped; at least one part given)."""
    if len(parts) == 1:
        return parts[0]
    parts = [p for p in parts if len(p)] or parts[:1]
    if len(parts) == 1:
        return parts[0]
    rows = pa.concat_tables([p.rows for p in parts], promote_options="permissive")
    return TableDelta(rows, np.concatenate([np.asarray(p.weights) for p in parts]))
