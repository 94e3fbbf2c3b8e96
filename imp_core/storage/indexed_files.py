"""Reads of a store's tables served by shared in-memory indexes where one covers them.

``IndexedTableFiles`` is a ``TableFiles`` (what ``FileJoinSide`` reads a probed join side
through) bound to an ``IndexCatalog``: a read of a table by the values of one column,
with no other filter, is answered by the catalog's index of that table on that column
(built on the first such read, then shared by every query of the catalog and kept up
with the table's commits once); any other read, or one at a version an index no longer
holds, goes to the Parquet files as before. Both answer the same rows, so a query's
results do not depend on which one served it.

Invariants: every reader (one per query pipeline: its ``VersionContext``) is pinned at
the version it read last and unpinned when its pipeline is gone, so an index keeps the
versions its readers still read and nothing older; ``row_filter`` (a shard's routing)
applies to index reads as to file reads.
"""

from __future__ import annotations

import itertools
import weakref
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from imp_core.storage.file_side import RowFilter, TableFiles
from imp_core.storage.index_catalog import IndexCatalog
from imp_core.storage.table_index import IndexUnreadableError, IndexVersionError

_readers = itertools.count(1)
# the most rows a value of a column may hold for a keyed read through its index to count
# as cheap (``IndexedTableFiles.indexed``): a batch of 100 keys then reads 100,000 rows
INDEX_ROWS_PER_KEY = 1_000


class IndexedTableFiles(TableFiles):
    """``TableFiles`` whose keyed reads go to the shared indexes of ``catalog``."""

    def __init__(self, store: Any, catalog: IndexCatalog,
                 row_filter: RowFilter | None = None, keep: int = 32):
        super().__init__(store, row_filter, keep)
        self.catalog = catalog
        self.index_reads = 0
        self.file_reads = 0

    def reader_for(self, owner: object) -> str:
        """A reader name for ``owner`` (a pipeline's version context), released from
        every index when ``owner`` is collected."""
        name = f"reader-{next(_readers)}"
        weakref.finalize(owner, self.catalog.release, name)
        return name

    def read(self, table: str, version: int, columns: list[str],
             where: pc.Expression | None = None,
             keys: dict[str, pa.Array] | None = None, reader: str | None = None
             ) -> pa.Table:
        found = None
        if where is None and keys and reader is not None:
            found = self._from_index(table, version, columns, keys, reader)
        if found is None:
            self.file_reads += 1
            return super().read(table, version, columns, where, keys)
        self.index_reads += 1
        return self.row_filter(table, found) if self.row_filter is not None else found

    def _from_index(self, table: str, version: int, columns: list[str],
                    keys: dict[str, pa.Array], reader: str) -> pa.Table | None:
        key = next(iter(keys))  # the first probe column: the others filter its rows
        try:
            index = self.catalog.acquire(reader, table, key, columns, version)
            if index is None:  # being built
                return None
            rows = index.read(version, keys[key], columns=list(
                dict.fromkeys([*columns, *keys])), reader=reader)
        except IndexUnreadableError:
            self.catalog.discard(table, key)
            return None
        except IndexVersionError:
            return None
        for col, values in list(keys.items())[1:]:
            rows = rows.filter(pc.is_in(rows.column(col), value_set=values))
        return rows.select(columns)

    def indexed(self, table: str, column: str) -> bool:
        """Whether a keyed read of ``table`` by ``column`` is cheap through the catalog's
        index on it (``_from_index`` serves every keyed read with no other filter): the
        index reads every row of an asked key, so only a column whose values each hold
        few rows (at most ``INDEX_ROWS_PER_KEY`` by the files' footers: a foreign key
        such as ``l_partkey``, about 30 at every scale factor; not a flag or a nation
        key, nor a column whose footers do not tell) counts, and any column of a table
        of at most that many rows (TPC-H's nation and region)."""
        if column not in self.schema(table).names:
            return False
        version = self.store.version(table)
        data = self._dataset(table, version)
        if data is None or data.count_rows() <= INDEX_ROWS_PER_KEY:
            return True
        per = self.rows_per_value(table, version, column)
        return per is not None and per <= INDEX_ROWS_PER_KEY

    def prepare(self, reader: str | None, table: str, key: str, columns: list[str]) -> None:
        """Ask for the index a keyed read of ``table`` by ``key`` will want."""
        if reader is not None:
            self.catalog.prepare(reader, table, key, columns)

    def indexes_of(self, reader: str | None) -> list[dict[str, Any]]:
        """Per index ``reader`` reads: table, key, columns, where its base is ("memory"
        or "disk"), bytes in memory and on disk, and how many readers share it."""
        if reader is None:
            return []
        return [{"table": d["table"], "key": d["key"], "columns": d["columns"],
                 "where": d["where"], "bytes": d["bytes"], "disk_bytes": d["disk_bytes"],
                 "users": len(d["users"])}
                for d in self.catalog.describe(reader)]

    def index_report(self) -> dict[str, Any]:
        """The catalog's indexes and how reads were served."""
        return {"indexes": self.catalog.describe(), "bytes": self.catalog.nbytes(),
                "index_reads": self.index_reads, "file_reads": self.file_reads,
                "builds": self.catalog.builds}

