"""Planning of set operations: UNION [ALL | DISTINCT], INTERSECT [ALL], EXCEPT [ALL].

A query is a SELECT block, a parenthesised query, or a set operation of two queries
(sqlglot parses ``a UNION b INTERSECT c`` with Spark's precedence; MINUS is EXCEPT).
Shape of the plan of a set operation (``plan_query``):

- each operand is planned on its own, as a derived table would be (an ORDER BY without
  LIMIT inside an operand has no effect and is dropped); all its columns are kept, as
  the set operation compares whole rows;
- both operands must have the same number of columns (``SqlSyntaxError`` otherwise,
  naming both counts and the operator's position);
- column ``i`` of the output has the name of the left operand's column ``i`` and the
  wider of both operands' types (``set_operation_type``: Spark's widening, INT with
  BIGINT is BIGINT, DECIMAL(p1, s1) with DECIMAL(p2, s2) keeps max(s1, s2) and the larger
  integral part, integers widen to decimals of their digits, doubles win over decimals);
  an operand whose types differ gets a ``Project`` of ``Cast`` s, the right operand one
  that also renames its columns to the left's;
- the ``SetOp`` node; an ORDER BY ... LIMIT of the set operation is a ``TopK`` over it,
  an ORDER BY alone the presentation order; its keys name output columns (by name or
  position), anything else is refused.
"""

from __future__ import annotations

from typing import Callable

import pyarrow as pa
from sqlglot import exp

from imp_core.errors import SqlSyntaxError, UnknownColumnError
from imp_core.plan.division import MAX_PRECISION
from imp_core.plan.expr import Cast, ColumnRef
from imp_core.plan.nodes import NamedExpr, PlanNode, Project, SetOp, SortKey, TopK
from imp_core.sql.from_clause import Planned, set_operation_name, sort_key
from imp_core.sql.text import SqlText

# plans one SELECT block: (select, nested) -> its plan with all its columns
SelectPlanner = Callable[[exp.Select, bool], Planned]

_KINDS = {exp.Union: "union", exp.Intersect: "intersect", exp.Except: "except"}


def plan_query(node: exp.Expression, text: SqlText, plan_select: SelectPlanner,
               nested: bool) -> Planned:
    """The plan of a SELECT block, a parenthesised query or a set operation. ``nested``:
    the query is an operand or a derived table (its ORDER BY without LIMIT is dropped)."""
    node = unwrap(node)
    if isinstance(node, exp.Select):
        return plan_select(node, nested)
    if isinstance(node, exp.SetOperation):
        return _SetOperation(node, text, plan_select, nested).plan()
    raise text.unsupported(f"{type(node).__name__.upper()} as a query", node)


def unwrap(node: exp.Expression) -> exp.Expression:
    """``node`` without redundant parentheses (a ``Subquery`` with nothing but a body)."""
    while isinstance(node, exp.Subquery) and not [k for k, v in node.args.items()
                                                  if v and k != "this"]:
        node = node.this
    return node


def set_operation_type(a: pa.DataType, b: pa.DataType) -> pa.DataType | None:
    """The type both columns of a set operation become (Spark's wider type of two), or
    None when there is none here.

    >>> set_operation_type(pa.int32(), pa.int64())
    DataType(int64)
    >>> set_operation_type(pa.decimal128(15, 2), pa.decimal128(10, 4))
    Decimal128Type(decimal128(17, 4))
    >>> set_operation_type(pa.int64(), pa.decimal128(5, 2))
    Decimal128Type(decimal128(22, 2))
    >>> set_operation_type(pa.decimal128(5, 2), pa.float64())
    DataType(double)
    >>> set_operation_type(pa.string(), pa.int32()) is None
    True
    """
    if a == b:
        return a
    if pa.types.is_null(a):
        return b
    if pa.types.is_null(b):
        return a
    if _is_string(a) and _is_string(b):
        return pa.string()
    if _integer(a) and _integer(b):
        return a if a.bit_width >= b.bit_width else b
    if pa.types.is_floating(a) or pa.types.is_floating(b):
        other = b if pa.types.is_floating(a) else a
        if not (_numeric(a) and _numeric(b)):
            return None
        if pa.types.is_float64(a) or pa.types.is_float64(b) or pa.types.is_decimal(other):
            return pa.float64()
        return pa.float32()  # FLOAT with an integer or FLOAT
    if (pa.types.is_decimal(a) or _integer(a)) and (pa.types.is_decimal(b) or _integer(b)):
        da, db = _as_decimal(a), _as_decimal(b)
        scale = max(da.scale, db.scale)
        integral = max(da.precision - da.scale, db.precision - db.scale)
        return pa.decimal128(min(integral + scale, MAX_PRECISION), min(scale, MAX_PRECISION))
    return None


def _is_string(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)


def _integer(t: pa.DataType) -> bool:
    return pa.types.is_signed_integer(t)


def _numeric(t: pa.DataType) -> bool:
    return _integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)


def _as_decimal(t: pa.DataType) -> pa.Decimal128Type:
    if pa.types.is_decimal(t):
        return t
    digits = {8: 3, 16: 5, 32: 10, 64: 20}[t.bit_width]  # Spark's DecimalType.forType
    return pa.decimal128(digits, 0)


class _SetOperation:
    def __init__(self, node: exp.SetOperation, text: SqlText, plan_select: SelectPlanner,
                 nested: bool):
        self.node = node
        self.text = text
        self.plan_select = plan_select
        self.nested = nested
        self.name = set_operation_name(node)

    def plan(self) -> Planned:
        node = self.node
        kind = _KINDS.get(type(node))
        if kind is None:
            raise self.text.unsupported(self.name, node)
        # anything else (OFFSET, BY NAME, CORRESPONDING, ...) is refused by name
        extra = [k for k, v in node.args.items()
                 if v and k not in ("this", "expression", "distinct", "order", "limit")]
        if extra:
            what = {"with_": "WITH"}.get(extra[0], extra[0].strip("_").replace("_", " ").upper())
            raise self.text.unsupported(f"{what} on a {self.name}", node, what.split()[0])
        left = plan_query(node.this, self.text, self.plan_select, True)
        right = plan_query(node.expression, self.text, self.plan_select, True)
        if len(left.output) != len(right.output):
            line, column = self.text.locate(node.expression, self.name.split()[0])
            raise SqlSyntaxError(
                f"the operands of {self.name} have different numbers of columns: "
                f"{len(left.output)} ({', '.join(left.output)}) and {len(right.output)} "
                f"({', '.join(right.output)})", line, column)
        types = []
        for i, (lf, rf) in enumerate(zip(left.node.schema, right.node.schema)):
            t = set_operation_type(lf.dtype, rf.dtype)
            if t is None:
                raise self.text.unsupported(
                    f"{self.name} of incompatible column types", node.expression,
                    detail=f"column {i + 1} ({left.output[i]}) is {lf.dtype} on the left "
                           f"and {rf.dtype} on the right")
            types.append(t)
        names = left.output
        lnode = _conformed(left.node, names, types)
        rnode = _conformed(right.node, names, types)
        distinct = bool(node.args.get("distinct", True))
        out: PlanNode = SetOp(lnode, rnode, kind, distinct)
        keys = self._order(names)
        limit = self._limit()
        if limit is not None:
            if not keys:
                raise self.text.unsupported("LIMIT without ORDER BY", node.args["limit"],
                                            "LIMIT")
            return Planned(TopK(out, tuple(keys), limit), names)
        return Planned(out, names, () if self.nested else tuple(keys))

    def _order(self, names: tuple[str, ...]) -> list[SortKey]:
        order = self.node.args.get("order")
        if order is None:
            return []
        keys = []
        for ordered in order.expressions:
            target = ordered.this
            name = None
            if isinstance(target, exp.Literal) and target.is_int:
                pos = int(target.to_py())
                if not 1 <= pos <= len(names):
                    raise UnknownColumnError(f"ORDER BY position {pos} is not in the "
                                             f"{self.name} list{self.text.where(target)}")
                name = names[pos - 1]
            elif isinstance(target, exp.Column) and not target.table and \
                    isinstance(target.this, exp.Identifier):
                name = next((n for n in names if n.lower() == target.name.lower()), None)
                if name is None:
                    raise UnknownColumnError(
                        f"ORDER BY column {target.name!r}{self.text.where(target)} is not "
                        f"an output column of the {self.name}: {', '.join(names)}")
            if name is None:
                raise self.text.unsupported(f"ORDER BY expression of a {self.name} (only "
                                            f"output columns by name or position)", target)
            keys.append(sort_key(ordered, name))
        return keys

    def _limit(self) -> int | None:
        limit = self.node.args.get("limit")
        if limit is None:
            return None
        if limit.args.get("offset") or limit.args.get("expressions"):
            raise self.text.unsupported("OFFSET", limit, "OFFSET")
        count = limit.expression
        if not (isinstance(count, exp.Literal) and count.is_int and count.to_py() >= 0):
            raise self.text.unsupported("LIMIT with a count that is not a constant integer",
                                        limit, "LIMIT")
        return int(count.to_py())


def _conformed(node: PlanNode, names: tuple[str, ...],
               types: list[pa.DataType]) -> PlanNode:
    """``node`` with columns ``names`` of ``types`` (a cast where a type differs)."""
    fields = node.schema
    if tuple(f.name for f in fields) == names and [f.dtype for f in fields] == types:
        return node
    exprs = []
    for f, name, t in zip(fields, names, types):
        ref = ColumnRef(f.name)
        exprs.append(NamedExpr(name, ref if f.dtype == t else Cast(ref, t)))
    return Project(node, tuple(exprs))

