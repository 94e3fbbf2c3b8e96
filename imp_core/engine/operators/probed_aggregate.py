"""An aggregation whose groups are read from the data layer when a batch touches them.

``ProbedAggregateOp`` is ``AggregateOp`` (γ_{f(a);G}) without groups in memory: its input
is a ``ProbedSide`` keyed by the group-by columns, placed so where a lookup by those
columns reads about one row group per key (``imp_core.query.data_layer.place_join_sides``), e.g.
TPC-H Q18's ``lineitem`` grouped by ``l_orderkey`` with the table clustered on it. State
then grows with nothing, not with the groups (1.5 million of them at SF 1).

Delta rule, per batch with input delta Δ touching the groups G: I' = the input's rows of
G after the batch (looked up at the batch's target versions). A scratch ``AggregateOp``
built from I' holds S'[G]; stepping it with -Δ moves it to I' - Δ = I, the rows before
the batch, and emits per changed group -⟨g ∘ f(S'[g]), P'⟩ +⟨g ∘ f(S[g]), P⟩. Its
negation is exactly what the stateful operator emits for the same batch (a group
deleted entirely has no rows in I' and comes back from -Δ alone; a new group leaves
nothing behind), so everything above sees the same deltas.

Lineage: as ``AggregateOp``: a group's sketch is the fragments of its input rows.

Invariants: the operator keeps no groups; ``snapshot`` gives the layout's tables empty and
``restore`` ignores group state it is given (a bootstrap computes the whole state once to
derive the first output, then drops it). Group keys never hold NULL (placement asks for
group-by columns copied from key columns of the tables, which the store keeps non-NULL):
a NULL key could not be looked up, so one raises ``ProbedSideError``.
"""

from __future__ import annotations

import pyarrow as pa

from imp_core.engine.operators.aggregate import AggregateOp
from imp_core.engine.probed_side import PROBE_KEY, ProbedSide
from imp_core.engine.zset import DeltaBatch
from imp_core.errors import ProbedSideError
from imp_core.plan.nodes import Aggregate

# what a side chooser (``IncrementalQuery(join_sides=...)``) is asked for an aggregation's
# groups, beside a join's "left" and "right"
GROUPS = "groups"


class ProbedAggregateOp(AggregateOp):
    """``AggregateOp`` over groups looked up in ``side`` (the input subtree keyed by the
    group-by columns, at the batch's target versions)."""

    probed = True

    def __init__(self, node: Aggregate, op_id: str, nfrag: int, side: ProbedSide):
        super().__init__(node, op_id, nfrag)
        if tuple(side.key_columns) != tuple(node.group_by):
            raise ProbedSideError("a probed aggregation is looked up by its group-by "
                                  f"columns {list(node.group_by)}, not {list(side.key_columns)}")
        self.side = side

    def _step(self, inputs: list[DeltaBatch]) -> DeltaBatch:
        delta = inputs[0]
        if len(delta) == 0:
            return self.empty()
        keys = delta.data.select(list(self.agg.group_by))
        if any(keys.column(i).null_count for i in range(keys.num_columns)):
            raise ProbedSideError(f"aggregation {self.op_id}: a NULL group key cannot be "
                                  "looked up in the data layer")
        # the side moves to the batch's target versions (it holds no rows, no filter)
        self.side.apply(DeltaBatch.empty(self.side.schema))
        scratch = self._groups_of(keys.group_by(list(self.agg.group_by)).aggregate([]))
        return scratch.step([delta.negate()]).negate()

    def _groups_of(self, keys: pa.Table) -> AggregateOp:
        """A scratch aggregation holding the groups of ``keys`` (distinct, no NULL) as
        the side reads them at its current versions."""
        scratch = AggregateOp(self.agg, self.op_id, self.frags.P)
        if keys.num_rows:
            probe = keys.rename_columns([f"{PROBE_KEY}{i}" for i in range(keys.num_columns)])
            rows = self.side.lookup(probe)
            if len(rows):
                scratch.step([rows])
        return scratch

    def restore(self, state: dict[str, pa.Table]) -> None:
        """Nothing to restore: the groups are in the data layer."""

    def current_output(self) -> DeltaBatch:
        """The whole output at the versions of the last batch, every group looked up (a
        full read of the input)."""
        if self.side.versions is None:
            raise ProbedSideError(f"aggregation {self.op_id}: no batch has set the "
                                  "versions its groups are read at")
        return self._groups_of(self.side.distinct_keys().drop_null()).current_output()

    def state_bytes(self) -> int:
        return 0
