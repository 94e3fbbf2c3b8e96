"""The small public API: in-memory tables, registered sketch queries, updates.

Usable with no Spark and no Ray::

    eng = Engine()
    eng.create_table("sales", table, key="sid")
    q = eng.register("SELECT brand, sum(price) AS s FROM sales GROUP BY brand "
                     "HAVING sum(price) > 5000", partitions={"sales.price": [601, 1001]})
    eng.insert("sales", new_rows)
    q.sketch, q.predicate("sales"), q.reference().sketch

Invariants: a table's rows and every registered query's state change together or not
at all; a failed call (bad schema, unknown row, bad SQL) changes nothing. A deletion
costs about the rows it deletes, with or without a key (``imp_core.embedded.memtable``).
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pyarrow as pa

from imp_core.embedded.memtable import MemTable
from imp_core.engine.operators.base import TableDelta
from imp_core.engine.pipeline import EngineOptions, IncrementalQuery, SketchDelta
from imp_core.engine.zset import DeltaBatch
from imp_core.errors import (
    DroppedQueryError,
    PartitionError,
    SchemaMismatchError,
    UnknownColumnError,
    UnknownQueryError,
    UnknownTableError,
)
from imp_core.oracle.reference import ReferenceResult, reference_capture, reference_evaluate
from imp_core.plan.empty_input import sql_row_over_empty
from imp_core.plan.nodes import PlanNode, QueryPlan
from imp_core.query.driver import QueryDriver
from imp_core.query.prepare import DEFAULT_FRAGMENTS
from imp_core.sketch.partition import (
    PartitionSet,
    PartitionSpec,
    RangePartition,
)
from imp_core.sketch.sketch import Range, Sketch
from imp_core.storage.batches import conform


class RegisteredQuery:
    """A query whose sketch the engine keeps fresh: the handle ``Engine.register``
    returns, the very object ``Engine.query(name)`` gives.

    Invariants: the engine never re-partitions a query (its ranges are those of the
    registration), so the handle is always the registry's current one; once the query is
    dropped (``Engine.drop``) every read but ``name`` raises ``DroppedQueryError`` rather
    than answer from the state it had.
    """

    def __init__(self, engine: Engine, name: str, plan: QueryPlan, partitions: PartitionSet,
                 driver: QueryDriver, verdicts: list, advice: Any = None):
        self.name = name
        self._engine = engine
        # the attributes considered and why these were chosen (``imp_core.advice.attributes``)
        self._advice = advice
        self._plan = plan
        self._partitions = partitions
        self._driver: QueryDriver | None = driver
        self._verdicts = verdicts
        self._history: list[SketchDelta] = []

    @property
    def dropped(self) -> bool:
        return self._driver is None

    def _alive(self) -> QueryDriver:
        if self._driver is None:
            raise DroppedQueryError(f"query {self.name!r} was dropped: this handle no "
                                    "longer answers (register it again for a new one)")
        return self._driver

    def _retire(self) -> None:
        self._driver = None  # the pipeline's memory goes with it

    @property
    def engine(self) -> Engine:
        self._alive()
        return self._engine

    @property
    def advice(self) -> Any:
        self._alive()
        return self._advice

    @property
    def plan(self) -> QueryPlan:
        self._alive()
        return self._plan

    @property
    def partitions(self) -> PartitionSet:
        self._alive()
        return self._partitions

    @property
    def driver(self) -> QueryDriver:
        return self._alive()

    @property
    def verdicts(self) -> list:
        self._alive()
        return self._verdicts

    @property
    def history(self) -> list[SketchDelta]:
        self._alive()
        return self._history

    @property
    def pipeline(self) -> IncrementalQuery:
        return self.driver.pipeline

    @property
    def sql(self) -> str:
        return self.plan.sql

    @property
    def sketch(self) -> Sketch:
        return self.pipeline.sketch()

    def ranges(self, table: str) -> list[Range]:
        return self.sketch.ranges(table)

    def explain(self) -> dict[str, Any]:
        """The advice of the registration (``Advice.to_json``) with the current sketch's
        size and, for a sketch covering all or none of a table, why (``coverage``)."""
        from imp_core.advice.attributes import explanation

        return explanation(self.advice, self.plan, self.sketch)

    def predicate(self, table: str) -> str:
        return self.sketch.predicate(table)

    def partition(self, table: str) -> RangePartition:
        """The range partition of ``table`` this query's sketch is built on."""
        found = self.partitions.for_table(table.lower())
        if found is None:
            sketched = ", ".join(p.table for p in self.partitions.partitions) or "none"
            raise PartitionError(f"query {self.name} has no partition on table {table!r}; "
                                 f"partitioned tables: {sketched}")
        return found[0]

    def bounds(self, table: str) -> list[Any]:
        """The split points of ``table``'s partition (fragment i is [b[i-1], b[i]))."""
        return list(self.partition(table).bounds)

    def result(self) -> pa.Table:
        """The maintained query result (a row per tuple occurrence), as SQL returns it:
        an aggregation without GROUP BY over no rows gives its one row of COUNT 0 and
        NULLs (``imp_core.plan.empty_input``). ``SqlRuntimeError`` while the query
        raises (ANSI mode, ``imp_core.plan.ansi``)."""
        self.pipeline.errors.check()
        batch = self.pipeline.result()
        idx = np.repeat(np.arange(len(batch)), np.maximum(batch.weights, 0))
        out = batch.data.take(pa.array(idx, type=pa.int64()))
        if len(idx) == 0:
            out = sql_row_over_empty(self.plan.root) or out
        # a repeated output name of the SQL (Spark allows it) is shown as written
        return out.rename_columns(list(self.plan.output_names)) if self.plan.output_names \
            else out

    def result_rows(self) -> Counter:
        """The result as {row tuple: multiplicity} (SQL's row over no input included)."""
        self.pipeline.errors.check()
        out: Counter = Counter()
        for (row, _), m in self.pipeline.result().to_counter().items():
            out[row] += m
        if not out:
            empty = sql_row_over_empty(self.plan.root)
            for row in empty.to_pylist() if empty is not None else []:
                out[tuple(row.values())] += 1
        return out

    def reference(self) -> ReferenceResult:
        """Recapture from scratch on the current tables (the non-incremental oracle)."""
        return reference_capture(self.plan, self.engine.tables(), self.partitions)


class Engine:
    """In-memory tables plus the incremental pipelines of the queries registered on them."""

    def __init__(self, options: EngineOptions = EngineOptions(), ansi: bool = False):
        """``ansi``: the session's ANSI mode (Spark's ``spark.sql.ansi.enabled``, off by
        default); a query's leading ``SET spark.sql.ansi.enabled = ...`` overrides it."""
        self.options = options
        self.ansi = ansi
        self._tables: dict[str, MemTable] = {}
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
        self._tables[name] = MemTable(name, data, keys, dict(domains or {}))

    def tables(self) -> dict[str, pa.Table]:
        return {n: t.data for n, t in self._tables.items()}

    def table(self, name: str) -> pa.Table:
        return self._get(name).data

    def catalog(self) -> dict[str, pa.Schema]:
        return {n: t.schema for n, t in self._tables.items()}

    def _get(self, name: str) -> MemTable:
        try:
            return self._tables[name.lower()]
        except KeyError:
            raise UnknownTableError(f"unknown table {name!r}; known: "
                                    f"{', '.join(sorted(self._tables)) or 'none'}") from None

    # -- queries ----------------------------------------------------------------------
    def register(self, sql: str, partitions: Mapping[str, PartitionSpec] | str | None = None,
                 name: str | None = None, force: bool = False,
                 fragments: int = DEFAULT_FRAGMENTS) -> RegisteredQuery:
        """Plan ``sql``, check sketch safety, capture the initial sketch and state.

        ``partitions`` maps "table.column" to a fragment count (equi-depth on current
        data), explicit split points, or a ``RangePartition``; by default the query's
        ``-- sketch: table.column`` header is used with ``fragments`` fragments; "auto"
        (or neither given) lets the advisor choose (``imp_core.advice.attributes``).
        """
        from imp_core.query.prepare import prepare_query

        prepared = prepare_query(sql, self, partitions, fragments, force,
                                 capture=self._capture, ansi=self.ansi)
        plan, pset, verdicts = prepared.plan, prepared.partitions, list(prepared.verdicts)
        qname = name or f"q{len(self._queries) + 1}"
        if qname in self._queries:
            raise SchemaMismatchError(f"a query named {qname} is already registered")
        # in-memory tables have no versions: every step is from {} to {}
        driver = QueryDriver.start(plan, pset, self.options, refill=self._source(pset))
        driver.step(None, {}, {t: TableDelta.inserts(self._get(t).data)
                               for t in plan.root.tables()})
        q = RegisteredQuery(self, qname, plan, pset, driver, verdicts, prepared.advice)
        self._queries[qname] = q
        return q

    # -- what preparing a query reads (``imp_core.query.prepare.TableSource``) -----------------
    def column(self, table: str, column: str) -> pa.ChunkedArray:
        return self.table(table).column(column)

    def domains(self, table: str) -> Mapping[str, tuple[Any, Any]]:
        return dict(self._get(table).domains)

    def versions(self, tables: list[str]) -> dict[str, int]:
        return {}  # in-memory tables are not versioned

    def cluster_columns(self, table: str) -> tuple[str, ...]:
        """The first key column: a sketch attribute candidate of every query."""
        return tuple(self._get(table).key or ())[:1]

    def _capture(self, plan: QueryPlan, pset: PartitionSet, versions: Mapping[str, int]
                 ) -> Sketch:
        """The accurate sketch over the current tables (the attribute advisor's)."""
        return reference_capture(plan, self.tables(), pset).sketch

    def _source(self, pset: PartitionSet):
        def source(node: PlanNode) -> DeltaBatch:
            return reference_evaluate(node, self.tables(), pset).to_batch()
        return source

    def query(self, name: str) -> RegisteredQuery:
        try:
            return self._queries[name]
        except KeyError:
            raise UnknownQueryError(f"no registered query {name!r}") from None

    def queries(self) -> list[RegisteredQuery]:
        return list(self._queries.values())

    def drop(self, name: str) -> None:
        """Forget the query: its handles raise ``DroppedQueryError`` from now on."""
        q = self.query(name)
        del self._queries[name]
        q._retire()

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
        empty = t.schema.empty_table()
        ins = empty if inserts is None else conform(inserts, t.schema, t.name, "insert batch")
        dels = empty if deletes is None else conform(deletes, t.schema, t.name, "delete batch")
        change = t.prepare(ins, dels)  # raises before anything changes
        rows = pa.concat_tables([change.removed, ins])
        weights = np.concatenate([-np.ones(len(change.positions), np.int64),
                                  np.ones(ins.num_rows, np.int64)])
        delta = TableDelta(rows, weights)
        t.commit(change)
        out = {}
        for q in self._queries.values():
            if t.name in q.plan.root.tables():
                d = q.driver.step({}, {}, {t.name: delta})
                q.history.append(d)
                out[q.name] = d
        return out


def load_tables(engine: Engine, tables: Mapping[str, pa.Table],
                keys: Mapping[str, Iterable[str] | None] | None = None) -> None:
    for name, data in tables.items():
        engine.create_table(name, data, key=tuple((keys or {}).get(name) or ()) or None)
