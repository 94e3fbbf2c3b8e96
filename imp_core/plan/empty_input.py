"""SQL's one row of an aggregation without GROUP BY over no input rows.

Under the annotated semantics of the IMP paper an aggregation over an empty input has no
group and no row; SQL returns one row (COUNT 0, every other aggregate NULL). Sketches
follow the paper (that row has no provenance, so the sketch is empty either way); the
query *result* a user reads follows SQL: ``sql_row_over_empty`` gives that row for a
plan whose root is such an aggregation under projections, selections, top-k and
windows (over one row: ranks 1, each aggregate over that row), and
None for every other plan (whose result over no groups is no row in both semantics).
"""

from __future__ import annotations

import pyarrow as pa

from imp_core.plan.aggregates.base import GroupState
from imp_core.plan.aggregates.exact import python_exact
from imp_core.plan.evaluate import evaluate, evaluate_predicate
from imp_core.plan.nodes import (
    Aggregate,
    Join,
    PlanNode,
    Project,
    Select,
    TopK,
    Window,
    arrow_schema,
)


def sql_row_over_empty(root: PlanNode) -> pa.Table | None:
    """The SQL result of ``root`` when its global aggregation has no input (or None)."""
    if isinstance(root, Aggregate):
        if root.group_by:
            return None
        schema = arrow_schema(root.schema)
        # counts are 0 over no rows, every other function NULL
        columns = [pa.array([0 if a.function.never_null else None],
                            type=f.type) for a, f in zip(root.aggregates, schema)]
        return pa.Table.from_arrays(columns, schema=schema)
    if isinstance(root, Join) and root.condition is None:  # one-row aggregates, crossed
        left, right = sql_row_over_empty(root.left), sql_row_over_empty(root.right)
        if left is None or right is None:
            return None
        schema = arrow_schema(root.schema)
        if not left.num_rows or not right.num_rows:
            return schema.empty_table()
        return pa.Table.from_arrays(list(left.columns) + list(right.columns), schema=schema)
    if isinstance(root, (Project, Select, TopK)):
        below = sql_row_over_empty(root.input)
        if below is None:
            return None
        if isinstance(root, Project):
            schema = arrow_schema(root.schema)
            columns = [evaluate(e.expr, below).cast(f.type)
                       for e, f in zip(root.exprs, schema)]
            return pa.Table.from_arrays(columns, schema=schema)
        if isinstance(root, Select):
            return below.filter(pa.array(evaluate_predicate(root.predicate, below)))
        return below.slice(0, min(root.k, 1))
    if isinstance(root, Window):
        below = sql_row_over_empty(root.input)
        return None if below is None else _window_over(root, below)
    return None


def _window_over(node: Window, below: pa.Table) -> pa.Table:
    """``node`` over ``below``, at most one row: ranks 1, each aggregate over that row."""
    cols = list(below.columns)
    for call, field in zip(node.calls, list(arrow_schema(node.schema))[below.num_columns:]):
        if below.num_rows == 0 or call.ranking:
            cols.append(pa.array([1] * below.num_rows, type=field.type))
            continue
        fn = call.function
        value = None if call.arg is None else below.column(call.arg)[0].as_py()
        dtype = None if call.arg is None else below.schema.field(call.arg).type
        valid = int(value is not None or call.arg is None)
        sums = [[python_exact(value, dtype) ** j if valid and dtype is not None else 0]
                for j in range(1, fn.moments + 1)]
        state = GroupState(pa.array([1]).to_numpy(), pa.array([valid]).to_numpy(), sums,
                           [value] if fn.extremes else None)
        cols.append(fn.finalize(state, dtype).cast(field.type))
    return pa.Table.from_arrays(cols, schema=arrow_schema(node.schema))
