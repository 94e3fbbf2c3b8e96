"""Operator interface and the stateless operators (table access, selection, projection).

Every operator maps the annotated deltas of its inputs to one annotated output delta
and owns its state explicitly: its class-level ``STATE`` layout names its state tables,
``state_schemas`` gives their schemas for its plan node, ``snapshot`` returns exactly those
tables and ``restore`` takes them back. Stateless operators snapshot to nothing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import pyarrow as pa

from imp_core.engine.annotation import Annotation
from imp_core.engine.state import StateLayout
from imp_core.engine.zset import DeltaBatch
from imp_core.plan.ansi import ErrorTally, RowErrors
from imp_core.plan.evaluate import evaluate_all, evaluate_predicate
from imp_core.plan.nodes import PlanNode, Project, Scan, Select, arrow_schema
from imp_core.sketch.partition import PartitionSet

# the column in which a restricted table delta carries each row's global fragment id
# (``imp_core.storage.scan_spec.restrict_delta`` and the Spark delta source write it)
FRAGMENT_COLUMN = "__imp_fid"


@dataclass
class OperatorStats:
    calls: int = 0
    rows_in: int = 0
    rows_out: int = 0
    seconds: float = 0.0


@dataclass(frozen=True)
class TableDelta:
    """Raw changes of one base table: its rows (all columns) and signed multiplicities."""

    rows: pa.Table
    weights: np.ndarray

    @staticmethod
    def inserts(rows: pa.Table) -> TableDelta:
        return TableDelta(rows, np.ones(rows.num_rows, dtype=np.int64))

    @staticmethod
    def deletes(rows: pa.Table) -> TableDelta:
        return TableDelta(rows, -np.ones(rows.num_rows, dtype=np.int64))

    def __len__(self) -> int:
        return self.rows.num_rows


class Operator:
    """Base class. Subclasses implement ``_step`` and, if stateful, the state methods."""

    kind = "operator"

    def __init__(self, node: PlanNode, op_id: str):
        self.node = node
        self.op_id = op_id
        self.output_schema = arrow_schema(node.schema)
        self.stats = OperatorStats()
        self.children: list[Operator] = []
        # where rows that raise under ANSI mode are counted (the pipeline's); None: raise
        self.errors: ErrorTally | None = None

    def _row_errors(self, batch: DeltaBatch) -> RowErrors:
        return RowErrors(len(batch))

    def _count(self, errors: RowErrors, weights: np.ndarray) -> None:
        """Count the delta rows that raise (``imp_core.plan.ansi``) with their weights."""
        if not errors:
            return
        if self.errors is None:
            errors.raise_first()
        self.errors.add(self.op_id, errors, weights)

    def step(self, inputs: list[DeltaBatch]) -> DeltaBatch:
        t0 = time.perf_counter()
        out = self._step(inputs)
        st = self.stats
        st.calls += 1
        st.rows_in += sum(len(b) for b in inputs)
        st.rows_out += len(out)
        st.seconds += time.perf_counter() - t0
        return out

    def _step(self, inputs: list[DeltaBatch]) -> DeltaBatch:  # pragma: no cover
        raise NotImplementedError

    def empty(self) -> DeltaBatch:
        # batches are immutable, so one empty batch per operator can be shared
        cached = self.__dict__.get("_empty")
        if cached is None:
            cached = self.__dict__["_empty"] = DeltaBatch.empty(self.output_schema)
        return cached

    # -- state ------------------------------------------------------------------------
    stateful = False
    STATE: ClassVar[StateLayout] = StateLayout()

    def state_schemas(self) -> dict[str, pa.Schema | None]:
        """This operator's state tables (names from ``STATE``) with their schemas for its
        plan node, in snapshot order; None where a pluggable provider decides."""
        return {}

    def snapshot(self) -> dict[str, pa.Table]:
        return {}

    def restore(self, state: dict[str, pa.Table]) -> None:
        return None

    def state_bytes(self) -> int:
        return 0


class ScanOp(Operator):
    """Table access: I(R, ΔD) = annotate(ΔR, Φ), projected on the columns the query reads."""

    kind = "scan"

    def __init__(self, node: Scan, op_id: str, partitions: PartitionSet):
        super().__init__(node, op_id)
        self.scan = node
        self.partitions = partitions

    def from_table(self, delta: TableDelta) -> DeltaBatch:
        t0 = time.perf_counter()
        rows = delta.rows
        names = [f.name for f in self.scan.fields]
        data = rows.select(list(self.scan.source_columns)).rename_columns(names)
        found = self.partitions.for_table(self.scan.table)
        if found is None:
            ann = Annotation.empty(rows.num_rows)
        elif FRAGMENT_COLUMN in rows.column_names:
            # fragment ids computed upstream (by Spark during delta extraction)
            ids = rows.column(FRAGMENT_COLUMN).to_numpy().astype(np.int32)
            ann = Annotation.singletons(ids)
        else:
            ann = Annotation.singletons(self.partitions.annotate(self.scan.table, rows))
        casted = data.cast(self.output_schema) if data.schema != self.output_schema else data
        out = DeltaBatch(casted, np.asarray(delta.weights, dtype=np.int64), ann)
        self.stats.calls += 1
        self.stats.rows_in += len(out)
        self.stats.rows_out += len(out)
        self.stats.seconds += time.perf_counter() - t0
        return out

    def _step(self, inputs: list[DeltaBatch]) -> DeltaBatch:
        raise AssertionError("scans are fed by from_table")


class SelectOp(Operator):
    """Selection: I(σθ(Q), ΔD) = {Δ⟨t, P⟩ ∈ I(Q, ΔD) | t ⊨ θ}; annotations pass unchanged."""

    kind = "select"

    def __init__(self, node: Select, op_id: str):
        super().__init__(node, op_id)
        self.predicate = node.predicate

    def _step(self, inputs: list[DeltaBatch]) -> DeltaBatch:
        (batch,) = inputs
        if len(batch) == 0:
            return batch
        errors = self._row_errors(batch)
        keep = evaluate_predicate(self.predicate, batch.data, errors=errors)
        self._count(errors, batch.weights)
        return batch.filter(keep)


class ProjectOp(Operator):
    """Projection: I(Π_A(Q), ΔD) = {Δ⟨t.A, P⟩ | Δ⟨t, P⟩ ∈ I(Q, ΔD)}; no duplicate removal."""

    kind = "project"

    def __init__(self, node: Project, op_id: str):
        super().__init__(node, op_id)
        self.exprs = node.exprs
        in_names = list(node.input.column_names)
        # pure column selections and renames need no expression evaluation
        self.rename_only = node.is_rename_only()
        self.identity = self.rename_only and [e.expr.name for e in node.exprs] == in_names \
            and [e.name for e in node.exprs] == in_names

    def _step(self, inputs: list[DeltaBatch]) -> DeltaBatch:
        (batch,) = inputs
        if len(batch) == 0:
            return self.empty()
        if self.identity:
            return batch
        if self.rename_only:
            data = batch.data.select([e.expr.name for e in self.exprs])
            return batch.with_data(data.rename_columns(self.output_schema.names))
        errors = self._row_errors(batch)
        cols = evaluate_all([e.expr for e in self.exprs], batch.data, errors)
        self._count(errors, batch.weights)
        cols = [c.cast(f.type) if c.type != f.type else c
                for c, f in zip(cols, self.output_schema)]
        return batch.with_data(pa.Table.from_arrays(cols, schema=self.output_schema))


@dataclass
class StepContext:
    """What one maintenance step may consult besides its deltas."""

    changed_tables: frozenset[str] = field(default_factory=frozenset)
