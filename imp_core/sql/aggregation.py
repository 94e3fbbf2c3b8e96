"""Group keys and aggregate calls of one SELECT block.

Invariants: pre-aggregation expressions are projected once each, a plain column under
its own name and anything computed as ``_g<i>`` (group keys) or ``_a<i>`` (aggregate
arguments); each distinct ``(function, argument)`` call is computed once, as
``_agg<i>``, numbered in order of first appearance; after aggregation an expression
may only refer to group keys and aggregate results.
"""

from __future__ import annotations

from typing import Callable

from sqlglot import exp

from imp_core.plan.aggregates.distinct import is_distinct, plain_function
from imp_core.plan.expr import ColumnRef, Expr
from imp_core.plan.nodes import AggCall, Aggregate, Distinct, Join, NamedExpr, PlanNode, Project
from imp_core.sql.expressions import map_children

CallKey = tuple[str, Expr | None]


class Aggregation:
    def __init__(self) -> None:
        self.projected: dict[Expr, str] = {}  # pre-aggregation expression -> its name
        self.groups: dict[Expr, str] = {}  # group key expression -> its name
        self.calls: dict[CallKey, str] = {}  # (func, arg) -> _agg<i>
        self.sources: dict[Expr | CallKey, exp.Expression] = {}  # SQL, for messages
        self._counters = {"_g": 0, "_a": 0}

    def add_group(self, expr: Expr, node: exp.Expression) -> None:
        self.groups.setdefault(expr, self._project(expr, "_g", node))

    def add_call(self, func: str, arg: Expr | None, node: exp.Expression) -> ColumnRef:
        key = (func, arg)
        if key not in self.calls:
            if arg is not None:
                self._project(arg, "_a", node)
            self.calls[key] = f"_agg{len(self.calls)}"
            self.sources[key] = node
        return ColumnRef(self.calls[key])

    def _project(self, expr: Expr, prefix: str, node: exp.Expression) -> str:
        if expr not in self.projected:
            if isinstance(expr, ColumnRef):
                name = expr.name
            else:
                name = f"{prefix}{self._counters[prefix]}"
                self._counters[prefix] += 1
            self.projected[expr] = name
            self.sources[expr] = node
        return self.projected[expr]

    def projection(self, first_column: str) -> tuple[NamedExpr, ...]:
        """What the Project below the Aggregate computes."""
        exprs = tuple(NamedExpr(n, e) for e, n in self.projected.items())
        # count(*) alone: keep one column so that the rows (and their count) survive
        return exprs or (NamedExpr(first_column, ColumnRef(first_column)),)

    def group_names(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(self.groups.values()))

    def agg_calls(self) -> tuple[AggCall, ...]:
        """The calls as the Aggregate computes them (a DISTINCT call's function without
        its prefix: it runs over the DISTINCT rows, see ``distinct_argument``)."""
        return tuple(AggCall(plain_function(func),
                             None if arg is None else self.projected[arg], name)
                     for (func, arg), name in self.calls.items())

    def distinct_calls(self) -> frozenset[str]:
        """The output names of the ``f(DISTINCT x)`` calls."""
        return frozenset(name for (func, _), name in self.calls.items() if is_distinct(func))

    def distinct_arguments(self) -> tuple[set[str], bool]:
        """The projected arguments of ``f(DISTINCT x)`` calls, and whether there are
        calls without DISTINCT too."""
        args = {self.projected[arg] for (func, arg) in self.calls
                if is_distinct(func) and arg is not None}
        plain = any(not is_distinct(func) for func, _ in self.calls)
        return args, plain

    def over_groups(self, expr: Expr, ungrouped: Callable[[str], Exception],
                    passthrough: frozenset[str] = frozenset()) -> Expr:
        """Rewrite a post-aggregation expression onto the Aggregate's output columns:
        group key expressions become their key column; ``ungrouped(column)`` is raised
        for a column that is neither grouped nor inside an aggregate nor one of
        ``passthrough`` (columns joined to the aggregation's output, e.g. a scalar
        subquery's value)."""
        results = set(self.calls.values()) | passthrough

        def rewrite(e: Expr) -> Expr:
            if e in self.groups:
                return ColumnRef(self.groups[e])
            if isinstance(e, ColumnRef) and e.name not in results:
                raise ungrouped(e.name)
            return map_children(e, rewrite)

        return rewrite(expr)


def global_aggregates(pre: PlanNode, calls: tuple[AggCall, ...],
                       distinct: frozenset[str]) -> PlanNode:
    """Aggregates without GROUP BY mixing ``f(DISTINCT x)`` with other calls or other
    arguments (TPC-DS q16, q28, q94, q95): one aggregation of the plain calls over the
    input and one per DISTINCT argument x over the distinct x values, each one row,
    joined without a condition. Over no input each gives SQL's row (COUNT 0), and so
    does their join (``imp_core.plan.empty_input``)."""
    plain = tuple(c for c in calls if c.name not in distinct)
    by_arg: dict[str, list[AggCall]] = {}
    for c in calls:
        if c.name in distinct:
            assert c.arg is not None
            by_arg.setdefault(c.arg, []).append(c)
    parts: list[PlanNode] = []
    if plain:
        parts.append(Aggregate(pre, (), plain))
    for arg, group in by_arg.items():
        only = Distinct(Project(pre, (NamedExpr(arg, ColumnRef(arg)),)))
        parts.append(Aggregate(only, (), tuple(group)))
    out = parts[0]
    for part in parts[1:]:
        out = Join(out, part, None)
    return out
