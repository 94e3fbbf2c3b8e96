"""Relational plan nodes: the bag algebra of the IMP paper (Fig. 4).

Invariants:
- nodes are frozen dataclasses; a plan is a tree (a node is never mutated after build);
- every node's ``schema`` has unique field names, and expressions of a node refer only
  to field names of its input schema(s);
- ``Aggregate`` groups on and aggregates plain input columns (the planner projects any
  expression first), ``TopK`` orders on plain input columns.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from functools import cached_property
from typing import Iterator

import pyarrow as pa

from imp_core.plan.aggregates import registry
from imp_core.plan.aggregates.base import AggregateFunction
from imp_core.plan.expr import ColumnRef, Expr, conjuncts


@dataclass(frozen=True)
class Field:
    name: str
    dtype: pa.DataType

    def __repr__(self) -> str:
        return f"Field({self.name!r}, {self.dtype})"


Schema = tuple[Field, ...]


def arrow_schema(schema: Schema) -> pa.Schema:
    return pa.schema([pa.field(f.name, f.dtype) for f in schema])


class PlanNode:
    """Base class: a relational operator producing a bag of tuples."""

    def children(self) -> tuple[PlanNode, ...]:
        return ()

    @property
    def schema(self) -> Schema:  # pragma: no cover - abstract
        raise NotImplementedError

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.schema)

    def walk(self) -> Iterator[PlanNode]:
        yield self
        for child in self.children():
            yield from child.walk()

    def tables(self) -> frozenset[str]:
        return frozenset(n.table for n in self.walk() if isinstance(n, Scan))

    def fingerprint(self) -> str:
        """Stable hash of the plan's structure (used to stamp state snapshots)."""
        return hashlib.sha256(repr(self).encode()).hexdigest()[:32]

    def explain(self, indent: int = 0) -> str:
        pad = "  " * indent
        lines = [pad + self._describe()]
        lines += [c.explain(indent + 1) for c in self.children()]
        return "\n".join(lines)

    def _describe(self) -> str:  # pragma: no cover - overridden
        return type(self).__name__


@dataclass(frozen=True)
class Scan(PlanNode):
    """Table access. ``fields[i]`` is the output field for ``source_columns[i]``."""

    table: str
    source_columns: tuple[str, ...]
    fields: Schema

    @property
    def schema(self) -> Schema:
        return self.fields

    def output_name(self, source_column: str) -> str:
        return self.fields[self.source_columns.index(source_column)].name

    def _describe(self) -> str:
        return f"Scan {self.table} [{', '.join(f.name for f in self.fields)}]"


@dataclass(frozen=True)
class Select(PlanNode):
    input: PlanNode
    predicate: Expr

    def children(self) -> tuple[PlanNode, ...]:
        return (self.input,)

    @property
    def schema(self) -> Schema:
        return self.input.schema

    def _describe(self) -> str:
        return f"Select {self.predicate}"


@dataclass(frozen=True)
class NamedExpr:
    name: str
    expr: Expr


@dataclass(frozen=True)
class Project(PlanNode):
    input: PlanNode
    exprs: tuple[NamedExpr, ...]

    def children(self) -> tuple[PlanNode, ...]:
        return (self.input,)

    @cached_property
    def schema(self) -> Schema:
        from imp_core.plan.evaluate import infer_type

        in_schema = arrow_schema(self.input.schema)
        return tuple(Field(e.name, infer_type(e.expr, in_schema)) for e in self.exprs)

    def is_rename_only(self) -> bool:
        return all(isinstance(e.expr, ColumnRef) for e in self.exprs)

    def _describe(self) -> str:
        return "Project " + ", ".join(f"{e.expr} AS {e.name}" for e in self.exprs)


@dataclass(frozen=True)
class Join(PlanNode):
    """Inner join (theta or equi); ``condition`` None is a cross product."""

    left: PlanNode
    right: PlanNode
    condition: Expr | None = None

    def children(self) -> tuple[PlanNode, ...]:
        return (self.left, self.right)

    @property
    def schema(self) -> Schema:
        return self.left.schema + self.right.schema

    def equi_keys(self) -> tuple[tuple[str, ...], tuple[str, ...], Expr | None]:
        """Split the condition into equi-join column pairs and a residual predicate."""
        return split_equi_keys(self.condition, self.left.column_names,
                               self.right.column_names)

    def _describe(self) -> str:
        return f"Join ON {self.condition}"


def split_equi_keys(condition: Expr | None, left_names: tuple[str, ...],
                    right_names: tuple[str, ...],
                    ) -> tuple[tuple[str, ...], tuple[str, ...], Expr | None]:
    """``condition``'s conjuncts ``left = right`` over plain columns as key pairs (left
    columns, right columns), and the conjunction of the other conjuncts."""
    from imp_core.plan.expr import BinaryOp, conjoin

    lset, rset = set(left_names), set(right_names)
    lk: list[str] = []
    rk: list[str] = []
    rest: list[Expr] = []
    for part in conjuncts(condition):
        if (isinstance(part, BinaryOp) and part.op == "="
                and isinstance(part.left, ColumnRef) and isinstance(part.right, ColumnRef)):
            a, b = part.left.name, part.right.name
            if a in lset and b in rset:
                lk.append(a), rk.append(b)
                continue
            if b in lset and a in rset:
                lk.append(b), rk.append(a)
                continue
        rest.append(part)
    return tuple(lk), tuple(rk), conjoin(rest)


@dataclass(frozen=True)
class SemiJoin(PlanNode):
    """The rows of ``left`` that have (``anti`` False: EXISTS / IN) or do not have
    (``anti`` True: NOT EXISTS / NOT IN) a row of ``right`` satisfying ``condition``.

    Bag semantics: a left row keeps its multiplicity; the right side only decides
    membership. With ``null_aware`` (NOT IN, ``condition`` is then exactly the key
    equalities) SQL's three-valued logic applies: a left row is kept only if ``right`` is
    empty, or its keys are all non-NULL, no right row equals them and no right row has a
    NULL key. The output schema is ``left``'s.
    """

    left: PlanNode
    right: PlanNode
    condition: Expr | None = None
    anti: bool = False
    null_aware: bool = False

    def children(self) -> tuple[PlanNode, ...]:
        return (self.left, self.right)

    @property
    def schema(self) -> Schema:
        return self.left.schema

    def equi_keys(self) -> tuple[tuple[str, ...], tuple[str, ...], Expr | None]:
        return split_equi_keys(self.condition, self.left.column_names,
                               self.right.column_names)

    @property
    def uncorrelated(self) -> bool:
        """Whether no left row's answer depends on the row: no equi keys and a condition
        (if any) over the right side's columns only, so the right side is one yes/no for
        every left row (an uncorrelated EXISTS / NOT EXISTS); no pairs are needed."""
        lk, _, residual = self.equi_keys()
        if lk or self.null_aware:
            return False
        if residual is None:
            return True
        cols = residual.columns()
        return cols <= set(self.right.column_names) and not cols & set(self.left.column_names)

    def _describe(self) -> str:
        kind = ("NullAwareAntiJoin" if self.null_aware else
                "AntiJoin" if self.anti else "SemiJoin")
        return f"{kind} ON {self.condition}"


OUTER_KINDS = ("left", "full")


@dataclass(frozen=True)
class OuterJoin(PlanNode):
    """``left`` LEFT or FULL OUTER JOIN ``right`` ON ``condition``: the inner join's rows,
    plus every left row (and, for ``full``, every right row) without a partner, padded
    with NULLs on the other side. (RIGHT joins are planned as LEFT joins of the swapped
    inputs.) The output schema is ``left``'s fields then ``right``'s.
    """

    left: PlanNode
    right: PlanNode
    condition: Expr | None
    kind: str = "left"

    def __post_init__(self) -> None:
        if self.kind not in OUTER_KINDS:
            raise ValueError(f"unknown outer join kind {self.kind!r}")

    def children(self) -> tuple[PlanNode, ...]:
        return (self.left, self.right)

    @property
    def schema(self) -> Schema:
        return self.left.schema + self.right.schema

    def equi_keys(self) -> tuple[tuple[str, ...], tuple[str, ...], Expr | None]:
        return split_equi_keys(self.condition, self.left.column_names,
                               self.right.column_names)

    def _describe(self) -> str:
        return f"{self.kind.capitalize()}OuterJoin ON {self.condition}"


@dataclass(frozen=True)
class AggCall:
    func: str  # a name of imp_core.plan.aggregates.registry
    arg: str | None  # input column; None only for count_star
    name: str  # output field name

    def __post_init__(self) -> None:
        if (self.arg is None) == self.function.takes_argument:  # raises for unknown names
            raise ValueError("count_star takes no argument; other aggregates take one")

    @property
    def function(self) -> AggregateFunction:
        """What ``func`` names: its state, delta rule and value (the registry's entry)."""
        return registry.get(self.func)


@dataclass(frozen=True)
class Aggregate(PlanNode):
    """Group ``input`` on ``group_by`` columns and compute ``aggregates`` per group.

    With no group-by columns there is one group; like the paper's annotated
    semantics, an empty input yields no group (not a row of NULLs).
    """

    input: PlanNode
    group_by: tuple[str, ...]
    aggregates: tuple[AggCall, ...]

    def children(self) -> tuple[PlanNode, ...]:
        return (self.input,)

    @cached_property
    def schema(self) -> Schema:
        from imp_core.plan.evaluate import aggregate_type

        by_name = {f.name: f for f in self.input.schema}
        keys = tuple(by_name[g] for g in self.group_by)
        aggs = tuple(
            Field(a.name, aggregate_type(a.func, None if a.arg is None else by_name[a.arg].dtype))
            for a in self.aggregates
        )
        return keys + aggs

    def _describe(self) -> str:
        aggs = ", ".join(f"{a.func}({a.arg or '*'}) AS {a.name}" for a in self.aggregates)
        return f"Aggregate BY [{', '.join(self.group_by)}] {aggs}"


@dataclass(frozen=True)
class Distinct(PlanNode):
    input: PlanNode

    def children(self) -> tuple[PlanNode, ...]:
        return (self.input,)

    @property
    def schema(self) -> Schema:
        return self.input.schema

    def _describe(self) -> str:
        return "Distinct"


SET_KINDS = ("union", "intersect", "except")


@dataclass(frozen=True)
class SetOp(PlanNode):
    """``left`` UNION / INTERSECT / EXCEPT ``right`` (``distinct`` False: the ALL form).

    Rows are compared as whole rows, column by column in position, NULLs equal to NULLs
    (as in SQL's set operations). With l and r the multiplicities of a row in ``left``
    and ``right``, its multiplicity in the output is:

    ==========  ================  ======================
    kind        ALL               DISTINCT
    ==========  ================  ======================
    union       l + r             1 if l + r > 0
    intersect   min(l, r)         1 if l > 0 and r > 0
    except      max(l - r, 0)     1 if l > 0 and r = 0
    ==========  ================  ======================

    Both inputs have the same column types in the same order (the planner casts them to
    the wider type); the output schema is ``left``'s (names too), ``right``'s names are
    ignored.
    """

    left: PlanNode
    right: PlanNode
    kind: str = "union"
    distinct: bool = False

    def __post_init__(self) -> None:
        if self.kind not in SET_KINDS:
            raise ValueError(f"unknown set operation {self.kind!r}")
        lt = [f.dtype for f in self.left.schema]
        rt = [f.dtype for f in self.right.schema]
        if lt != rt:
            raise ValueError(f"the inputs of {self.sql_name} differ in column types: "
                             f"{', '.join(map(str, lt))} vs {', '.join(map(str, rt))}")

    def children(self) -> tuple[PlanNode, ...]:
        return (self.left, self.right)

    @property
    def schema(self) -> Schema:
        return self.left.schema

    @property
    def linear(self) -> bool:
        """Whether the output is the two inputs' rows side by side (UNION ALL)."""
        return self.kind == "union" and not self.distinct

    @property
    def negates_right(self) -> bool:
        """Whether rows of ``right`` remove output rows (EXCEPT): the output is not
        monotone in the right input, which then contributes no provenance."""
        return self.kind == "except"

    @property
    def sql_name(self) -> str:
        """``UNION``, ``UNION ALL``, ``INTERSECT``, ..., as Spark SQL writes it."""
        return self.kind.upper() + ("" if self.distinct else " ALL")

    def _describe(self) -> str:
        return self.kind.capitalize() + ("" if self.distinct else "All")


def set_multiplicity(kind: str, distinct: bool, left: int, right: int) -> int:
    """A row's multiplicity in the output of ``SetOp(kind, distinct)`` given its
    multiplicities ``left`` and ``right`` in the inputs (the table of ``SetOp``).

    >>> [set_multiplicity(k, d, 3, 1) for k in SET_KINDS for d in (False, True)]
    [4, 1, 1, 1, 2, 0]
    """
    if kind == "union":
        total = left + right
        return min(total, 1) if distinct else total
    if kind == "intersect":
        both = min(left, right)
        return min(both, 1) if distinct else both
    if distinct:
        return 1 if left > 0 and right == 0 else 0
    return max(left - right, 0)


@dataclass(frozen=True)
class SortKey:
    column: str
    descending: bool = False
    nulls_first: bool | None = None  # None: SQL default (NULLs first ascending)

    @property
    def effective_nulls_first(self) -> bool:
        return (not self.descending) if self.nulls_first is None else self.nulls_first


@dataclass(frozen=True)
class TopK(PlanNode):
    """The first ``k`` tuples in the order of ``order``.

    Ties are broken by the remaining columns and then by the annotation, so the
    result (and its sketch) is deterministic.
    """

    input: PlanNode
    order: tuple[SortKey, ...]
    k: int

    def children(self) -> tuple[PlanNode, ...]:
        return (self.input,)

    @property
    def schema(self) -> Schema:
        return self.input.schema

    def _describe(self) -> str:
        keys = ", ".join(f"{s.column} {'DESC' if s.descending else 'ASC'}" for s in self.order)
        return f"TopK {self.k} ORDER BY {keys}"


@dataclass(frozen=True)
class QueryPlan:
    """A planned query: the plan tree plus presentation-only ordering of the result."""

    sql: str
    root: PlanNode
    order_by: tuple[SortKey, ...] = field(default=())
    # the SQL's output names when they repeat one (the root's fields name them apart:
    # ``x``, ``x_2``); empty when they are the root's
    output_names: tuple[str, ...] = field(default=())

    @property
    def schema(self) -> Schema:
        return self.root.schema

    def fingerprint(self) -> str:
        return self.root.fingerprint()


def at_most_one_row(node: PlanNode) -> bool:
    """Whether ``node`` yields at most one row whatever its input: an aggregate without
    GROUP BY, or a join without condition of such rows, under projections and selections
    only."""
    while isinstance(node, (Project, Select)):
        node = node.input
    if isinstance(node, Join) and node.condition is None:  # one row times one row
        return at_most_one_row(node.left) and at_most_one_row(node.right)
    return isinstance(node, Aggregate) and not node.group_by


def scalar_filter_parts(node: PlanNode) -> tuple[PlanNode, PlanNode, Expr] | None:
    """(L, S, p) when ``node`` is ``π σ_p (L × S)`` with S at most one row and the
    projection naming only L's columns; else None."""
    if not (isinstance(node, Project) and node.is_rename_only()
            and isinstance(node.input, Select) and isinstance(node.input.input, Join)):
        return None
    join = node.input.input
    if join.condition is not None or not at_most_one_row(join.right):
        return None
    left_names = set(join.left.column_names)
    if not all(isinstance(e.expr, ColumnRef) and e.expr.name in left_names
               for e in node.exprs):
        return None
    return join.left, join.right, node.input.predicate


RANKING_FUNCTIONS = ("rank", "dense_rank", "row_number")
WINDOW_FRAMES = ("partition", "range", "rows")


@dataclass(frozen=True)
class WindowCall:
    """One window function: a ranking function (``RANKING_FUNCTIONS``, no argument) or
    an aggregate of the registry (``count_star`` without argument)."""

    func: str
    arg: str | None
    name: str

    def __post_init__(self) -> None:
        if self.ranking:
            if self.arg is not None:
                raise ValueError(f"{self.func} takes no argument")
        elif (self.arg is None) == self.function.takes_argument:
            raise ValueError("count_star takes no argument; other aggregates take one")

    @property
    def ranking(self) -> bool:
        return self.func in RANKING_FUNCTIONS

    @property
    def function(self) -> AggregateFunction:
        return registry.get(self.func)


@dataclass(frozen=True)
class Window(PlanNode):
    """Every input row plus one column per call, computed over the rows of its partition
    (equal ``partition_by`` values) in the order ``order``.

    ``frame``: "partition" (no ORDER BY: every row of the partition), "range" (ORDER BY
    with the default frame: the rows up to the row's last peer, peers being the rows with
    equal order values) or "rows" (``ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW``:
    the occurrences up to the row's own in the total order of ``imp_core.engine.ordering``,
    which breaks ties by the other columns, then the annotation). Ranking functions need
    an order and ignore the frame; ``row_number`` numbers occurrences in that total order.
    """

    input: PlanNode
    partition_by: tuple[str, ...]
    order: tuple[SortKey, ...]
    calls: tuple[WindowCall, ...]
    frame: str = "partition"

    def __post_init__(self) -> None:
        if self.frame not in WINDOW_FRAMES:
            raise ValueError(f"unknown window frame {self.frame!r}")
        if (self.frame == "partition") != (not self.order):
            raise ValueError("a window has an order exactly when its frame is not "
                             "the whole partition")

    def children(self) -> tuple[PlanNode, ...]:
        return (self.input,)

    @cached_property
    def schema(self) -> Schema:
        from imp_core.plan.evaluate import aggregate_type

        by_name = {f.name: f for f in self.input.schema}
        out = []
        for c in self.calls:
            if c.ranking:
                out.append(Field(c.name, pa.int32()))
            else:
                arg = None if c.arg is None else by_name[c.arg].dtype
                out.append(Field(c.name, aggregate_type(c.func, arg)))
        return self.input.schema + tuple(out)

    def _describe(self) -> str:
        calls = ", ".join(f"{c.func}({c.arg or ''}) AS {c.name}" for c in self.calls)
        keys = ", ".join(f"{s.column} {'DESC' if s.descending else 'ASC'}" for s in self.order)
        return (f"Window {calls} PARTITION BY [{', '.join(self.partition_by)}] "
                f"ORDER BY [{keys}] {self.frame.upper()}")
