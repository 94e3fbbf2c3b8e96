"""The state of an operator that holds both of its inputs as join sides.

Inner joins, semi-/anti-/outer joins and the comparison with a scalar subquery keep each
input's contents behind a ``JoinSide`` (``self.left``, ``self.right``); their state is
exactly those sides' snapshots, the state tables ``LEFT`` and ``RIGHT``, each in its
provider's own layout (``SideIndex``: the annotated rows).
"""

from __future__ import annotations

from typing import ClassVar

import pyarrow as pa

from imp_core.engine.join_index import JoinSide
from imp_core.engine.operators.base import Operator
from imp_core.engine.state import StateTable
from imp_core.plan.nodes import PlanNode


class TwoSidedOp(Operator):
    """Base of the operators whose state is their two inputs' sides."""

    stateful = True
    LEFT: ClassVar[StateTable]
    RIGHT: ClassVar[StateTable]
    left: JoinSide
    right: JoinSide

    def side_nodes(self) -> tuple[PlanNode, PlanNode]:
        """The plan inputs whose rows the left and the right side hold."""
        children = self.node.children()
        return children[0], children[1]

    def side_inputs(self) -> dict[str, PlanNode]:
        """Each side's state table name with the plan input whose rows that side holds."""
        left, right = self.side_nodes()
        return {self.LEFT.name: left, self.RIGHT.name: right}

    def state_schemas(self) -> dict[str, pa.Schema | None]:
        return {self.LEFT.name: side_schema(self.left),
                self.RIGHT.name: side_schema(self.right)}

    def state_from_sides(self, left: pa.Table, right: pa.Table) -> dict[str, pa.Table]:
        """The state made of the sides' states (each in its provider's layout, e.g.
        ``SideIndex.state_from_rows``)."""
        return {self.LEFT.name: left, self.RIGHT.name: right}

    def snapshot(self) -> dict[str, pa.Table]:
        return self.state_from_sides(self.left.snapshot(), self.right.snapshot())

    def restore(self, state: dict[str, pa.Table]) -> None:
        self.left.restore(state[self.LEFT.name])
        self.right.restore(state[self.RIGHT.name])

    def state_bytes(self) -> int:
        return self.left.nbytes() + self.right.nbytes()


def side_schema(side: JoinSide) -> pa.Schema | None:
    """The schema of a side's state table, when its provider declares one."""
    declared = getattr(side, "state_schema", None)
    return declared() if callable(declared) else None
