"""Where a plan's output column comes from, when it is a plain copy of a table column.

Invariant: ``trace_column(node, c)`` returns ``(scan, source)`` only when every value of
``node``'s column ``c`` is the unchanged value of column ``source`` of the table row that
``scan`` read for that output row (through selections, renaming projections and joins);
otherwise None.
"""

from __future__ import annotations

from imp_core.plan.expr import ColumnRef
from imp_core.plan.nodes import Join, PlanNode, Project, Scan, Select


def trace_column(node: PlanNode, column: str) -> tuple[Scan, str] | None:
    """The scan and source column that ``node``'s output ``column`` copies unchanged.

    >>> import pyarrow as pa
    >>> from imp_core.plan.nodes import Field
    >>> scan = Scan("t", ("a",), (Field("t.a", pa.int64()),))
    >>> trace_column(scan, "t.a")[1]
    'a'
    """
    if isinstance(node, Scan):
        for f, src in zip(node.fields, node.source_columns):
            if f.name == column:
                return node, src
        return None
    if isinstance(node, Select):
        return trace_column(node.input, column)
    if isinstance(node, Project):
        for ne in node.exprs:
            if ne.name == column:
                if isinstance(ne.expr, ColumnRef):
                    return trace_column(node.input, ne.expr.name)
                return None
        return None
    if isinstance(node, Join):
        for child in (node.left, node.right):
            if column in child.column_names:
                return trace_column(child, column)
    return None
