"""Versioned base tables: Delta Lake tables (delta-rs) named in a JSON catalog.

Invariants: every table the store names exists as a Delta table with its change data
feed on and no deletion vectors; each ``DeltaStore.apply`` is one Delta version; change
feeds come back with the table's user columns, ``_change_type`` in {insert, delete} and
``_commit_version``. See the modules for the details.
"""

from imp_core.errors import TableExistsError, UnsupportedTableError, VersionError
from imp_core.storage.catalog import TableCatalog, TableEntry
from imp_core.storage.change_reader import ChangeReader
from imp_core.storage.changes import ChangeFile, read_change_files, to_weighted
from imp_core.storage.delta_store import DeltaStore, WriteOptions

__all__ = [
    "ChangeFile",
    "ChangeReader",
    "DeltaStore",
    "TableCatalog",
    "TableEntry",
    "TableExistsError",
    "UnsupportedTableError",
    "VersionError",
    "WriteOptions",
    "read_change_files",
    "to_weighted",
]
