"""GROUP BY ROLLUP / CUBE / GROUPING SETS and ``grouping()`` / ``grouping_id()``.

The GROUP BY clause is read into its grouping keys (distinct expressions, in order of
first appearance: Spark's order for ``grouping_id()``) and its grouping sets (tuples of
key positions), with Spark's rules: ``ROLLUP(a, b)`` is ``(a, b), (a), ()``, ``CUBE(a, b)``
every subset, ``GROUPING SETS (...)`` the sets as listed (a parenthesized list is one
element), ``a, b WITH ROLLUP`` / ``WITH CUBE`` the same as ``ROLLUP(a, b)`` / ``CUBE``, and
several items (``a, ROLLUP(b, c)``) their cross product, sets concatenated.

The plan is ``Aggregate(Expand(pre))`` (``imp_core.plan.expand``): the aggregation groups on
the expanded keys ``_r<i>`` (NULL outside a set) and the set's position ``_gid``; after
aggregation a grouping key denotes its expanded column, and ``grouping(k)`` (TINYINT, 1
where ``k`` is aggregated away) and ``grouping_id()`` (BIGINT, the bits of
``grouping`` of each key, first key highest; Spark takes arguments only when they are
all the keys in their order)
are CASE expressions over ``_gid``.
"""

from __future__ import annotations

from itertools import combinations, product
from typing import Callable

import pyarrow as pa
from sqlglot import exp

from imp_core.plan.expand import SET_TYPE, Expand
from imp_core.plan.expr import Case, ColumnRef, Expr, InList, Literal
from imp_core.plan.nodes import PlanNode
from imp_core.sql.text import SqlText

SET_COLUMN = "_gid"
_PREFIX = "_r"
_ANALYTIC = (exp.Rollup, exp.Cube, exp.GroupingSets)
Sets = list[tuple[exp.Expression, ...]]


def has_grouping_sets(group: exp.Group) -> bool:
    return any(isinstance(n, _ANALYTIC) for n in group.expressions) or bool(
        group.args.get("rollup") or group.args.get("cube"))


def read_group(group: exp.Group, text: SqlText) -> tuple[list[exp.Expression], Sets]:
    """The grouping key nodes of a GROUP BY with grouping sets, and its sets (as tuples of
    key nodes, each an element of the key list)."""
    for key, construct in (("grouping_sets", "GROUP BY ... GROUPING SETS"),
                           ("totals", "GROUP BY ... WITH TOTALS"), ("all", "GROUP BY ALL")):
        if group.args.get(key):
            raise text.unsupported(construct, group)
    items: list[Sets] = []
    plain: list[exp.Expression] = []
    for node in group.expressions:
        if isinstance(node, exp.Rollup):
            items.append(_rollup([_element(e, text) for e in node.expressions]))
        elif isinstance(node, exp.Cube):
            items.append(_cube([_element(e, text) for e in node.expressions]))
        elif isinstance(node, exp.GroupingSets):
            items.append([_element(e, text) for e in node.expressions])
        else:
            plain.append(node)
    if group.args.get("rollup"):
        items.append(_rollup([(p,) for p in plain]))
        plain = []
    elif group.args.get("cube"):
        items.append(_cube([(p,) for p in plain]))
        plain = []
    if plain:
        items.insert(0, [tuple(plain)])
    sets: Sets = [tuple(n for part in combo for n in part) for combo in product(*items)]
    keys: list[exp.Expression] = []
    for node in (n for s in sets for n in s):
        if not any(node == k for k in keys):
            keys.append(node)
    return keys, sets


def _element(node: exp.Expression, text: SqlText) -> tuple[exp.Expression, ...]:
    if isinstance(node, exp.Tuple):
        parts = tuple(node.expressions)
    elif isinstance(node, exp.Paren):
        parts = (node.this,)
    else:
        parts = (node,)
    for part in parts:
        if isinstance(part, _ANALYTIC + (exp.Tuple,)):
            raise text.unsupported("nested grouping sets", part)
    return parts


def _rollup(elements: list[tuple[exp.Expression, ...]]) -> Sets:
    return [tuple(n for e in elements[:i] for n in e) for i in range(len(elements), -1, -1)]


def _cube(elements: list[tuple[exp.Expression, ...]]) -> Sets:
    return [tuple(n for e in chosen for n in e)
            for r in range(len(elements), -1, -1) for chosen in combinations(elements, r)]


class GroupingSets:
    """The grouping sets of one SELECT: ``keys`` (bound key expressions, in order) and
    ``sets`` (per set, the positions of its keys)."""

    def __init__(self, keys: list[Expr], sets: list[tuple[int, ...]]):
        self.keys = keys
        self.sets = tuple(tuple(sorted(set(s))) for s in sets)
        self.names = tuple(f"{_PREFIX}{i}" for i in range(len(keys)))

    def expanded(self) -> dict[Expr, str]:
        """Each key expression's column after aggregation (its expanded copy)."""
        return dict(zip(self.keys, self.names))

    def expand(self, pre: PlanNode, key_columns: list[str]) -> Expand:
        """``Expand`` over the pre-aggregation projection (``key_columns``: each key's
        projected column)."""
        return Expand(pre, tuple(key_columns), self.sets, self.names, SET_COLUMN)

    def function(self, node: exp.Expression, args: list[Expr], text: SqlText) -> Expr:
        """``grouping(k)`` or ``grouping_id(k...)`` over the set column (``args`` bound
        as pre-aggregation expressions)."""
        positions = []
        for arg, source in zip(args, _arguments(node)):
            if arg not in self.keys:
                raise text.unsupported(f"{node.sql_name().lower()} of an expression that is "
                                       "not a grouping key", source)
            positions.append(self.keys.index(arg))
        if isinstance(node, exp.Grouping):
            if len(positions) != 1:
                raise text.unsupported("grouping() with other than one argument", node)
            return self._case(lambda s: int(positions[0] not in s), pa.int8())
        every = list(range(len(self.keys)))
        if positions and positions != every:  # Spark: GROUPING_ID_COLUMN_MISMATCH
            raise text.unsupported("grouping_id() of columns other than all grouping keys "
                                   "in their order", node)
        positions = every
        if len(positions) > 63:
            raise text.unsupported("grouping_id() over more than 63 columns", node)

        def value(s: tuple[int, ...]) -> int:
            out = 0
            for p in positions:
                out = (out << 1) | int(p not in s)
            return out

        return self._case(value, pa.int64())

    def _case(self, value: Callable[[tuple[int, ...]], int], dtype: pa.DataType) -> Expr:
        by_value: dict[int, list[int]] = {}
        for i, s in enumerate(self.sets):
            by_value.setdefault(value(s), []).append(i)
        column = ColumnRef(SET_COLUMN)
        whens = tuple((InList(column, tuple(Literal(i, SET_TYPE) for i in ids)),
                       Literal(v, dtype)) for v, ids in sorted(by_value.items()) if v)
        if not whens:
            return Literal(0, dtype)
        return Case(whens, Literal(0, dtype))


def grouping_arguments(node: exp.Expression) -> list[exp.Expression]:
    return _arguments(node)


def _arguments(node: exp.Expression) -> list[exp.Expression]:
    if isinstance(node, exp.Grouping):
        return list(node.expressions) or ([node.this] if node.this is not None else [])
    return ([node.this] if node.this is not None else []) + list(node.expressions)


def is_grouping_function(node: exp.Expression) -> bool:
    return isinstance(node, (exp.Grouping, exp.GroupingId))


def bind_grouping_sets(group: exp.Group, text: SqlText,
                       bind_key: Callable[[exp.Expression], Expr]) -> GroupingSets:
    """The grouping sets of ``group`` with each key bound by ``bind_key`` (which also
    registers it as a group key of the aggregation)."""
    nodes, sets = read_group(group, text)
    keys: list[Expr] = []
    position: list[int] = []  # per key node: the position of its bound expression
    for node in nodes:
        bound = bind_key(node)
        if bound not in keys:
            keys.append(bound)
        position.append(keys.index(bound))
    at = [next(i for i, k in enumerate(nodes) if k == n) for s in sets for n in s]
    flat = iter(position[i] for i in at)
    return GroupingSets(keys, [tuple(next(flat) for _ in s) for s in sets])
