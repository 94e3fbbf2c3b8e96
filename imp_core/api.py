"""The small public API: in-memory tables, registered sketch queries, updates.

Usable with no Spark and no Ray::

    eng = Engine()
    eng.create_table("sales", table, key="sid")
    q = eng.register("SELECT brand, sum(price) AS s FROM sales GROUP BY brand "
                     "HAVING sum(price) > 5000", partitions={"sales.price": [601, 1001]})
    eng.insert("sales", new_rows)
    q.sketch, q.predicate("sales"), q.reference().sketch

Invariants: a table's rows and every registered query's state change together or not
at all; a failed call (bad schema, unknown row, bad SQL) changes nothing.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from imp_core.engine.operators.base import TableDelta
from imp_core.engine.pipeline import EngineOptions, IncrementalQuery, SketchDelta
from imp_core.engine.zset import DeltaBatch
from imp_core.errors import (
    PartitionError,
    SchemaMismatchError,
    UnknownColumnError,
    UnknownQueryError,
    UnknownTableError,
)
from imp_core.plan.nodes import PlanNode, QueryPlan
from imp_core.reference import ReferenceResult, reference_capture, reference_evaluate
from imp_core.sketch.partition import PartitionSet, PartitionSpec, build_partition_set
from imp_core.sketch.sketch import Range, Sketch

DEFAULT_FRAGMENTS = 64



@dataclass
class _Table:
    name: str
    data: pa.Table
    key: tuple[str, ...] | None
    domains: dict[str, tuple[Any, Any]] = field(default_factory=dict)


def check_schema(table: str, expected: pa.Schema, batch: pa.Table) -> pa.Table:
    """Return ``batch`` with ``expected``'s column order and types, or raise."""
    names = set(batch.schema.names)
    missing = [f.name for f in expected if f.name not in names]
    extra = [n for n in batch.schema.names if n not in set(expected.names)]
    if missing or extra:
        raise SchemaMismatchError(
            f"batch for {table} does not match its schema: missing {missing or 'none'}, "
            f"unexpected {extra or 'none'}")
    batch = batch.select(expected.names)
    for f in expected:
        got = batch.schema.field(f.name).type
        if got != f.type:
            same_kind = (pa.types.is_integer(got) and pa.types.is_integer(f.type)) or \
                (pa.types.is_floating(got) and pa.types.is_floating(f.type)) or \
                (pa.types.is_string(got) or pa.types.is_large_string(got)
                 or pa.types.is_string_view(got)) and pa.types.is_string(f.type)
            if not same_kind:
                raise SchemaMismatchError(
                    f"column {table}.{f.name} has type {got}, expected {f.type}")
    try:
        return batch.cast(expected)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise SchemaMismatchError(f"batch for {table} cannot be stored: {exc}") from None


class RegisteredQuery:
    """A query whose sketch the engine keeps fresh."""

    def __init__(self, engine: Engine, name: str, plan: QueryPlan, partitions: PartitionSet,
                 pipeline: IncrementalQuery, verdicts: list):
        self.engine = engine
        self.name = name
        self.plan = plan
        self.partitions = partitions
        self.pipeline = pipeline
        self.verdicts = verdicts
        self.history: list[SketchDelta] = []

    @property
    def sql(self) -> str:
        return self.plan.sql

    @property
    def sketch(self) -> Sketch:
        return self.pipeline.sketch()

    def ranges(self, table: str) -> list[Range]:
        return self.sketch.ranges(table)

    def predicate(self, table: str) -> str:
        return self.sketch.predicate(table)

    def result(self) -> pa.Table:
        """The maintained query result (a row per tuple occurrence)."""
        batch = self.pipeline.result()
        idx = np.repeat(np.arange(len(batch)), np.maximum(batch.weights, 0))
        return batch.data.take(pa.array(idx, type=pa.int64()))

    def result_rows(self) -> Counter:
        out: Counter = Counter()
        for (row, _), m in self.pipeline.result().to_counter().items():
            out[row] += m
        return out

    def reference(self) -> ReferenceResult:
        """Recapture from scratch on the current tables (the non-incremental oracle)."""
        return reference_capture(self.plan, self.engine.tables(), self.partitions)


class Engine:
    """In-memory tables plus the incremental pipelines of the queries registered on them."""

    def __init__(self, options: EngineOptions = EngineOptions()):
        self.options = options
        self._tables: dict[str, _Table] = {}
        self._queries: dict[str, RegisteredQuery] = {}

    # -- tables -------------------------------------------------------------------------
    def create_table(self, name: str, data: pa.Table, key: str | Sequence[str] | None = None,
                     domains: Mapping[str, tuple[Any, Any]] | None = None) -> None:
        name = name.lower()
        if name in self._tables:
            raise SchemaMismatchError(f"table {name} already exists")
        keys = (key,) if isinstance(key, str) else (tuple(key) if key else None)
        for k in keys or ():
            if k not in data.schema.names:
                raise UnknownColumnError(f"key column {k!r} is not a column of {name}")
        self._tables[name] = _Table(name, data.combine_chunks(), keys, dict(domains or {}))

    def tables(self) -> dict[str, pa.Table]:
        return {n: t.data for n, t in self._tables.items()}

    def table(self, name: str) -> pa.Table:
        return self._get(name).data

    def catalog(self) -> dict[str, pa.Schema]:
        return {n: t.data.schema for n, t in self._tables.items()}

    def _get(self, name: str) -> _Table:
        try:
            return self._tables[name.lower()]
        except KeyError:
            raise UnknownTableError(f"unknown table {name!r}; known: "
                                    f"{', '.join(sorted(self._tables)) or 'none'}") from None

    # -- queries ----------------------------------------------------------------------
    def register(self, sql: str, partitions: Mapping[str, PartitionSpec] | None = None,
                 name: str | None = None, force: bool = False,
                 fragments: int = DEFAULT_FRAGMENTS) -> RegisteredQuery:
        """Plan ``sql``, check sketch safety, capture the initial sketch and state.

        ``partitions`` maps "table.column" to a fragment count (equi-depth on current
        data), explicit split points, or a ``RangePartition``; by default the query's
        ``-- sketch: table.column`` header is used with ``fragments`` fragments.
        """
        from imp_core.safety import require_safe
        from imp_core.sql import parse_sketch_header, plan_sql

        plan = plan_sql(sql, self.catalog())
        if partitions is None:
            header = parse_sketch_header(sql)
            if not header:
                raise PartitionError("no partitions given and the SQL has no "
                                     "'-- sketch: table.column' header")
            partitions = {f"{t}.{c}": fragments for t, c in header}
        pset = self._partition_set(partitions)
        domains = {n: t.domains for n, t in self._tables.items()}
        columns = {n: t.data.schema.names for n, t in self._tables.items()}
        verdicts = require_safe(plan, [(p.table, p.column) for p in pset.partitions],
                                domains=domains, force=force, table_columns=columns)
        qname = name or f"q{len(self._queries) + 1}"
        if qname in self._queries:
            raise SchemaMismatchError(f"a query named {qname} is already registered")
        pipeline = IncrementalQuery(plan, pset, self.options, source=self._source(pset))
        tables = plan.root.tables()
        pipeline.apply({t: TableDelta.inserts(self._get(t).data) for t in tables})
        q = RegisteredQuery(self, qname, plan, pset, pipeline, verdicts)
        self._queries[qname] = q
        return q

    def _source(self, pset: PartitionSet):
        def source(node: PlanNode) -> DeltaBatch:
            return reference_evaluate(node, self.tables(), pset).to_batch()
        return source

    def _partition_set(self, specs: Mapping[str, PartitionSpec]) -> PartitionSet:
        return build_partition_set(specs, lambda t: self._get(t).data.schema,
                                   lambda t, c: self._get(t).data.column(c))

    def query(self, name: str) -> RegisteredQuery:
        try:
            return self._queries[name]
        except KeyError:
            raise UnknownQueryError(f"no registered query {name!r}") from None

    def queries(self) -> list[RegisteredQuery]:
        return list(self._queries.values())

    def drop(self, name: str) -> None:
        self.query(name)
        del self._queries[name]

    # -- updates ------------------------------------------------------------------------
    def insert(self, table: str, rows: pa.Table) -> dict[str, SketchDelta]:
        return self.apply(table, inserts=rows)

    def delete(self, table: str, rows: pa.Table) -> dict[str, SketchDelta]:
        """Delete one stored occurrence per given row (by key if the table has one)."""
        return self.apply(table, deletes=rows)

    def update(self, table: str, old_rows: pa.Table, new_rows: pa.Table
               ) -> dict[str, SketchDelta]:
        return self.apply(table, inserts=new_rows, deletes=old_rows)

    def apply(self, table: str, inserts: pa.Table | None = None,
              deletes: pa.Table | None = None) -> dict[str, SketchDelta]:
        """Apply deletions then insertions to ``table`` atomically; maintain all sketches."""
        t = self._get(table)
        schema = t.data.schema
        ins = check_schema(t.name, schema, inserts) if inserts is not None else \
            schema.empty_table()
        dels = check_schema(t.name, schema, deletes) if deletes is not None else \
            schema.empty_table()
        positions = self._locate(t, dels)  # raises before anything changes
        removed = t.data.take(pa.array(positions, type=pa.int64()))
        keep = np.ones(t.data.num_rows, dtype=bool)
        keep[positions] = False
        new_data = pa.concat_tables([t.data.filter(pa.array(keep)), ins]).combine_chunks()
        if t.key:
            self._check_unique(t, new_data)
        rows = pa.concat_tables([removed, ins])
        weights = np.concatenate([-np.ones(len(positions), np.int64),
                                  np.ones(ins.num_rows, np.int64)])
        delta = TableDelta(rows, weights)
        t.data = new_data
        out = {}
        for q in self._queries.values():
            if t.name in q.plan.root.tables():
                d = q.pipeline.apply({t.name: delta})
                q.history.append(d)
                out[q.name] = d
        return out

    def _locate(self, t: _Table, dels: pa.Table) -> list[int]:
        if dels.num_rows == 0:
            return []
        cols = list(t.key) if t.key else t.data.schema.names
        stored: dict[tuple, list[int]] = {}
        for i, row in enumerate(zip(*[t.data.column(c).to_pylist() for c in cols])):
            stored.setdefault(row, []).append(i)
        out = []
        for row in zip(*[dels.column(c).to_pylist() for c in cols]):
            hits = stored.get(row)
            if not hits:
                what = dict(zip(cols, row))
                raise SchemaMismatchError(f"cannot delete from {t.name}: no row {what}")
            out.append(hits.pop())
        return out

    @staticmethod
    def _check_unique(t: _Table, data: pa.Table) -> None:
        keys = data.select(list(t.key)).group_by(list(t.key)).aggregate([([], "count_all")])
        dup = keys.filter(pc.greater(keys.column("count_all"), 1))
        if dup.num_rows:
            raise SchemaMismatchError(f"duplicate key in {t.name}: {dup.slice(0, 1).to_pylist()}")


def load_tables(engine: Engine, tables: Mapping[str, pa.Table],
                keys: Mapping[str, Iterable[str] | None] | None = None) -> None:
    for name, data in tables.items():
        engine.create_table(name, data, key=tuple((keys or {}).get(name) or ()) or None)
