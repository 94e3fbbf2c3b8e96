"""Where a plan's output column comes from, when it is a plain copy of a table column.

Invariant: ``trace_column(node, c)`` returns ``(scan, source)`` only when every value of
``node``'s column ``c`` is the unchanged value of column ``source`` of the table row that
``scan`` read for that output row (through selections, renaming projections, inner joins,
the input columns of a window, the left input of semi- and anti-joins, whose output
columns are the left's, the preserved left input of a LEFT outer join, and grouping-set
expansion: its input columns, and a key's expanded copy when every grouping set holds
the key); otherwise None. A column an outer join may NULL-pad (the right input of a LEFT
join, either input of a FULL join) holds NULL on a padded row, where no row of its table
was read (as does an expanded key in the copies for sets without it), so it is traced
only with
``through_padding=True``: then every *non-NULL* value of ``c`` is such a copy (what a
filter on probe keys needs, as NULL keys never match; not what routing rows by ``c``
needs). A set operation's column is traced through its left input for INTERSECT and
EXCEPT (every output row equals rows of the left input, which hold its values); a UNION
row may come from either input, so its columns are not traced.
"""

from __future__ import annotations

from imp_core.plan.expand import Expand
from imp_core.plan.expr import ColumnRef
from imp_core.plan.nodes import (
    Join,
    OuterJoin,
    PlanNode,
    Project,
    Scan,
    Select,
    SemiJoin,
    SetOp,
    Window,
)


def trace_column(node: PlanNode, column: str,
                 through_padding: bool = False) -> tuple[Scan, str] | None:
    """The scan and source column that ``node``'s output ``column`` copies unchanged
    (with ``through_padding``: copies where it is not NULL-padded by an outer join).

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
        return trace_column(node.input, column, through_padding)
    if isinstance(node, Window):  # the input's columns pass unchanged, the calls' do not
        if column in node.input.column_names:
            return trace_column(node.input, column, through_padding)
        return None
    if isinstance(node, Project):
        for ne in node.exprs:
            if ne.name == column:
                if isinstance(ne.expr, ColumnRef):
                    return trace_column(node.input, ne.expr.name, through_padding)
                return None
        return None
    if isinstance(node, SemiJoin):
        return trace_column(node.left, column, through_padding)
    if isinstance(node, SetOp):
        if node.kind == "union":
            return None  # a row of either input
        return trace_column(node.left, column, through_padding)
    if isinstance(node, Expand):
        if column in node.keys or column not in node.names:
            return trace_column(node.input, column, through_padding)
        key = node.names.index(column)  # NULL in the copies for sets without the key
        if through_padding or node.in_every_set(key):
            return trace_column(node.input, node.keys[key], through_padding)
        return None
    if isinstance(node, (Join, OuterJoin)):
        for child in (node.left, node.right):
            if column not in child.column_names:
                continue
            if isinstance(node, OuterJoin) and not through_padding and \
                    (node.kind == "full" or child is node.right):
                return None  # NULL on the rows the outer join pads
            return trace_column(child, column, through_padding)
    return None


def one_table_inputs(node: PlanNode) -> list[PlanNode]:
    """The largest subtrees of ``node`` reading one scan (a table with its filters and
    projections), left to right."""
    if sum(isinstance(n, Scan) for n in node.walk()) == 1:
        return [node]
    return [sub for child in node.children() for sub in one_table_inputs(child)]


def keys_from_whole_tables(node: PlanNode, columns: tuple[str, ...]) -> bool:
    """Whether each of ``columns`` copies a column of a table ``node`` reads whole: traced
    to its scan (``through_padding``), the largest one-table subtree holding that scan
    is the scan under projections only. Then the values of the tables' columns, and
    every combination of them across tables, are the tightest key set ``node``'s inputs
    bound without running its joins: a filter built from them rules out only values
    absent from a whole table column.

    >>> import pyarrow as pa
    >>> from imp_core.plan.expr import BinaryOp, Literal
    >>> from imp_core.plan.nodes import Field
    >>> scan = Scan("t", ("a",), (Field("t.a", pa.int64()),))
    >>> keys_from_whole_tables(scan, ("t.a",))
    True
    >>> one = Literal(1, pa.int64())
    >>> keys_from_whole_tables(Select(scan, BinaryOp(">", ColumnRef("t.a"), one)), ("t.a",))
    False
    """
    inputs = one_table_inputs(node)
    for column in columns:
        found = trace_column(node, column, through_padding=True)
        if found is None:
            return False
        holder = [sub for sub in inputs if any(n is found[0] for n in sub.walk())]
        if len(holder) != 1 or not all(isinstance(n, (Scan, Project))
                                       for n in holder[0].walk()):
            return False
    return True


def keys_looked_up_by_value(node: PlanNode, columns: tuple[str, ...]) -> bool:
    """Whether a side over ``node`` probed by ``columns`` needs no filter of its keys
    where shared covering indexes serve its lookups: its keys come from whole tables
    (``keys_from_whole_tables``), or ``node`` is one table's scan under selections and
    projections only and each key copies a column of it. A lookup then reads the rows of
    the asked keys by their index and applies the selections to those rows alone, so a
    key with no partner costs a binary search, and a filter of the side's keys (a Spark
    aggregation of the filtered table at registration: 3 to 8 s at SF 10 for TPC-H
    Q3's and Q14's sides) saves less than it costs.

    >>> import pyarrow as pa
    >>> from imp_core.plan.expr import BinaryOp, Literal
    >>> from imp_core.plan.nodes import Field
    >>> scan = Scan("t", ("a", "b"), (Field("t.a", pa.int64()), Field("t.b", pa.int64())))
    >>> one = Literal(1, pa.int64())
    >>> keys_looked_up_by_value(Select(scan, BinaryOp(">", ColumnRef("t.b"), one)), ("t.a",))
    True
    """
    if keys_from_whole_tables(node, columns):
        return True
    if not all(isinstance(n, (Scan, Select, Project)) for n in node.walk()) or \
            sum(isinstance(n, Scan) for n in node.walk()) != 1:
        return False
    return all(trace_column(node, c) is not None for c in columns)
