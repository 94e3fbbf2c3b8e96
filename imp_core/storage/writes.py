"""Writing a new store table: the file layout options and the creation (version 0).

Invariants:
- ``check_new_table`` raises ``SchemaMismatchError`` naming every problem of the data
  (reserved or duplicate columns, key, cluster or domain columns that are not columns,
  values outside a declared domain, null or repeated keys) before anything is written.
- ``write_new_table`` writes one new Delta table (never over an existing one) with the
  change data feed on (``TABLE_CONFIGURATION``) holding exactly the given rows, plus the
  hidden ``__rid`` numbered 0..n-1 for a keyless table; the rows are sorted on the entry's
  cluster columns (``sketch_columns``) and written in row groups of at most
  ``WriteOptions.max_row_group_size`` rows, so Parquet min/max statistics on the cluster
  columns can skip data.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
import re
from collections.abc import Container, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from deltalake import DeltaTable, WriterProperties, write_deltalake

from imp_core.errors import SchemaMismatchError
from imp_core.plan.literal import sql_literal
from imp_core.storage.batches import RESERVED, ROW_ID, check_domains
from imp_core.storage.calls import RETENTION
from imp_core.storage.catalog import TableEntry, is_uri
from imp_core.storage.matching import row_tuples
from imp_core.storage.ordered_write import write_ordered_table

# the change feed on; the idempotency keys of the calls that changed the table
# (Delta txn actions, ``imp_core.storage.calls``) expire after a day
TABLE_CONFIGURATION = {"delta.enableChangeDataFeed": "true",
                       "delta.setTransactionRetentionDuration": RETENTION}


@dataclass(frozen=True)
class WriteOptions:
    """How data files are laid out. Smaller files make a ``MERGE`` cheaper (it rewrites
    each file holding a deleted row); smaller row groups make statistics finer, and with
    data pages of at most ``page_rows`` rows the page index lets Spark's Parquet reader
    skip pages inside a row group (what makes a sketch's ranges read few rows)."""

    max_row_group_size: int = 65_536
    target_file_size: int = 32 * 1024 * 1024  # bytes
    page_rows: int | None = 2048

    def writer_properties(self) -> WriterProperties:
        if self.page_rows is None:
            return WriterProperties(max_row_group_size=self.max_row_group_size)
        return WriterProperties(max_row_group_size=self.max_row_group_size,
                                data_page_row_count_limit=self.page_rows)


DEFAULT_WRITE_OPTIONS = WriteOptions()


def sort_rows(data: pa.Table, columns: Sequence[str]) -> pa.Table:
    """``data`` sorted ascending on ``columns`` (as it is when there are none)."""
    if not columns or data.num_rows < 2:
        return data
    return data.sort_by([(c, "ascending") for c in columns])


def check_names(entry: TableEntry, names: Sequence[str]) -> None:
    """Raise ``SchemaMismatchError`` for reserved or duplicate column ``names`` and for
    key, cluster or domain columns of ``entry`` that are not among them."""
    problems: list[str] = []
    reserved = [n for n in names if n in RESERVED]
    if reserved:
        problems.append(f"columns {reserved} are reserved")
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        problems.append(f"duplicate columns {dupes}")
    for what, cols in (
        ("key", entry.key or ()),
        ("cluster", entry.sketch_columns),
        ("domain", tuple(entry.domains)),
    ):
        unknown = [c for c in cols if c not in names]
        if unknown:
            problems.append(f"{what} columns {unknown} are not columns")
    if problems:
        raise SchemaMismatchError(f"table {entry.name}: " + "; ".join(problems))


def check_new_table(entry: TableEntry, data: pa.Table) -> None:
    """Raise ``SchemaMismatchError`` unless ``data`` can become the table ``entry``."""
    check_names(entry, data.schema.names)
    check_domains(data, entry.domains, entry.name, "data")
    if entry.key is not None:
        check_keys(entry, data, "data")


def check_keys(entry: TableEntry, batch: pa.Table, what: str) -> None:
    """No null key and no key twice within ``batch``."""
    assert entry.key is not None
    for col in entry.key:
        if batch.column(col).null_count:
            raise SchemaMismatchError(
                f"{what} for table {entry.name}: key column {col!r} holds nulls"
            )
    groups = batch.select(list(entry.key)).group_by(list(entry.key)).aggregate([])
    if groups.num_rows != batch.num_rows:
        dup = _first_duplicate(row_tuples(batch, entry.key))
        raise SchemaMismatchError(
            f"{what} for table {entry.name}: key {entry.key} = {dup} occurs more than once"
        )


_PLAIN_NAME = re.compile(r"^[a-z_][a-z0-9_]*$")


def _constraint_literal(value: Any) -> str | None:
    """``value`` as a literal of a Delta CHECK constraint (None: not expressible)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, decimal.Decimal):
        # delta-rs 1.6 compares a decimal column with a literal at the wrong scale
        # (``p >= 900`` fails for 901.00): such domains rely on the change-feed check
        return None
    if isinstance(value, (int, float, str, dt.date)) and not isinstance(value, bool):
        return sql_literal(value)
    return None


def domain_constraints(domains: Mapping[str, tuple[Any, Any]],
                       nullable: Container[str] = ()) -> dict[str, str]:
    """Delta CHECK constraints (name -> SQL) that hold the declared domains for every
    writer that honours Delta constraints (delta-rs, Spark): ``imp_domain_<column>``.
    A column whose name or bounds SQL cannot carry plainly gets none (the change feed's
    check still sees its values). A column of ``nullable`` gets ``col IS NULL OR (...)``:
    a domain bounds the values, and delta-rs refuses a NULL for a plain ``col >= 1``."""
    out: dict[str, str] = {}
    for column, (low, high) in domains.items():
        if not _PLAIN_NAME.match(column):
            continue
        parts = []
        for bound, op in ((low, ">="), (high, "<=")):
            if bound is None:
                continue
            literal = _constraint_literal(bound)
            if literal is None:
                parts = []
                break
            parts.append(f"{column} {op} {literal}")
        if parts:
            bounds = " AND ".join(parts)
            out[f"imp_domain_{column}"] = (f"{column} IS NULL OR ({bounds})"
                                           if column in nullable else bounds)
    return out


def write_new_table(entry: TableEntry, data: pa.Table, options: WriteOptions,
                    progress: bool) -> int:
    """Write ``data`` (checked by ``check_new_table``) as the first version of
    ``entry``'s table, then its domains as CHECK constraints (one more version); returns
    the table's version. ``progress``: a tqdm bar (rows written) on stderr."""
    if entry.key is None:
        data = data.append_column(
            pa.field(ROW_ID, pa.int64(), nullable=False),
            pa.array(np.arange(data.num_rows, dtype=np.int64)),
        )
    data = sort_rows(data, entry.sketch_columns)
    batches: Iterable[pa.RecordBatch] = data.to_batches(max_chunksize=options.max_row_group_size)
    if progress:
        batches = with_progress(batches, data.num_rows, f"writing {entry.name}")
    return write_source(entry, data.schema, batches, options)


def write_source(entry: TableEntry, schema: pa.Schema, batches: Iterable[pa.RecordBatch],
                 options: WriteOptions) -> int:
    """Write ``batches`` (checked, in their final order) as the first version of
    ``entry``'s table, then its domains as CHECK constraints; the table's version. A
    local table keeps the rows' order (``write_ordered_table``); on an object store
    delta-rs writes them, in the order its writer tasks take them."""
    if is_uri(entry.location):
        write_deltalake(
            entry.location,
            pa.RecordBatchReader.from_batches(schema, iter(batches)),
            mode="error",
            configuration=TABLE_CONFIGURATION,
            writer_properties=options.writer_properties(),
            target_file_size=options.target_file_size,
        )
    else:
        write_ordered_table(entry.location, schema, batches, options, TABLE_CONFIGURATION)
    table = DeltaTable(entry.location)
    constraints = domain_constraints(entry.domains,
                                     {f.name for f in schema if f.nullable})
    if constraints:
        table.alter.add_constraint(constraints)
    return table.version()


def with_progress(batches: Iterable[Any], total: int, desc: str) -> Iterator[Any]:
    """``batches``, driving a tqdm bar (rows) on stderr as they are consumed (a line per
    tenth of the rows when stderr is not a terminal)."""
    from imp_core.process.progress import progress_bar

    with progress_bar(total, desc, every=0.1) as bar:
        for batch in batches:
            yield batch
            bar.update(batch.num_rows)


def _first_duplicate(rows: list[tuple]) -> tuple | None:
    seen: set[tuple] = set()
    for row in rows:
        if row in seen:
            return row
        seen.add(row)
    return None
