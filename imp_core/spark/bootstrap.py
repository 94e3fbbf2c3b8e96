"""A registered plan's initial operator state computed on Spark, shipped as Arrow.

For the table versions a query is registered at, every stateful operator receives exactly
the state the engine builds by consuming those tables as one insert batch (equal up to
group ids and row order; bounded min/max buffers may keep fewer surplus values), in the
layout its ``restore`` takes; ``bootstrap`` loads it with ``IncrementalQuery.load_state``.

- An aggregation or DISTINCT whose input holds no other stateful operator: one Spark query
  over the annotated input gives per group CNT, non-NULL counts, exact sums, the
  per-fragment counts F_g and the min/max multisets (the ``minmax_buffer`` best distinct
  values, flagged incomplete when there are more).
- A top-k over such an input: its entries, (tuple, annotation) -> multiplicity, cut after
  ``topk_buffer`` entries in the engine's total order.
- An operator above another stateful operator consumes that operator's output rebuilt on
  the driver from its exact state (a row per group) and is stepped by the engine: Spark's
  own AVG and double SUM round differently from the engine's exact arithmetic.
- An operator over a join whose sides are both held in memory is stepped by the engine
  over the joined rows as well: the sides' rows are shipped for the join's own state
  anyway, and joining them on the driver is cheaper than running the joins again in Spark
  (at SF 1, Q3's aggregation on Spark took longer than the whole engine path). With
  ``joins_in_spark=True`` Spark computes such operators too.
- Join sides held in memory get the side's annotated rows: Spark evaluates single-table
  inputs; the output of a join below is joined on the driver from its inputs, which are
  shipped for their own sides anyway. A side served by the data layer (``_data_side``: a
  ``SparkJoinSide``) gets its versions and a Bloom filter of the side's distinct keys;
  with ``index_served`` (the query's probes will read shared covering indexes, where a
  lookup of an absent key is a binary search), a side whose lookups read rows by key
  value (``keys_looked_up_by_value``: keys from whole table columns, or one table's
  filtered rows) is made open instead: its keys would cost a Spark aggregation of each
  table (at SF 3, 38 of TPC-H Q9's 101 s of registration; at SF 10, 3 to 8 s for each
  filtered side of Q3, Q14 and Q19) to save binary searches of absent keys.
- A semi-, anti- or outer join (``KeyedJoinOp``) with a side served by the data layer,
  whose served sides' inputs hold no other stateful operators than such joins
  (``_served_keyed_join``), is evaluated by Spark (``imp_core.spark.compile_joins``):
  its state is a served side's versions and filter and an in-memory side's rows, its
  output Spark's rows, and an aggregation or top-k above it is computed by Spark unless
  a row's annotation is a set (``_set_annotated``: a semi-join's partners, an outer
  join's padded side). Where an in-memory side's rows are the output of a join or of a
  stateful operator, Spark reads them from a view of the driver's rows
  (``imp_core.spark.driver_views``) instead of evaluating that side again: the engine's
  rows where the engine stepped them. (At SF 10, stepping TPC-H Q21's semi- and
  anti-join on the driver shipped 100 M lineitem rows for its probed sides.)
- Any other semi-, anti- or outer join, and a comparison with a scalar subquery's
  value (``ScalarFilterOp``; ``KeyedFilterOp`` where it is correlated), is built on the
  driver like an in-memory join: its output is the engine's operator stepped once over
  both inputs' annotated rows, its state those rows for a side in memory and, for a
  side served by the data layer, the versions and Bloom filter that step left
  (``state_from_sides``), so every operator above it is stepped by the engine too
  (``_driver_below``). Spark evaluates such a subtree only where the data layer serves a
  join: the output of a join with a side served by Spark, and a served side's keys.
- A set operation is stepped on the driver over both inputs' annotated rows (its state is
  the per-row counts that step leaves); a UNION ALL's output is its inputs' rows.
- μ's fragment counts and the kept result come from the root's output.

Every state is built through the operators' public methods (``state_from_groups``,
``state_from_entries``, ``state_from_sides``, ``IncrementalQuery.compose_state``), which
own the state tables' names and layout; the SQL of aggregations is in
``imp_core.spark.aggregate_sql`` (with how sums stay exact).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np
import pyarrow as pa

from imp_core.engine.annotation import Annotation
from imp_core.engine.bloom import BloomFilter
from imp_core.engine.join_index import SideIndex, key_hashes
from imp_core.engine.operators.aggregate import AggregateOp, GroupTotals
from imp_core.engine.operators.base import Operator
from imp_core.engine.operators.join import JoinOp
from imp_core.engine.operators.keyed_filter import KeyedFilterOp
from imp_core.engine.operators.keyed_join import KeyedJoinOp
from imp_core.engine.operators.probed_aggregate import GROUPS, ProbedAggregateOp
from imp_core.engine.operators.scalar_filter import ScalarFilterOp
from imp_core.engine.operators.set_ops import SetOpOp
from imp_core.engine.operators.topk import TopKOp
from imp_core.engine.operators.window import WindowOp
from imp_core.engine.pipeline import IncrementalQuery
from imp_core.engine.probed_side import ProbedSide
from imp_core.engine.zset import DeltaBatch
from imp_core.plan.lineage import keys_looked_up_by_value, one_table_inputs, trace_column
from imp_core.plan.nodes import (
    Aggregate,
    Distinct,
    Join,
    OuterJoin,
    PlanNode,
    SemiJoin,
    SetOp,
    TopK,
    Window,
    arrow_schema,
)
from imp_core.plan.shapes import unique_on
from imp_core.sketch.partition import PartitionSet
from imp_core.spark.aggregate_sql import (
    aggregate_sql,
    arrow_array,
    group_totals,
    is_overflow,
    more_ctes,
)
from imp_core.spark.collect import collect_arrow
from imp_core.spark.compile import (
    FID_COLUMN,
    AnnotatedRelation,
    annotated_relation,
    quote,
    total_order_sql,
)
from imp_core.spark.driver_views import VIEW_BYTES, DriverViews, view_bytes
from imp_core.spark.joins import fragment_views, version_views

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

ANN = "__imp_ann"
# at most this many key combinations make a probed side's Bloom filter from its tables'
# distinct keys (``_key_superset``): 8 M keys are a 10 MB filter
KEY_SUPERSET_ROWS = 8_000_000


@dataclass
class BootstrapRun:
    """What one bootstrap did: time, Spark queries, and where each operator's state came
    from ("spark": computed by a Spark query; "engine": stepped on the driver)."""

    seconds: float = 0.0
    spark_queries: int = 0
    spark_seconds: float = 0.0
    sources: dict[str, str] = field(default_factory=dict)
    # per Spark query, in order: what it computed, its seconds and rows shipped
    queries: list[tuple[str, float, int]] = field(default_factory=list)
    # in-memory join sides handed back to Spark as views of their rows: what, rows
    views: list[tuple[str, int]] = field(default_factory=list)


def bootstrap(spark: SparkSession, store: Any, pipeline: IncrementalQuery,
              versions: Mapping[str, int], joins_in_spark: bool = False,
              index_served: bool = False) -> BootstrapRun:
    """Compute the state of ``pipeline`` (fresh, of a registered plan) for the tables at
    ``versions`` on Spark and load it; returns what was done."""
    t0 = time.perf_counter()
    tables, run = bootstrap_tables(spark, store, pipeline, versions, joins_in_spark,
                                   index_served)
    pipeline.load_state(tables, batches=1)
    run.seconds = time.perf_counter() - t0
    return run


def bootstrap_tables(spark: SparkSession, store: Any, pipeline: IncrementalQuery,
                     versions: Mapping[str, int], joins_in_spark: bool = False,
                     index_served: bool = False
                     ) -> tuple[dict[str, pa.Table], BootstrapRun]:
    """The state tables (``IncrementalQuery.state_tables`` layout) without loading them."""
    t0 = time.perf_counter()
    b = _Bootstrap(spark, store, pipeline, versions, joins_in_spark, index_served)
    tables = b.run()
    b.stats.seconds = time.perf_counter() - t0
    return tables, b.stats


# nodes whose output the bootstrap rebuilds from their state or steps on the driver: the
# operators above them are stepped by the engine as well
_STATEFUL_NODES = (Aggregate, Distinct, TopK, SemiJoin, OuterJoin, SetOp, Window)


def has_stateful(node: PlanNode) -> bool:
    """Whether ``node``'s subtree holds a stateful operator other than an inner join: an
    aggregation, DISTINCT, top-k, window, a semi-, anti- or outer join, or a set operation
    (a UNION ALL holds no state, but its output is its inputs' and is stepped the same
    way)."""
    return any(isinstance(n, _STATEFUL_NODES) for n in node.walk())


class _Bootstrap:
    """One bootstrap: a scratch wiring of the plan whose operators are filled bottom-up."""

    def __init__(self, spark: SparkSession, store: Any, pipeline: IncrementalQuery,
                 versions: Mapping[str, int], joins_in_spark: bool = False,
                 index_served: bool = False):
        self.spark = spark
        self.joins_in_spark = joins_in_spark
        self.index_served = index_served
        self.store = store
        self.partitions: PartitionSet = pipeline.partitions
        self.options = pipeline.options
        self.versions = {t: versions[t] for t in sorted(pipeline.plan.root.tables())}
        # a scratch wiring: the target pipeline stays untouched until load_state. Its
        # aggregations hold their groups even where the target's data layer does: their
        # state gives the first output, and a probed aggregation ignores it on loading
        chooser = pipeline.join_sides
        sides = None if chooser is None else (
            lambda node, which: None if which == GROUPS else chooser(node, which))
        self.scratch = IncrementalQuery(pipeline.plan, pipeline.partitions, pipeline.options,
                                        None, sides)
        # aggregations the target holds no groups of: Spark's totals give their first
        # output directly (a key index of millions of groups only to be dropped is not built)
        self.probed = {op.op_id for op in pipeline.operators
                       if isinstance(op, ProbedAggregateOp)}
        self.stats = BootstrapRun()
        self.outputs: dict[str, DeltaBatch] = {}
        self.states: dict[str, dict[str, pa.Table]] = {}
        self.views: dict[str, str] = {}
        self.fragment_views: dict[str, str] = {}
        self._served: dict[str, bool] = {}  # op id -> ``_served_keyed_join``
        self.row_views = DriverViews(spark)  # in-memory sides Spark reads back

    # -- driver ---------------------------------------------------------------------
    def run(self) -> dict[str, pa.Table]:
        self._make_views()
        try:
            # Spark's joins first, lowest first: every view of an in-memory side exists
            # before any query over it is compiled (a subtree compiles the same throughout)
            self._serve_keyed_joins(self.scratch.root)
            root = self.output(self.scratch.root)
            pending = [self.scratch.root]
            while pending:
                w = pending.pop()
                pending.extend(w.children)
                if w.op.stateful:
                    self.state(w)
            return self.scratch.compose_state(self.states, root.consolidate())
        finally:
            self.row_views.drop()

    def _serve_keyed_joins(self, w) -> None:
        for child in w.children:
            self._serve_keyed_joins(child)
        if self._served_keyed_join(w):
            self.state(w)

    def _make_views(self) -> None:
        """Temp views of the tables at the versions, and of partitioned tables with their
        rows' global fragment ids."""
        self.views = version_views(self.spark, self.store, self.versions)
        self.fragment_views = fragment_views(self.spark, self.views, self.partitions)

    def _relation(self, node: PlanNode) -> AnnotatedRelation:
        return annotated_relation(node, self.partitions, "view", self.views, self.fragment_views,
                                  self.row_views.relations)

    def _collect(self, sql: str, what: str) -> pa.Table:
        t0 = time.perf_counter()
        out = collect_arrow(self.spark.sql(sql))
        seconds = time.perf_counter() - t0
        self.stats.spark_queries += 1
        self.stats.spark_seconds += seconds
        self.stats.queries.append((what, round(seconds, 3), out.num_rows))
        log.debug("bootstrap: %s on Spark: %.2f s, %d rows", what, seconds, out.num_rows)
        return out

    # -- outputs ----------------------------------------------------------------------
    def output(self, w) -> DeltaBatch:
        """The full annotated output of wired node ``w`` at the versions."""
        key = w.op.op_id
        if key not in self.outputs:
            self.outputs[key] = self._output(w)
        return self.outputs[key]

    def _output(self, w) -> DeltaBatch:
        op, node = w.op, w.node
        if not has_stateful(node) and not any(isinstance(n, Join) for n in node.walk()):
            return self._rows(node)  # a single-table chain: Spark filters and projects
        if op.stateful and not isinstance(op, JoinOp):
            state = self.state(w)
            if op.op_id in self.outputs:
                return self.outputs[op.op_id]  # stepped by state(), or a probed one's
            if self._served_keyed_join(w):
                return self._rows(node)  # Spark joins: its sides hold no rows
            return _output_from_state(op, state)
        if isinstance(op, JoinOp):
            if _in_memory(op.left) and _in_memory(op.right):
                out = op.step([self.output(c) for c in w.children])
                self.states[op.op_id] = op.snapshot()
                self.stats.sources[op.op_id] = "engine"
                return out
            return self._rows(node)  # a side served by Spark: Spark joins
        return op.step([self.output(c) for c in w.children])  # selection, projection

    def _rows(self, node: PlanNode) -> DeltaBatch:
        """``node``'s annotated rows evaluated by Spark."""
        rel = self._relation(node)
        cols = ", ".join(quote(c) for c in rel.columns)
        if len(rel.ann) == 1 and not rel.ann[0][1]:
            ann = f"{quote(rel.ann[0][0])} AS {quote(FID_COLUMN)}"
        else:
            ann = f"{rel.annotation_sql} AS {quote(ANN)}"
        out = self._collect(f"{rel.with_clause}SELECT {cols}, {ann}\nFROM {rel.name}",
                            f"rows of {_label(node)}")
        return _to_batch(out, arrow_schema(node.schema), np.ones(out.num_rows, np.int64))

    # -- states -----------------------------------------------------------------------
    def state(self, w) -> dict[str, pa.Table]:
        op = w.op
        if op.op_id in self.states:
            return self.states[op.op_id]
        if isinstance(op, JoinOp):
            state = op.state_from_sides(self._side(op.left, w.children[0]),
                                        self._side(op.right, w.children[1]))
            self.stats.sources[op.op_id] = "spark" if not (
                _in_memory(op.left) and _in_memory(op.right)) else "engine"
        elif self._served_keyed_join(w):
            # a side served by the data layer holds versions (and a filter), no rows; a
            # side in memory its rows. The output, where an operator above asks for it,
            # is Spark's evaluation of the join (``_output``)
            state = op.state_from_sides(self._served_side(op.left, w.children[0]),
                                        self._served_side(op.right, w.children[1]))
            self.stats.sources[op.op_id] = "spark"
        elif isinstance(op, (KeyedJoinOp, ScalarFilterOp, KeyedFilterOp)):
            # the output is one engine step over both inputs' rows; a side in memory holds
            # those rows, a side served by the data layer the versions and Bloom filter
            # that step gave it (the batch context is at the bootstrap's versions)
            left, right = (self.output(c) for c in w.children)
            self.outputs[op.op_id] = op.step([left, right]) if len(left) or len(right) \
                else op.empty()
            state = op.state_from_sides(
                op.left.snapshot() if _data_side(op.left) else
                SideIndex.state_from_rows(left),
                op.right.snapshot() if _data_side(op.right) else
                SideIndex.state_from_rows(right))
            self.stats.sources[op.op_id] = "engine"
        elif isinstance(op, SetOpOp):
            # one engine step over both inputs' annotated rows, as for a keyed join
            left, right = (self.output(c) for c in w.children)
            self.outputs[op.op_id] = op.step([left, right]) if len(left) or len(right) \
                else op.empty()
            state = op.snapshot()
            self.stats.sources[op.op_id] = "engine"
        elif self._driver_below(w.children[0]) or (
                not self.joins_in_spark and self._memory_join_below(w.children[0])) or \
                self._set_annotated(w.children[0].node):
            # above another stateful operator (or joined rows the driver holds anyway):
            # step the engine's operator over its input, rebuilt from the lower operators'
            # exact state
            self.outputs[op.op_id] = op.step([self.output(w.children[0])])
            state = op.snapshot()
            self.stats.sources[op.op_id] = "engine"
        elif isinstance(op, AggregateOp):
            totals = self._aggregate_totals(op, w.children[0].node)
            if op.op_id in self.probed:
                self.outputs[op.op_id] = op.output_from_groups(totals)
                state = op.snapshot()  # no group: the layout the target's operator keeps
            else:
                state = op.state_from_groups(totals)
            self.stats.sources[op.op_id] = "spark"
        elif isinstance(op, TopKOp):
            state = self._topk_state(op, w.children[0].node)
            self.stats.sources[op.op_id] = "spark"
        elif isinstance(op, WindowOp):
            # its input's rows from Spark, the window stepped once over them
            rows = self.output(w.children[0])
            self.outputs[op.op_id] = op.step([rows]) if len(rows) else op.empty()
            state = op.snapshot()
            self.stats.sources[op.op_id] = "spark"
        else:  # pragma: no cover - every stateful operator is handled above
            raise TypeError(f"no bootstrap for {type(op).__name__}")
        self.states[op.op_id] = state
        return state

    def _served_keyed_join(self, w) -> bool:
        """Whether wired ``w`` is a semi-, anti- or outer join with a side served by the
        data layer, each served side over an input whose stateful operators are such
        joins too: Spark evaluates it exactly (``imp_core.spark.compile_joins``, the
        engine's semantics and provenance), so no served side's rows are shipped and
        nothing of it is stepped on the driver. (At SF 10, stepping TPC-H Q13's outer
        join over 15 M shipped orders took 30 of its 41 s.)"""
        key = w.op.op_id
        if key not in self._served:  # asked at every level above: decided once
            op = w.op
            self._served[key] = isinstance(op, KeyedJoinOp) and \
                (_data_side(op.left) or _data_side(op.right)) and \
                not any(self._driver_below(c) for side, c in
                        zip((op.left, op.right), w.children) if _data_side(side))
        return self._served[key]

    def _served_side(self, side, child) -> pa.Table:
        """The state of a side of a join Spark evaluates: a served side's versions and
        filter, an in-memory side's rows. Those rows become the view Spark's queries
        read for ``child`` where the engine stepped them (Spark's own evaluation could
        round otherwise), or where they come out of a join and are few enough that
        shipping them back costs less than joining again."""
        if _in_memory(side):
            rows = self.output(child)
            if self._driver_below(child) or (
                    _joined(child.node) and view_bytes(rows) <= VIEW_BYTES):
                self.row_views.add(child.node, rows)
                self.stats.views.append((_label(child.node), len(rows)))
        return self._side(side, child)

    def _driver_below(self, w) -> bool:
        """Whether wired subtree ``w`` holds a stateful operator whose output is rebuilt
        or stepped on the driver (every one but a join Spark evaluates,
        ``_served_keyed_join``): an operator above is then stepped by the engine too."""
        if self._served_keyed_join(w):
            return False
        return isinstance(w.node, _STATEFUL_NODES) or \
            any(self._driver_below(c) for c in w.children)

    def _memory_join_below(self, w) -> bool:
        """Whether the wired subtree ``w`` holds a join with both sides in memory (whose
        output the bootstrap computes on the driver): an inner join without a side
        served by the data layer, or a semi-, anti- or outer join not served
        (``_served_keyed_join``)."""
        if isinstance(w.op, (KeyedJoinOp, ScalarFilterOp, KeyedFilterOp)) and \
                not self._served_keyed_join(w):
            return True
        if isinstance(w.op, JoinOp) and _in_memory(w.op.left) and _in_memory(w.op.right):
            return True
        return any(self._memory_join_below(c) for c in w.children)

    def _set_annotated(self, node: PlanNode) -> bool:
        """Whether Spark's rows of ``node`` carry a set of fragments in an annotation
        column (a semi-join's partners, an outer join's padded side), which the
        aggregation and top-k queries do not read: the operator above is then stepped
        by the engine over those rows."""
        return any(is_set for _, is_set in self._relation(node).ann)

    def _side(self, side, child) -> pa.Table:
        if _data_side(side):
            return self._data_side_state(side, child.node)
        return SideIndex.state_from_rows(self.output(child))

    def _data_side_state(self, side: DataSide, node: PlanNode) -> pa.Table:
        """A side served by the data layer holds its versions and a Bloom filter of its
        keys, or is open (the module docstring)."""
        side.versions = {t: self.versions[t] for t in side.tables}
        side.bloom = None
        if side.use_bloom and self.index_served and \
                keys_looked_up_by_value(node, side.key_columns):
            side.make_open()
        elif side.use_bloom:
            distinct = self._key_superset(node, side.key_columns)
            if distinct is None:
                rel = self._relation(node)
                keys = ", ".join(quote(k) for k in side.key_columns)
                select = self._select_keys(node, side.key_columns)
                distinct = self._collect(f"{rel.with_clause}{select}{keys}\nFROM {rel.name}",
                                         f"Bloom keys {keys} of {_label(node)}")
            hashes, valid, _ = key_hashes(distinct, side.key_columns)
            side.bloom = BloomFilter.for_keys(int(valid.sum()))
            side.bloom.add(hashes[valid])
        return side.snapshot()

    def _select_keys(self, node: PlanNode, keys: Sequence[str]) -> str:
        """"SELECT " where ``node``'s rows are unique by ``keys`` (``unique_on``, e.g. a
        table's scan with ``keys`` copying its declared key), else "SELECT DISTINCT ". A
        Bloom filter is the same over repeated keys, so DISTINCT only saves shipping them;
        over a table's key it is a shuffle of the table for nothing (at SF 10, orders'
        15 M keys for TPC-H Q12: 10.5 s)."""
        entry = getattr(self.store, "entry", None)

        def table_key(table: str) -> tuple[str, ...]:
            return tuple(getattr(entry(table), "key", None) or ()) if entry else ()

        return "SELECT " if unique_on(node, tuple(keys), table_key) else "SELECT DISTINCT "

    def _key_superset(self, node: PlanNode, key_columns: tuple[str, ...]) -> pa.Table | None:
        """A superset of a joined ``node``'s distinct key tuples without running its joins,
        when every key column is an output column of a one-table input of ``node`` (a
        table's scan with its filters and projections, which the joins above only drop
        and pair rows of): per such input, the distinct values of its key columns, and
        across inputs every combination of them. None where a key has no such input or
        the combinations pass ``KEY_SUPERSET_ROWS``; the subtree's own distinct keys are
        then computed. A side's Bloom filter may hold more keys than the side (a probe
        then finds no partner), never fewer; at SF 10 the subtree's keys cost a run of its
        joins (about 18 s each for TPC-H Q5's two probed sides)."""
        if not any(isinstance(n, Join) for n in node.walk()):
            return None
        inputs = one_table_inputs(node)
        by_input: dict[int, list[str]] = {}
        for key in key_columns:
            # the key copies a column of one scan, and that scan's input outputs it as is
            source = trace_column(node, key, through_padding=True)
            at = [i for i, sub in enumerate(inputs)
                  if source is not None and key in sub.column_names
                  and trace_column(sub, key) == source]
            if len(at) != 1:
                return None
            by_input.setdefault(at[0], []).append(key)
        parts: list[pa.Table] = []
        total = 1
        for i, keys in by_input.items():
            rel = self._relation(inputs[i])
            # more than the combinations can take (with the inputs before) ends it
            limit = KEY_SUPERSET_ROWS // total
            found = self._collect(f"{rel.with_clause}{self._select_keys(inputs[i], keys)}"
                                  f"{', '.join(quote(k) for k in keys)}\nFROM {rel.name}"
                                  f"\nLIMIT {limit + 1}",
                                  f"key superset {keys} of {_label(inputs[i])}")
            if found.num_rows > limit:
                return None
            total *= max(1, found.num_rows)
            parts.append(found.select(keys))
        out = parts[0]
        for part in parts[1:]:  # every combination: rows of ``out`` times rows of ``part``
            left = np.repeat(np.arange(out.num_rows), part.num_rows)
            right = np.tile(np.arange(part.num_rows), out.num_rows)
            out = pa.table({**{n: out.column(n).take(left) for n in out.column_names},
                            **{n: part.column(n).take(right) for n in part.column_names}})
        return out.select(list(key_columns))

    def _aggregate_totals(self, op: AggregateOp, input_node: PlanNode) -> GroupTotals:
        rel = self._relation(input_node)
        buffer = self.options.minmax_buffer
        sql, plan = aggregate_sql(op, rel, buffer)
        try:
            res = self._collect(sql, f"aggregation {op.op_id}")
        except Exception as exc:  # noqa: BLE001 - only an overflow is retried
            if not is_overflow(exc):
                raise
            sql, plan = aggregate_sql(op, rel, buffer, wide_sums=True)
            res = self._collect(sql, f"aggregation {op.op_id} (wide sums)")
        return group_totals(op, res, plan, buffer, self.partitions.size)

    def _topk_state(self, op: TopKOp, input_node: PlanNode) -> dict[str, pa.Table]:
        rel = self._relation(input_node)
        cols = ", ".join(quote(c) for c in rel.columns)
        node = op.node
        assert isinstance(node, TopK)
        sql = (f"{more_ctes(rel)}__imp_r AS (\n  SELECT {cols}, {rel.annotation_sql} "
               f"AS {quote(ANN)} FROM {rel.name}\n)\n"
               f"SELECT {cols}, {quote(ANN)}, COUNT(1) AS __w FROM __imp_r\n"
               f"GROUP BY {cols}, {quote(ANN)}")
        limit = op.buffer
        if limit is not None:
            sql += f"\nORDER BY {total_order_sql(node, quote(ANN))}\nLIMIT {limit + 1}"
        out = self._collect(sql, f"top-k {op.op_id}")
        complete = limit is None or out.num_rows <= limit
        if limit is not None:
            out = out.slice(0, limit)
        weights = out.column("__w").to_numpy().astype(np.int64)
        return op.state_from_entries(
            _to_batch(out.drop_columns(["__w"]), op.output_schema, weights), complete)


# the kind of join side served by the data layer (not held in memory): Spark or files
DataSide = ProbedSide


def _data_side(side: object) -> bool:
    """Whether ``side`` is served by the data layer: its state is versions and a Bloom
    filter, not rows (the one test of a side's kind)."""
    return isinstance(side, DataSide)


def _joined(node: PlanNode) -> bool:
    """Whether ``node`` is more than one table's filtered, projected rows."""
    return has_stateful(node) or any(isinstance(n, Join) for n in node.walk())


def _label(node: PlanNode) -> str:
    """A short name of ``node`` for logs: its kind and tables."""
    return f"{type(node).__name__} of {','.join(sorted(node.tables()))}"


def _in_memory(side: object) -> bool:
    return not _data_side(side)


def _to_batch(out: pa.Table, schema: pa.Schema, weights: np.ndarray) -> DeltaBatch:
    """Spark's rows (``schema``'s columns, then ``__imp_fid`` or ``__imp_ann``) as a batch."""
    names = out.column_names
    data = out.select(names[:len(schema)]).rename_columns(schema.names).cast(schema)
    last = names[len(schema)]
    if last == FID_COLUMN:
        ids = arrow_array(out.column(last)).to_numpy(zero_copy_only=False)
        ann = Annotation.singletons(ids.astype(np.int32))
    else:
        ann = _list_annotation(arrow_array(out.column(last)))
    return DeltaBatch(data, weights, ann)


def _list_annotation(lists: pa.Array) -> Annotation:
    offsets = lists.offsets.to_numpy().astype(np.int64)
    values = lists.values.to_numpy(zero_copy_only=False).astype(np.int32)
    values = values[offsets[0]:offsets[-1]]
    return Annotation(offsets - offsets[0], values)


def _output_from_state(op: Operator, state: Mapping[str, pa.Table]) -> DeltaBatch:
    """The full output of a stateful operator with ``state``: what it emits when its state
    is built from empty in one step (restores ``state`` into ``op``)."""
    if not isinstance(op, (AggregateOp, TopKOp)):
        raise TypeError(f"no output from the state of {type(op).__name__}")
    op.restore(dict(state))
    return op.current_output()
