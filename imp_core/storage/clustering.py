"""Whether a table's rows are still in order on its cluster column, and re-clustering
those that are not.

A table is loaded in order of its cluster column (``cluster_by``, else its first key
column), so a lookup by that column reads about one row group per key (what a join side
probed in the data layer relies on). Other writers' commits undo that: delta-rs's MERGE
appends the rows it inserts, and the files it rewrites, at the end of the table, each
new file spanning much of the column's range. ``decayed`` tells those tables apart
(``TableFiles.clustered``, from the Parquet footers); ``recluster_decayed`` rewrites
them in order (``DeltaStore.optimize``: one commit that changes no data, so its change
feed is empty and no sketch moves).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from imp_core.storage.file_side import TableFiles


def cluster_column(store: Any, table: str) -> str | None:
    """The column ``table`` is kept in order on: its first cluster column, else its
    first key column (None: neither)."""
    entry = store.entry(table)
    return (tuple(entry.sketch_columns) or tuple(entry.key or ()) or (None,))[0]


def decayed(store: Any, tables: Iterable[str], files: TableFiles | None = None
            ) -> list[str]:
    """Those of ``tables`` (each once, in order) that have a cluster column and whose
    latest version is no longer clustered on it."""
    files = files or TableFiles(store)
    out = []
    for table in dict.fromkeys(tables):
        column = cluster_column(store, table)
        if column is not None and not files.clustered(table, store.version(table), column):
            out.append(table)
    return out


def recluster_decayed(store: Any, tables: Iterable[str],
                      on_error: Callable[[str, Exception], None] | None = None
                      ) -> list[tuple[str, int, float]]:
    """Re-cluster (``optimize``) those of ``tables`` that have ``decayed``; returns
    ``(table, version written, seconds)`` of each rewrite. A table whose rewrite fails
    is passed to ``on_error`` and the others go on (None: the error is raised)."""
    out = []
    for table in decayed(store, tables):
        t0 = time.perf_counter()
        try:
            version = store.optimize(table)
        except Exception as exc:
            if on_error is None:
                raise
            on_error(table, exc)
            continue
        out.append((table, version, time.perf_counter() - t0))
    return out
