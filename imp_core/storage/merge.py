"""Applying deletions and insertions to a store table as one Delta ``MERGE`` commit.

Invariants of ``merge_changes``:
- It writes exactly one new version holding all the deletions and insertions, or
  nothing: every check (columns and types, declared domains, deleted rows stored, keys
  unique and not already present unless deleted in the same batch) runs before the
  ``MERGE``. With nothing to do it writes nothing and returns the current version.
- A keyed table still holds no two rows with equal key afterwards. On a keyless table
  each deleted row takes one stored occurrence of an equal row (``assign_row_ids``) and
  inserted rows get ``__rid`` values above every live row's.
- The ``MERGE`` rewrites every file holding a deleted row and puts the kept and the
  inserted rows in no particular order (inserted batches are sorted, but delta-rs mixes
  them in), so clustering decays; ``DeltaStore.optimize`` restores it.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from deltalake import DeltaTable

from imp_core.errors import SchemaMismatchError
from imp_core.storage.batches import OP, ROW_ID, check_domains, conform
from imp_core.storage.calls import CallTag
from imp_core.storage.catalog import TableEntry
from imp_core.storage.matching import assign_row_ids, read_candidates, row_tuples
from imp_core.storage.snapshots import max_row_id, stored_schema, user_schema
from imp_core.storage.writes import WriteOptions, check_keys, sort_rows

_SOURCE, _TARGET = "src", "tgt"


def merge_changes(
    entry: TableEntry,
    table: DeltaTable,
    inserts: pa.Table | None,
    deletes: pa.Table | None,
    options: WriteOptions,
    call: CallTag | None = None,
) -> int:
    """Delete ``deletes`` then insert ``inserts`` in ``table`` (at its latest version) as
    one new version; return the version after it (see ``DeltaStore.apply``)."""
    stored = stored_schema(table)
    schema = user_schema(stored)
    ins = schema.empty_table() if inserts is None else \
        conform(inserts, schema, entry.name, "insert batch")
    dels = schema.empty_table() if deletes is None else \
        conform(deletes, schema, entry.name, "delete batch")
    if ins.num_rows == 0 and dels.num_rows == 0:
        return table.version()
    check_domains(ins, entry.domains, entry.name, "insert batch")
    files = table.file_uris()
    if entry.key is None:
        dels, ins = _bag_source(entry, table, stored, dels, ins)
        match_on: tuple[str, ...] = (ROW_ID,)
    else:
        _check_keyed_change(entry, files, stored, dels, ins)
        match_on = entry.key
    ins = sort_rows(ins, entry.sketch_columns)
    source = pa.concat_tables([
        dels.append_column(OP, pa.array(["d"] * dels.num_rows, pa.string())),
        ins.append_column(OP, pa.array(["i"] * ins.num_rows, pa.string())),
    ])
    on = " AND ".join(
        f"{_TARGET}.{_quote(c)} = {_SOURCE}.{_quote(c)}" for c in match_on
    )
    metrics = (
        table.merge(
            source,
            predicate=f"{on} AND {_SOURCE}.{_quote(OP)} = 'd'",
            source_alias=_SOURCE,
            target_alias=_TARGET,
            streamed_exec=False,  # lets delta-rs prune target files by source stats
            writer_properties=options.writer_properties(),
            commit_properties=None if call is None else
            call.commit_properties(ins.num_rows, dels.num_rows),
        )
        .when_matched_delete()
        .when_not_matched_insert(
            updates={c: f"{_SOURCE}.{_quote(c)}" for c in stored.names},
            predicate=f"{_SOURCE}.{_quote(OP)} = 'i'",
        )
        .execute()
    )
    deleted = metrics.get("num_target_rows_deleted")
    inserted = metrics.get("num_target_rows_inserted")
    if (deleted, inserted) != (dels.num_rows, ins.num_rows):
        raise RuntimeError(  # only a concurrent writer could cause this
            f"table {entry.name}: MERGE deleted {deleted} (expected {dels.num_rows}) "
            f"and inserted {inserted} (expected {ins.num_rows}) rows"
        )
    return table.version()


def complete_deletes(entry: TableEntry, table: DeltaTable, deletes: pa.Table | None
                     ) -> pa.Table | None:
    """``deletes`` as whole rows: a keyed table's deletions may name only the key
    columns, and then are the stored rows of those keys (a key not stored is refused);
    any other batch is returned unchanged (``merge_changes`` checks it)."""
    if deletes is None or entry.key is None or \
            sorted(n.lower() for n in deletes.column_names) != sorted(entry.key):
        return deletes
    key = entry.key
    stored = stored_schema(table)
    keys = conform(deletes, pa.schema([stored.field(k) for k in key]), entry.name,
                   "delete batch (key columns)")
    check_keys(entry, keys, "delete batch")
    found = read_candidates(table.file_uris(), stored, keys, key)
    at = {k: i for i, k in enumerate(row_tuples(found, key))}
    missing = [k for k in row_tuples(keys, key) if k not in at]
    if missing:
        raise SchemaMismatchError(f"delete batch for table {entry.name}: no row with key "
                                  f"{key} = {missing[0]}" + (
                                      f" (and {len(missing) - 1} more)" if len(missing) > 1
                                      else ""))
    rows = found.take(pa.array([at[k] for k in row_tuples(keys, key)], pa.int64()))
    return rows.select(user_schema(stored).names)


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _check_keyed_change(
    entry: TableEntry, files: list[str], stored: pa.Schema,
    dels: pa.Table, ins: pa.Table,
) -> None:
    assert entry.key is not None
    key = entry.key
    check_keys(entry, dels, "delete batch")
    check_keys(entry, ins, "insert batch")
    probe = pa.concat_tables([dels.select(list(key)), ins.select(list(key))])
    found = read_candidates(files, stored, probe, key)
    current = dict(zip(row_tuples(found, key), row_tuples(found, stored.names)))
    deleted = set()
    for k, row in zip(row_tuples(dels, key), row_tuples(dels, stored.names)):
        have = current.get(k)
        if have is None:
            raise SchemaMismatchError(
                f"delete batch for table {entry.name}: no row with key {key} = {k}"
            )
        if have != row:
            raise SchemaMismatchError(
                f"delete batch for table {entry.name}: the row with key {key} = {k} "
                f"is stored as {have}, not {row}"
            )
        deleted.add(k)
    for k in row_tuples(ins, key):
        if k in current and k not in deleted:
            raise SchemaMismatchError(
                f"insert batch for table {entry.name}: key {key} = {k} already exists"
            )


def _bag_source(
    entry: TableEntry, table: DeltaTable, stored: pa.Schema,
    dels: pa.Table, ins: pa.Table,
) -> tuple[pa.Table, pa.Table]:
    """Deletions and insertions of a keyless table with their ``__rid``."""
    cols = [c for c in stored.names if c != ROW_ID]
    files = table.file_uris()
    rid_field = pa.field(ROW_ID, pa.int64(), nullable=False)
    if dels.num_rows:
        found = read_candidates(files, stored, dels, cols)
        ids, missing = assign_row_ids(
            row_tuples(dels, cols), row_tuples(found, cols),
            found.column(ROW_ID).to_pylist(),
        )
        if missing:
            rows = row_tuples(dels, cols)
            shown = [rows[i] for i in missing[:3]]
            raise SchemaMismatchError(
                f"delete batch for table {entry.name}: {len(missing)} row(s) not stored "
                f"(or deleted more often than stored), e.g. {shown}"
            )
        dels = dels.append_column(rid_field, pa.array(ids, pa.int64()))
    else:
        dels = dels.append_column(rid_field, pa.array([], pa.int64()))
    start = max_row_id(table, files, stored) + 1
    ins = ins.append_column(
        rid_field, pa.array(np.arange(start, start + ins.num_rows, dtype=np.int64))
    )
    return dels.select(stored.names), ins.select(stored.names)
