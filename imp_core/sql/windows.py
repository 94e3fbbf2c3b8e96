"""Window functions of one SELECT block: ``f(...) OVER (PARTITION BY ... ORDER BY ...)``.

Binding a SELECT-list or ORDER BY expression meets each window call through the
``BindContext.window`` hook (``WindowPlanner.__call__``), which records the call and
stands for it with a column ``_win<digest>``; its partition, order and argument
expressions are bound where the window runs: after the aggregation (so
``sum(sum(x)) OVER (...)`` sums the groups' sums) and before the SELECT list's projection.

Shape of the plan: a ``Project`` passing every input column and computing each
partition, order or argument expression that is not a plain column (``_wx<digest>``),
then one ``Window`` per distinct (PARTITION BY, ORDER BY, frame), each adding its calls'
columns, those over the whole partition last (``build``). Supported: rank, dense_rank,
row_number (with ORDER BY), and sum, avg, count, min, max (and the registry's other
aggregates) over the whole partition (no ORDER BY, or a frame of UNBOUNDED PRECEDING to
UNBOUNDED FOLLOWING) or over the running frame of an ORDER BY (the default ``RANGE``, or
``ROWS``, between UNBOUNDED PRECEDING and CURRENT ROW). Other frames, DISTINCT inside a
window, named windows and other window functions (lag, lead, ntile, first_value, ...)
are refused with their position.
"""

from __future__ import annotations

import hashlib
from typing import Callable

from sqlglot import exp

from imp_core.plan.aggregates import registry
from imp_core.plan.expr import ColumnRef, Expr
from imp_core.plan.nodes import NamedExpr, PlanNode, Project, SortKey, Window, WindowCall
from imp_core.sql.text import SqlText

_RANKING = {exp.Rank: "rank", exp.DenseRank: "dense_rank", exp.RowNumber: "row_number"}

Spec = tuple[tuple[Expr, ...], tuple[tuple[Expr, bool, bool | None], ...], str]


class WindowPlanner:
    """The window calls of one SELECT; ``bind_part(node)`` binds an expression of an
    OVER clause or a window argument where the window runs."""

    def __init__(self, text: SqlText, bind_part: Callable[[exp.Expression], Expr]):
        self.text = text
        self.bind_part = bind_part
        self.calls: dict[tuple[Spec, str, Expr | None], str] = {}

    def names(self) -> frozenset[str]:
        return frozenset(self.calls.values())

    def __call__(self, node: exp.Window) -> Expr:
        if node.args.get("over") not in (None, "OVER") or isinstance(node.this, exp.Window):
            raise self.text.unsupported("named or nested window", node)
        func, arg = self._function(node)
        order = self._order(node)
        frame = self._frame(node, func, bool(order))
        if frame == "partition":
            order = ()
        by = tuple(self.bind_part(p) for p in node.args.get("partition_by") or [])
        spec: Spec = (by, order, frame)
        key = (spec, func, arg)
        if key not in self.calls:
            self.calls[key] = _name("_win", key)
        return ColumnRef(self.calls[key])

    def _function(self, node: exp.Window) -> tuple[str, Expr | None]:
        call = node.this
        if type(call) in _RANKING:
            if call.args.get("this") or call.expressions:
                raise self.text.unsupported(f"{_RANKING[type(call)]} with arguments", call)
            return _RANKING[type(call)], None
        fn = registry.from_sql_key(call.key) if isinstance(call, exp.AggFunc) else None
        if fn is None:
            name = call.sql_name().lower() if isinstance(call, exp.Func) else call.key
            raise self.text.unsupported(f"window function {name}", call)
        arg = call.this
        if isinstance(arg, exp.Distinct):
            raise self.text.unsupported(f"{fn.name.upper()}(DISTINCT ...) in a window", call)
        if call.expressions:
            raise self.text.unsupported(f"{fn.name.upper()} with several arguments", call)
        star = fn.for_star()
        if arg is None or isinstance(arg, exp.Star):
            if star is None:
                raise self.text.unsupported(f"{fn.name.upper()}(*)", call)
            return star.name, None
        return fn.name, self.bind_part(arg)

    def _order(self, node: exp.Window) -> tuple[tuple[Expr, bool, bool | None], ...]:
        order = node.args.get("order")
        if order is None:
            return ()
        keys = []
        for ordered in order.expressions:
            descending = bool(ordered.args.get("desc"))
            nulls_first = ordered.args.get("nulls_first")
            explicit = (None if nulls_first is None or bool(nulls_first) == (not descending)
                        else bool(nulls_first))
            keys.append((self.bind_part(ordered.this), descending, explicit))
        return tuple(keys)

    def _frame(self, node: exp.Window, func: str, ordered: bool) -> str:
        spec = node.args.get("spec")
        ranking = func in _RANKING.values()
        if ranking and not ordered:
            raise self.text.unsupported(f"{func} without ORDER BY", node)
        if spec is None or ranking:
            return "range" if ordered else "partition"
        kind = (spec.args.get("kind") or "").lower()
        start = (str(spec.args.get("start") or "").upper(),
                 str(spec.args.get("start_side") or "").lower())
        end = (str(spec.args.get("end") or "").upper(),
               str(spec.args.get("end_side") or "").lower())
        if start == ("UNBOUNDED", "preceding") and end == ("UNBOUNDED", "following"):
            return "partition"
        if ordered and start == ("UNBOUNDED", "preceding") and end[0] == "CURRENT ROW" \
                and kind in ("rows", "range"):
            return kind
        raise self.text.unsupported("window frame other than UNBOUNDED PRECEDING to "
                                    "CURRENT ROW or UNBOUNDED FOLLOWING", spec)

    def build(self, node: PlanNode) -> PlanNode:
        """``node`` with every recorded call's column added."""
        if not self.calls:
            return node
        names = list(node.column_names)
        computed: dict[Expr, str] = {}

        def column(e: Expr) -> str:
            if isinstance(e, ColumnRef) and e.name in names:
                return e.name
            if e not in computed:
                computed[e] = _name("_wx", e)
            return computed[e]

        groups: dict[tuple, list[WindowCall]] = {}
        for (spec, func, arg), name in self.calls.items():
            by, order, frame = spec
            key = (tuple(column(e) for e in by),
                   tuple(SortKey(column(e), d, n) for e, d, n in order), frame)
            groups.setdefault(key, []).append(
                WindowCall(func, None if arg is None else column(arg), name))
        if computed:
            node = Project(node, tuple(NamedExpr(n, ColumnRef(n)) for n in names) +
                           tuple(NamedExpr(n, e) for e, n in computed.items()))
        # no call reads another's column, so the windows may run in any order; each one
        # re-emits the rows its input delta touches and, for a frame over the whole
        # partition, every row of a touched partition (q47 / q57: one month's sum moves
        # the year's average of twelve rows). Such windows run last, so that the ones
        # below see the small delta (and, unchanged, match the windows of other uses of
        # the block that need no partition-wide value)
        for (by, order, frame), calls in sorted(groups.items(),
                                                key=lambda g: g[0][2] == "partition"):
            node = Window(node, by, order, tuple(calls), frame)
        return node


def _name(prefix: str, what: object) -> str:
    """The column standing for a window call or a computed window expression, named for
    what it computes (a digest of its plan, whose ``repr`` is stable: see
    ``PlanNode.fingerprint``) and not for its position. Two SELECT blocks computing the
    same window over the same input then plan equal nodes, which share one operator
    (TPC-DS q47 / q57 use a block thrice, once with a partition average and twice
    without)."""
    return prefix + hashlib.sha256(repr(what).encode()).hexdigest()[:16]
