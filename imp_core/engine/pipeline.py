"""One registered query's incremental pipeline: operators wired like the plan, plus μ.

Invariants: after ``apply`` returns, ``sketch()`` is exactly the accurate sketch of the
query over the integrated deltas (Definition 4.5 with equality), and ``result()`` is the
query's annotated result. Equal subplans (a CTE read twice, a self-join's two equal
inputs) are one operator, wired at the first path that reaches them and stepped once per
batch, its output read by every parent: its state is held once. State moves in and out
only through ``snapshot``/``restore``,
which are stamped with the plan and partition fingerprints. The flat state
(``state_tables``) holds each operator's ``STATE`` tables under its id, μ's under
``MERGE`` and the kept result as ``RESULT``; nothing else names these tables.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Callable, ClassVar, Mapping

import numpy as np
import pyarrow as pa
from pyroaring import BitMap

from imp_core.engine.operators.aggregate import AggregateOp, distinct_node
from imp_core.engine.operators.base import (
    Operator,
    ProjectOp,
    ScanOp,
    SelectOp,
    TableDelta,
)
from imp_core.engine.operators.expand import ExpandOp
from imp_core.engine.operators.join import JoinOp, SideChooser
from imp_core.engine.operators.keyed_filter import KeyedFilterOp
from imp_core.engine.operators.keyed_join import KeyedJoinOp
from imp_core.engine.operators.merge import MergeOp
from imp_core.engine.operators.probed_aggregate import GROUPS, ProbedAggregateOp
from imp_core.engine.operators.scalar_filter import ScalarFilterOp
from imp_core.engine.operators.set_ops import SetOpOp, UnionAllOp
from imp_core.engine.operators.topk import TopKOp
from imp_core.engine.operators.window import WindowOp
from imp_core.engine.snapshot import read_snapshot, write_snapshot
from imp_core.engine.state import StateTable, StateTables, group_state, state_key
from imp_core.engine.zset import DeltaBatch, batch_from_arrow, batch_to_arrow
from imp_core.errors import SnapshotError
from imp_core.plan.ansi import ErrorTally
from imp_core.plan.expand import Expand
from imp_core.plan.nodes import (
    Aggregate,
    Distinct,
    Join,
    OuterJoin,
    PlanNode,
    Project,
    QueryPlan,
    Scan,
    Select,
    SemiJoin,
    SetOp,
    TopK,
    Window,
    arrow_schema,
    scalar_filter_parts,
)
from imp_core.plan.paths import OperatorPath
from imp_core.plan.shapes import keyed_filter_parts
from imp_core.sketch.partition import PartitionSet
from imp_core.sketch.sketch import Sketch


@dataclass(frozen=True)
class EngineOptions:
    """Tuning knobs; none changes results, only time and memory."""

    use_bloom: bool = True
    minmax_buffer: int | None = None  # keep this many distinct values per group (None: all)
    topk_buffer: int | None = None  # keep this many top-k entries, at least k (None: all)
    keep_result: bool = True  # maintain the query result besides the sketch

    @property
    def bounded(self) -> bool:
        """Whether some buffer is bounded, so that deletions may need a refill source."""
        return self.minmax_buffer is not None or self.topk_buffer is not None


@dataclass(frozen=True)
class SketchDelta:
    added: BitMap
    removed: BitMap
    seconds: float = 0.0

    @property
    def empty(self) -> bool:
        return not self.added and not self.removed


@dataclass
class _Wired:
    op: Operator
    children: list[_Wired]
    tables: frozenset[str]
    node: PlanNode


SourceFn = Callable[[PlanNode], DeltaBatch]


class IncrementalQuery:
    MERGE: ClassVar[str] = "merge"  # the owner of μ's tables in the flat state
    RESULT: ClassVar[StateTable] = StateTable(
        "result", "the kept query result as a batch (only with keep_result)")
    ERRORS: ClassVar[StateTable] = StateTable(
        "errors", "ANSI mode: the count of current rows raising per operator and error "
                  "class, as one JSON text (only when some count is not zero)")

    def __init__(self, plan: QueryPlan, partitions: PartitionSet,
                 options: EngineOptions = EngineOptions(), source: SourceFn | None = None,
                 join_sides: SideChooser | None = None):
        self.plan = plan
        self.partitions = partitions
        self.options = options
        self.source = source
        # (join, "left" | "right") or (aggregation, GROUPS) -> a JoinSide / ProbedSide, or
        # None: kept in memory
        self.join_sides = join_sides
        self.scans: dict[str, list[ScanOp]] = {}
        self.operators: list[Operator] = []
        self._wired: dict[PlanNode, _Wired] = {}  # equal subplans share their operator
        self.root = self._wire(plan.root, OperatorPath.ROOT)
        # rows that raise under ANSI mode, counted by the operators evaluating them
        self.errors = ErrorTally()
        for op in self.operators:
            op.errors = self.errors
        self.merge = MergeOp(partitions.size)
        self._result: list[DeltaBatch] = []
        self._result_rows = 0
        self.batches = 0

    # -- construction -------------------------------------------------------------------
    def _source_for(self, node: PlanNode) -> Callable[[], DeltaBatch] | None:
        if self.source is None:
            return None
        return lambda: self.source(node)

    def _self_join(self, join: Join) -> bool:
        """Whether both inputs of ``join`` read a partitioned table: a pair's two
        annotations may then hold the same fragment ids (united without repeats)."""
        partitioned = {p.table for p in self.partitions.partitions}
        return bool(join.left.tables() & join.right.tables() & partitioned)

    def _keyed_filter(self, node: PlanNode, path: OperatorPath) -> _Wired | None:
        """π σ (L ⋈ S) with S unique on the join keys as one operator, its inputs keeping
        the ids of their plan paths; None for another shape, or where the data layer
        serves S (the operator holds S in memory: then the three operators run)."""
        parts = keyed_filter_parts(node)
        if parts is None:
            return None
        join, choose = parts.join, self.join_sides
        if choose is not None and choose(join, "right") is not None:
            return None
        below = path.child(0).child(0)
        children = [self._wire(parts.left, below.child(0)),
                    self._wire(parts.right, below.child(1))]
        assert isinstance(node, Project)
        op = KeyedFilterOp(node, str(path), self._self_join(join),
                           left_side=choose(join, "left") if choose is not None else None)
        self.operators.append(op)
        return _Wired(op, children, node.tables(), node)

    def _wire(self, node: PlanNode, path: OperatorPath) -> _Wired:
        """The operator of ``node``: the one already wired for an equal subplan (its
        output is the same for every batch), else a new one with ``path`` as its id."""
        found = self._wired.get(node)
        if found is None:
            found = self._wired[node] = self._new_wire(node, path)
        return found

    def _new_wire(self, node: PlanNode, path: OperatorPath) -> _Wired:
        op: Operator
        op_id = str(path)  # the operator's id: the text of its plan path (names its state)
        keyed = self._keyed_filter(node, path)
        if keyed is not None:
            return keyed
        scalar = scalar_filter_parts(node)
        if scalar is not None:
            # π σ (L × S) is one operator; its inputs keep the ids of their plan paths
            left, right, _ = scalar
            below = path.child(0).child(0)
            children = [self._wire(left, below.child(0)), self._wire(right, below.child(1))]
            assert isinstance(node, Project)
            op = ScalarFilterOp(node, op_id)
            self.operators.append(op)
            return _Wired(op, children, node.tables(), node)
        children = [self._wire(c, path.child(i)) for i, c in enumerate(node.children())]
        nfrag = self.partitions.size
        if isinstance(node, Scan):
            op = ScanOp(node, op_id, self.partitions)
            self.scans.setdefault(node.table, []).append(op)
        elif isinstance(node, Select):
            op = SelectOp(node, op_id)
        elif isinstance(node, Project):
            op = ProjectOp(node, op_id)
        elif isinstance(node, Join):
            op = JoinOp(node, op_id, self.options.use_bloom,
                        dedupe_annotations=self._self_join(node),
                        choose_side=self.join_sides)
        elif isinstance(node, (SemiJoin, OuterJoin)):
            op = KeyedJoinOp(node, op_id, choose_side=self.join_sides)
        elif isinstance(node, Aggregate):
            # the data layer may hold the groups (a side keyed by the group-by columns)
            side = self.join_sides(node, GROUPS) if self.join_sides is not None else None
            op = ProbedAggregateOp(node, op_id, nfrag, side) if side is not None else \
                AggregateOp(node, op_id, nfrag, self.options.minmax_buffer,
                            self._source_for(node.input))
        elif isinstance(node, Distinct):
            op = AggregateOp(distinct_node(node), op_id, nfrag)
        elif isinstance(node, SetOp):
            op = UnionAllOp(node, op_id) if node.linear else SetOpOp(node, op_id, nfrag)
        elif isinstance(node, Expand):
            op = ExpandOp(node, op_id)
        elif isinstance(node, TopK):
            buffer = self.options.topk_buffer
            # a buffer is a default for every top-k: one with a larger k keeps k entries
            buffer = None if buffer is None else max(buffer, node.k)
            op = TopKOp(node, op_id, buffer, self._source_for(node.input))
        elif isinstance(node, Window):
            op = WindowOp(node, op_id)
        else:
            raise TypeError(f"no incremental operator for {type(node).__name__}")
        self.operators.append(op)
        return _Wired(op, children, node.tables(), node)

    # -- maintenance ----------------------------------------------------------------------
    def apply(self, changes: Mapping[str, TableDelta]) -> SketchDelta:
        """Feed one batch of base-table changes; returns the sketch delta."""
        t0 = time.perf_counter()
        changed = frozenset(t for t, d in changes.items() if len(d))
        if not changed & self.root.tables:
            return SketchDelta(BitMap(), BitMap(), 0.0)
        out = self._run(self.root, changes, changed, {})
        self.batches += 1
        if self.options.keep_result and len(out):
            self._result.append(out)
            self._result_rows += len(out)
        added, removed = self.merge.step(out)
        return SketchDelta(added, removed, time.perf_counter() - t0)

    def _run(self, w: _Wired, changes: Mapping[str, TableDelta], changed: frozenset[str],
             done: dict[int, DeltaBatch]) -> DeltaBatch:
        """``w``'s output delta for this batch; ``done`` holds the outputs of the
        operators already stepped in it (a shared operator steps once)."""
        if not (w.tables & changed):
            return w.op.empty()
        out = done.get(id(w))
        if out is not None:
            return out
        if isinstance(w.op, ScanOp):
            out = w.op.from_table(changes[w.op.scan.table])
        else:
            inputs = [self._run(c, changes, changed, done) for c in w.children]
            out = w.op.empty() if all(len(b) == 0 for b in inputs) else w.op.step(inputs)
        done[id(w)] = out
        return out

    # -- reading ------------------------------------------------------------------------
    def sketch(self) -> Sketch:
        """The current sketch; ``SqlRuntimeError`` while the query raises (ANSI mode)."""
        self.errors.check()
        return Sketch(self.partitions, self.merge.sketch())

    def result_bag(self) -> DeltaBatch:
        """The annotated query result as a bag: equal (row, annotation) pairs may stand
        apart, all with positive weights (consolidated only when a weight is not
        positive). Cheaper than ``result`` on large results, for callers that take a bag
        (join sides and buffers built from a subtree)."""
        schema = arrow_schema(self.plan.root.schema)
        if not self._result:
            return DeltaBatch.empty(schema)
        merged = DeltaBatch.concat(self._result, schema)
        if len(merged) and not np.all(merged.weights > 0):
            merged = merged.consolidate()
        self._result = [merged] if len(merged) else []
        return merged

    def result(self) -> DeltaBatch:
        """The annotated query result, consolidated."""
        schema = arrow_schema(self.plan.root.schema)
        merged = DeltaBatch.concat(self._result, schema).consolidate() if self._result \
            else DeltaBatch.empty(schema)
        self._result = [merged] if len(merged) else []
        return merged

    def stats(self) -> list[dict]:
        """Per operator: calls, rows, seconds, state bytes; for inner joins also the
        probes their Bloom filters spared, the kind of each side ("memory" or the data
        layer that answers its probes) and how many probed sides are open (no Bloom
        filter: ``ProbedSide.make_open``); for semi-, anti- and outer joins (kind
        "semi_join", "anti_join", "outer_join") the join type ("semi", "anti", "nai" for
        NOT IN, "left", "full") and the kind of each side."""
        out = []
        for op in self.operators:
            row = {"op": op.op_id, "kind": op.kind, **asdict(op.stats),
                   "state_bytes": op.state_bytes()}
            if isinstance(op, (JoinOp, KeyedJoinOp)):
                sides = (op.left, op.right)
                row["probes_skipped"] = sum(getattr(s, "probes_skipped", 0) for s in sides)
                row["sides"] = [getattr(s, "kind", "memory") for s in sides]
                row["open_sides"] = sum(bool(getattr(s, "open", False)) for s in sides)
            if isinstance(op, KeyedJoinOp):
                row["join_type"] = op.mode
            out.append(row)
        return out

    def state_bytes(self) -> int:
        return sum(op.state_bytes() for op in self.operators) + self.merge.counts.nbytes

    # -- state ------------------------------------------------------------------------
    def _identity(self) -> dict[str, str]:
        return {"plan": self.plan.fingerprint(), "partitions": self.partitions.fingerprint()}

    def state_tables(self) -> dict[str, pa.Table]:
        """Every piece of state as named Arrow tables (``state_key(op id, name)``, μ's
        under ``MERGE``, ``RESULT``): what ``snapshot`` serializes and ``load_state``
        takes back."""
        states = {op.op_id: op.snapshot() for op in self.operators}
        result = self.result() if self.options.keep_result else None
        return self._flat(states, self.merge.snapshot(), result)

    def compose_state(self, op_states: Mapping[str, Mapping[str, pa.Table]],
                      output: DeltaBatch | None = None) -> dict[str, pa.Table]:
        """The flat state (``state_tables`` layout) made of operator states built elsewhere
        (``{op id: the operator's state_from_* tables}``), μ's counts and the kept result
        both following from ``output``, the root's whole annotated output (None: no output
        yet, zero counts and no kept result)."""
        result = output if self.options.keep_result else None
        return self._flat(op_states, self.merge.state_from_output(output), result)

    def _flat(self, op_states: Mapping[str, Mapping[str, pa.Table]],
              merge: Mapping[str, pa.Table], result: DeltaBatch | None) -> StateTables:
        tables: StateTables = {}
        for op in self.operators:
            for name, t in op_states.get(op.op_id, {}).items():
                tables[state_key(op.op_id, name)] = t
        for name, t in merge.items():
            tables[state_key(self.MERGE, name)] = t
        if result is not None:
            tables[self.RESULT.name] = batch_to_arrow(result)
        if self.errors.counts:
            tables[self.ERRORS.name] = pa.table({"counts": [self.errors.snapshot()]})
        return tables

    def snapshot(self, extra: Mapping[str, object] | None = None) -> bytes:
        meta = {**self._identity(), "batches": self.batches, **(extra or {})}
        return write_snapshot(meta, self.state_tables())

    def restore(self, blob: bytes) -> dict[str, object]:
        """Load state from ``snapshot`` bytes; refuses damaged or foreign snapshots."""
        meta, tables = read_snapshot(blob, expect=self._identity())
        self.load_state(tables, int(meta.get("batches", 0)))
        return meta

    def load_state(self, tables: Mapping[str, pa.Table], batches: int = 0) -> None:
        """Replace all state by ``tables`` (the layout of ``state_tables``), e.g. state
        computed elsewhere (``imp_core.spark.bootstrap``). All or nothing: tables that do
        not fit this pipeline raise ``SnapshotError`` and leave it as it was."""
        grouped = group_state(tables)
        # load into a fresh wiring first, so that state that does not fit leaves this
        # pipeline exactly as it was (no operator half-restored)
        fresh = IncrementalQuery(self.plan, self.partitions, self.options, self.source,
                                 self.join_sides)
        try:
            for op in fresh.operators:
                if op.stateful:
                    op.restore(grouped.get(op.op_id, {}))
            fresh.merge.restore(grouped[self.MERGE])
            result = [batch_from_arrow(tables[self.RESULT.name])] \
                if self.RESULT.name in tables else []
            errors = ErrorTally.restore(tables[self.ERRORS.name].column(0)[0].as_py()) \
                if self.ERRORS.name in tables else ErrorTally()
        except (KeyError, ValueError, TypeError, IndexError, pa.ArrowInvalid) as exc:
            raise SnapshotError(f"state does not fit this pipeline: {exc}") from None
        self.scans, self.operators, self.root = fresh.scans, fresh.operators, fresh.root
        self._wired = fresh._wired
        self.merge = fresh.merge
        self.errors = errors
        for op in self.operators:
            op.errors = errors
        self._result = [b for b in result if len(b)]
        self._result_rows = sum(len(b) for b in result)
        self.batches = batches


__all__ = ["EngineOptions", "IncrementalQuery", "SketchDelta", "TableDelta"]
