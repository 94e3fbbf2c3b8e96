"""Join sides probed by reading the Delta tables' files (no Spark, no rows held).

A ``FileJoinSide`` is a ``ProbedSide`` whose lookups read the subtree's tables at the
side's versions straight from their Parquet files, each read filtered by the probe's
keys where a key column is a plain copy of a table column (row groups and pages whose
statistics exclude every key are skipped), and evaluate the subtree over those rows with
the engine's operators. That is the data layer of a query actor: it needs the table
store's folder or bucket, not a Spark session.

Invariants: a lookup returns exactly the subtree's annotated rows at the side's
versions whose keys are among the probe keys (the key filter only ever removes rows the
subtree could not pair: the pairing in ``ProbedSide.probe`` checks the keys again);
``row_filter`` (a shard's routing) is applied to every table read, so a sharded query's
side holds the same rows the shard's own deltas would have built. Key filters pass on
through the side's own inner equi-joins (semi-join reduction of the other tables it
reads), so a side spanning several tables reads of each only rows that can join with a
match. A key column may be traced through the NULL-padded side of an outer join
(``trace_column(..., through_padding=True)``): filtering that table only turns rows whose
key is outside the filter into padded rows, whose NULL key matches no probe either. Key
filters also pass from the left input of a semi- or anti-join or a left outer join to
its right input along the equi keys (one way only): every partner of a left row that is
read has a key value that row holds, so the right rows left out partner no row read.
Nothing passes into the right input of a NOT IN (whose output depends on whether the
whole right side is empty or holds a NULL) or out of any right input of those joins
(left rows without partners are output rows of anti- and outer joins).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from imp_core.engine.probed_side import ProbedSide, VersionContext
from imp_core.engine.subtree import evaluate_subtree
from imp_core.engine.zset import DeltaBatch
from imp_core.plan.lineage import trace_column
from imp_core.plan.nodes import Join, OuterJoin, PlanNode, Scan, SemiJoin
from imp_core.sketch.partition import PartitionSet

# row-group bounds of a group without statistics: it may hold any value
NO_LOW, NO_HIGH = np.iinfo(np.int64).min, np.iinfo(np.int64).max

# (table, rows) -> the rows this reader may see (e.g. one shard's share)
RowFilter = Callable[[str, pa.Table], pa.Table]


class TableFiles:
    """Reads of a store's tables at given versions, column-pruned and filtered in the
    Parquet scan; one dataset per (table, version) is kept (its file list is immutable)."""

    FILE_BOUNDS = 8192  # (file, column) row-group bounds kept

    def __init__(self, store: Any, row_filter: RowFilter | None = None, keep: int = 32):
        self.store = store
        self.row_filter = row_filter
        self.keep = keep
        self._datasets: OrderedDict[tuple[str, int], ds.Dataset | None] = OrderedDict()
        self._schemas: dict[str, pa.Schema] = {}
        self._bounds: OrderedDict[tuple[str, int, str], list[tuple[
            np.ndarray, np.ndarray, np.ndarray]] | None] = OrderedDict()
        self._file_bounds: OrderedDict[tuple[str, str], tuple[
            np.ndarray, np.ndarray, np.ndarray]] = OrderedDict()

    def schema(self, table: str) -> pa.Schema:
        """The table's user schema, read once (a table's schema never changes, and
        asking the store opens its Delta log)."""
        found = self._schemas.get(table)
        if found is None:
            found = self._schemas[table] = self.store.schema(table)
        return found

    def _dataset(self, table: str, version: int) -> ds.Dataset | None:
        key = (table, version)
        if key in self._datasets:
            self._datasets.move_to_end(key)
            return self._datasets[key]
        files = self.store.file_uris(table, version)
        # the table's schema, not the first file's: files written by different commits
        # may store strings as string or string_view (Arrow filters only the former)
        found = ds.dataset(files, format="parquet", schema=self.schema(table)) \
            if files else None
        self._datasets[key] = found
        while len(self._datasets) > self.keep:
            self._datasets.popitem(last=False)
        return found

    def columns_for(self, node: PlanNode, partitions: PartitionSet, table: str) -> list[str]:
        """The columns of ``table`` that ``node``'s scans read (and its partition column),
        in table order."""
        cols = {c for s in node.walk() if isinstance(s, Scan) and s.table == table
                for c in s.source_columns}
        part = partitions.for_table(table)
        if part is not None:
            cols.add(part[0].column)
        return [c for c in self.schema(table).names if c in cols]

    def read_for(self, node: PlanNode, partitions: PartitionSet, versions: dict[str, int],
                 filters: dict[str, pc.Expression] | None = None) -> dict[str, pa.Table]:
        """Every table ``node`` reads, at ``versions``, with the columns it needs."""
        return {t: self.read(t, versions[t], self.columns_for(node, partitions, t),
                             (filters or {}).get(t))
                for t in sorted(node.tables())}

    def reader_for(self, owner: object) -> str | None:
        """A name for the reads of ``owner`` (a pipeline's version context), where the
        reads are served by something that keeps per-reader versions (shared indexes:
        ``IndexedTableFiles``); None here: files keep nothing per reader."""
        return None

    def prepare(self, reader: str | None, table: str, key: str, columns: list[str]) -> None:
        """A keyed read of ``table`` by ``key`` is to come: nothing to ready here
        (``IndexedTableFiles`` asks for its index)."""

    def indexes_of(self, reader: str | None) -> list[dict[str, Any]]:
        """The shared indexes ``reader`` reads through (``IndexedTableFiles``): none
        here."""
        return []

    def read(self, table: str, version: int, columns: list[str],
             where: pc.Expression | None = None,
             keys: dict[str, pa.Array] | None = None, reader: str | None = None
             ) -> pa.Table:
        """``columns`` of ``table`` at ``version``, the rows passing ``where`` and, for
        each column of ``keys``, holding one of its values (values already cast to the
        column's type); ``reader``: who reads (``reader_for``), ignored here. Row groups
        whose statistics exclude every value of an integer
        key column are not read: a scan filter on ``isin`` alone decodes them all."""
        data = self._dataset(table, version)
        for col, values in (keys or {}).items():
            cond = pc.field(col).isin(values)
            where = cond if where is None else where & cond
        if data is not None and keys:
            data = self._pruned(table, version, data, keys)
        if data is None:
            schema = self.schema(table)
            out = pa.schema([schema.field(c) for c in columns]).empty_table()
        else:
            try:
                out = data.to_table(columns=columns, filter=where)
            except (pa.ArrowNotImplementedError, pa.ArrowTypeError):
                # the scan cannot compare in some file's physical type (strings written
                # as string_view by one commit): filter the rows once read
                out = data.to_table().filter(where).select(columns)
        if self.row_filter is not None:
            out = self.row_filter(table, out)
        return out

    def not_null(self, table: str, column: str) -> bool:
        """Whether ``column`` never holds NULL: a key column (the store refuses NULL
        keys) or one the table's Delta schema declares NOT NULL (every Delta writer,
        delta-rs and Spark alike, refuses a commit with a NULL there)."""
        entry = self.store.entry(table)
        if column in tuple(entry.key or ()):
            return True
        schema = self.schema(table)
        return column in schema.names and not schema.field(column).nullable

    def indexed(self, table: str, column: str) -> bool:
        """Whether a keyed read of ``table`` by ``column`` is served by a shared index
        (a probe reads the index's few pages of its keys, not the files): never here,
        see ``IndexedTableFiles``."""
        return False

    def clustered(self, table: str, version: int, column: str) -> bool:
        """Whether a lookup of one value of integer ``column`` is expected to read about
        one row group of the snapshot: the rows of each row group weighted by the share of
        the column's range it spans (a value falls in it with that chance) sum to at most
        twice the largest row group. Rows sorted on the column pass; rows in arrival
        order, each group spanning nearly the whole range, do not; a few small files
        appended since the table was last ordered add only their rows."""
        found = self._snapshot_bounds(table, version, column)
        if found is None:
            return False
        lo, hi, rows = found
        rows = rows.astype(np.float64)
        # a group without statistics may hold any value: it is read by every lookup
        bounded = (lo != NO_LOW) & (hi != NO_HIGH)
        if not bounded.any() or rows.sum() == 0:
            return False
        low, high = lo[bounded].astype(np.float64), hi[bounded].astype(np.float64)
        span = high.max() - low.min() + 1.0
        share = np.ones(len(rows))
        share[bounded] = np.clip((high - low + 1.0) / span, 0.0, 1.0)
        return float((rows * share).sum()) <= 2.0 * float(rows.max())

    def rows_per_value(self, table: str, version: int, column: str) -> float | None:
        """The rows per distinct value of integer ``column`` at most (the snapshot's rows
        over the values its row groups' statistics span, at least 1), from the footers;
        None where they do not tell (other types, no statistics). A key column gives
        about 1, a nation key in a table of millions about a 25th of them."""
        found = self._snapshot_bounds(table, version, column)
        if found is None:
            return None
        lo, hi, counts = found
        rows = float(counts.sum())
        bounded = (lo != NO_LOW) & (hi != NO_HIGH)
        if not bounded.all() or rows == 0:
            return None
        span = float(hi.max()) - float(lo.min()) + 1.0
        return rows / max(1.0, min(rows, span))

    def _snapshot_bounds(self, table: str, version: int, column: str
                         ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """Every row group's min, max and rows of integer ``column`` in the snapshot
        (``_group_bounds`` of its files, end to end); None for other columns or no file."""
        data = self._dataset(table, version)
        groups = None if data is None else self._group_bounds(table, version, data, column)
        if not groups:
            return None
        return tuple(np.concatenate([g[i] for g in groups]) for i in range(3))

    def _pruned(self, table: str, version: int, data: ds.Dataset,
                keys: dict[str, pa.Array]) -> ds.Dataset | None:
        """``data`` cut to the row groups that may hold the ``keys`` (None: none may)."""
        keep: list[np.ndarray] | None = None  # per file, its row groups to read
        for col, values in keys.items():
            groups = self._group_bounds(table, version, data, col)
            if groups is None:
                continue
            vals = np.sort(values.drop_null().to_numpy(zero_copy_only=False))
            hit = []
            for i, (lo, hi, _) in enumerate(groups):
                at = np.searchsorted(vals, lo, "left")
                ok = (at < len(vals)) & (vals[np.minimum(at, len(vals) - 1)] <= hi) \
                    if len(vals) else np.zeros(len(lo), bool)
                hit.append(ok if keep is None else ok & keep[i])
            keep = hit
        if keep is None:
            return data
        fragments = []
        for i, fragment in enumerate(data.get_fragments()):
            ids = np.flatnonzero(keep[i])
            if len(ids) == len(keep[i]):
                fragments.append(fragment)
            elif len(ids):
                fragments.append(fragment.subset(row_group_ids=ids.tolist()))
        if not fragments:
            return None
        return ds.FileSystemDataset(fragments, data.schema, data.format, data.filesystem)

    def _group_bounds(self, table: str, version: int, data: ds.Dataset, column: str
                      ) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]] | None:
        """Per file of ``data``, its row groups' min, max of integer ``column`` (the
        type's extremes where a group has no statistics) and row counts; None for other
        columns."""
        key = (table, version, column)
        if key in self._bounds:
            return self._bounds[key]
        field = data.schema.field(column) if column in data.schema.names else None
        found: list[tuple[np.ndarray, np.ndarray, np.ndarray]] | None = None
        if field is not None and pa.types.is_signed_integer(field.type):
            found = [self._file_group_bounds(fragment, column)
                     for fragment in data.get_fragments()]
        self._bounds[key] = found
        while len(self._bounds) > self.keep:
            self._bounds.popitem(last=False)
        return found

    def _file_group_bounds(self, fragment: ds.ParquetFileFragment, column: str
                           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One file's row-group bounds of ``column`` (see ``_group_bounds``), read from
        its footer once: a data file never changes, and a new version mostly lists the
        files of the one before."""
        key = (fragment.path, column)
        found = self._file_bounds.get(key)
        if found is not None:
            self._file_bounds.move_to_end(key)
            return found
        meta = fragment.metadata
        j = meta.schema.to_arrow_schema().get_field_index(column)
        lo = np.full(meta.num_row_groups, NO_LOW, np.int64)
        hi = np.full(meta.num_row_groups, NO_HIGH, np.int64)
        rows = np.array([meta.row_group(i).num_rows
                         for i in range(meta.num_row_groups)], np.int64)
        for i in range(meta.num_row_groups if j >= 0 else 0):
            st = meta.row_group(i).column(j).statistics
            if st is not None and st.has_min_max:
                lo[i], hi[i] = st.min, st.max
        found = self._file_bounds[key] = (lo, hi, rows)
        while len(self._file_bounds) > self.FILE_BOUNDS:
            self._file_bounds.popitem(last=False)
        return found


def scan_counts(node: PlanNode) -> dict[str, int]:
    """How many scans of each table ``node`` holds."""
    counts: dict[str, int] = {}
    for s in node.walk():
        if isinstance(s, Scan):
            counts[s.table] = counts.get(s.table, 0) + 1
    return counts


def key_pushdown(node: PlanNode, key_columns: tuple[str, ...]) -> dict[str, tuple[str, str]]:
    """Key column -> (table, source column) it copies, for the keys a lookup's read can
    filter by: those tracing to a table ``node`` scans once (a file-read side reads each
    table once, so a table scanned twice is read whole)."""
    counts = scan_counts(node)
    out: dict[str, tuple[str, str]] = {}
    for key in key_columns:
        found = trace_column(node, key, through_padding=True)
        if found is not None and counts[found[0].table] == 1:
            out[key] = (found[0].table, found[1])
    return out


Link = tuple[tuple[str, str], tuple[str, str]]  # (table, column) -> (table, column)


def filter_links(node: PlanNode) -> list[Link]:
    """The equi-join conditions inside ``node`` between columns of tables it reads once,
    as ``((table, column), (table, column))`` pairs along which key filters pass: both
    ways for inner joins, left to right for semi-, anti- and left outer joins."""
    counts = scan_counts(node)
    links: list[Link] = []
    for join in node.walk():
        if isinstance(join, Join):
            both_ways = True
        elif isinstance(join, SemiJoin) and not join.null_aware or \
                isinstance(join, OuterJoin) and join.kind == "left":
            both_ways = False
        else:
            continue
        left_keys, right_keys, _ = join.equi_keys()
        for lk, rk in zip(left_keys, right_keys):
            lt = trace_column(join.left, lk, through_padding=True)
            rt = trace_column(join.right, rk, through_padding=True)
            if lt is None or rt is None or counts[lt[0].table] != 1 \
                    or counts[rt[0].table] != 1:
                continue
            pair = ((lt[0].table, lt[1]), (rt[0].table, rt[1]))
            links += [pair, (pair[1], pair[0])] if both_ways else [pair]
    return links


def filter_columns(node: PlanNode, key_columns: tuple[str, ...]) -> dict[str, set[str]]:
    """Table -> the columns a lookup of ``node`` by ``key_columns`` filters its read by:
    the keys' own (``key_pushdown``), then those the filters reach along
    ``filter_links``, as ``FileJoinSide`` passes them on; tables absent are read whole."""
    out: dict[str, set[str]] = {}
    for table, column in key_pushdown(node, key_columns).values():
        out.setdefault(table, set()).add(column)
    links = filter_links(node)
    while True:
        reached = [(tb, cb) for (ta, _), (tb, cb) in links
                   if ta in out and tb not in out]
        if not reached:
            return out
        for tb, cb in reached:
            out.setdefault(tb, set()).add(cb)


class FileJoinSide(ProbedSide):
    """A ``ProbedSide`` answered from the Delta tables' files at the side's versions."""

    kind = "files"

    def __init__(self, node: PlanNode, key_columns: tuple[str, ...], partitions: PartitionSet,
                 files: TableFiles, context: VersionContext, use_bloom: bool = True):
        super().__init__(node, key_columns, context, use_bloom)
        self.partitions = partitions
        self.files = files
        self._scans = [n for n in node.walk() if isinstance(n, Scan)]
        self.reader = files.reader_for(context)
        self._pushdown = key_pushdown(node, key_columns)
        self._links = filter_links(node)
        # per table a lookup filters, the column its keyed reads will be served by (the
        # most selective: ``_read``): its index is asked for now, so it is built while
        # the query settles, for the tables the probe keys filter and for those their
        # joins reach (a first batch reading those by their files took seconds at SF 10)
        if self.reader is not None:
            keyed = {src for src in self._pushdown.values()}
            for table, columns in filter_columns(node, key_columns).items():
                version = files.store.version(table)
                source = min(sorted(columns), key=lambda c, t=table, v=version: (
                    files.rows_per_value(t, v, c) or 1.0, (t, c) not in keyed))
                files.prepare(self.reader, table, source,
                              [*files.columns_for(node, partitions, table), source])

    def indexes(self) -> list[dict[str, Any]]:
        """The shared indexes this side's probes read (``TableFiles.indexes_of``)."""
        return self.files.indexes_of(self.reader)

    def _read(self, conditions: dict[str, dict[str, pa.Array]]) -> dict[str, pa.Table]:
        """The side's tables at its versions, reduced by semi-joins: of the tables with
        conditions (source column -> allowed values), the one expected to give the fewest
        rows is read first, filtered by them (its most selective column first, which is
        what a keyed read is served by); the values its rows hold in a join column become
        conditions of the tables it is joined with; and so on until every table with
        conditions is read; the others are read whole. Only rows that cannot join with a
        row matching the probe keys are left out, so the subtree over the reduced tables
        holds every matching row. (Reading one table at a time lets a selective probe
        narrow an unselective one: a supplier's nation key would select a 25th of the
        customers, the orders its line items reach a few of them.)"""
        assert self.versions is not None
        pending = {t: dict(c) for t, c in conditions.items()}
        read: dict[str, pa.Table] = {}
        while True:
            todo = sorted(t for t in pending if t not in read)
            if not todo:
                break
            estimates = {t: self._estimates(t, pending[t]) for t in todo}
            t = min(todo, key=lambda name: min(estimates[name].values(), default=0.0))
            keys: dict[str, pa.Array] = {}
            schema = self.files.schema(t)
            for col in sorted(pending[t], key=estimates[t].__getitem__):
                try:
                    keys[col] = pending[t][col].cast(schema.field(col).type)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                    continue  # no filter on this column: more rows, never fewer
            read[t] = self.files.read(t, self.versions[t],
                                      self.files.columns_for(self.node, self.partitions, t),
                                      keys=keys, reader=self.reader)
            for (ta, ca), (tb, cb) in self._links:
                if ta == t and tb not in read:
                    values = pc.unique(read[t].column(ca).combine_chunks())
                    have = pending.setdefault(tb, {}).get(cb)
                    pending[tb][cb] = values if have is None else _both(have, values)
        for t in self.tables:
            if t not in read:
                read[t] = self.files.read(t, self.versions[t],
                                          self.files.columns_for(self.node, self.partitions, t))
        return read

    def _estimates(self, table: str, conditions: dict[str, pa.Array]) -> dict[str, float]:
        """Per condition column, the rows a read filtered by it alone is expected to give
        (its values times the rows per value; a column whose statistics say nothing
        counts one row per value)."""
        assert self.versions is not None
        return {col: len(values) * (self.files.rows_per_value(
                    table, self.versions[table], col) or 1.0)
                for col, values in conditions.items()}

    def lookup(self, probe_keys: pa.Table) -> DeltaBatch:
        conditions: dict[str, dict[str, pa.Array]] = {}
        for key, name in zip(self.key_columns, probe_keys.column_names):
            if key in self._pushdown:
                table, source = self._pushdown[key]
                conditions.setdefault(table, {})[source] = \
                    pc.unique(probe_keys.column(name).combine_chunks())
        return evaluate_subtree(self.node, self.partitions, self._read(conditions))

    def distinct_keys(self) -> pa.Table:
        """The side's distinct keys, or a superset: when every key column copies a column
        of one table read once, that table's key columns alone (the subtree only drops
        rows), so a rebuilt filter costs a read of those columns, not the subtree over
        whole tables (at SF 10, gigabytes: it took a query's service down)."""
        sources = [self._pushdown.get(k) for k in self.key_columns]
        tables = {src[0] for src in sources if src is not None}
        if all(src is not None for src in sources) and len(tables) == 1:
            (table,) = tables
            assert self.versions is not None
            read = self.files.read(table, self.versions[table],
                                   list(dict.fromkeys(src[1] for src in sources if src)))
            keys = pa.table({k: read.column(src[1]) for k, src in zip(self.key_columns, sources)
                             if src is not None})
            return keys.group_by(list(self.key_columns)).aggregate([])
        rows = evaluate_subtree(self.node, self.partitions, self._read({})).data
        rows = rows.select(list(self.key_columns))
        return rows.group_by(list(self.key_columns)).aggregate([])


def _both(a: pa.Array, b: pa.Array) -> pa.Array:
    """The values in both ``a`` and ``b`` (the smaller one where their types do not
    compare: a superset, so more rows are read, never fewer)."""
    try:
        return a.filter(pc.is_in(a, value_set=b.cast(a.type)))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return a if len(a) <= len(b) else b
