"""Translation of sqlglot scalar expressions into ``imp_core.plan.expr`` trees.

Invariants: the result only contains node kinds of ``imp_core.plan.expr`` and column
references produced by the caller's resolver; literals carry the type Spark gives
them (``0.05`` is a decimal, ``DATE '...'`` a date32); anything outside the supported
subset raises ``UnsupportedSqlError`` naming the construct and where it is; sqlglot
exceptions never escape.
"""

from __future__ import annotations

import decimal
import re
from dataclasses import dataclass
from typing import Callable

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from imp_core.errors import UnsupportedSqlError
from imp_core.plan import numeric_casts
from imp_core.plan.aggregates import registry
from imp_core.plan.aggregates.distinct import distinct_call
from imp_core.plan.evaluate import literal_type
from imp_core.plan.expr import (
    BinaryOp,
    Case,
    Cast,
    Expr,
    FuncCall,
    InList,
    Like,
    Literal,
    UnaryOp,
)
from imp_core.sql.text import SqlText

_BINARY = {
    exp.Add: "+", exp.Sub: "-", exp.Mul: "*", exp.Div: "/", exp.Mod: "%",
    exp.EQ: "=", exp.NEQ: "<>", exp.LT: "<", exp.LTE: "<=", exp.GT: ">", exp.GTE: ">=",
    exp.And: "and", exp.Or: "or",
}
_UNARY_FUNCTIONS = {exp.Abs: "abs", exp.Upper: "upper", exp.Lower: "lower"}
_DATE_PARTS = {exp.Year: "year", exp.Month: "month", exp.Day: "day", exp.DayOfMonth: "day"}
_EXTRACT_UNITS = {"YEAR": "year", "MONTH": "month", "DAY": "day", "DAYOFMONTH": "day"}
_NAMED_OPERATORS = {exp.NullSafeEQ: "<=> operator", exp.Tuple: "row value",
                    exp.Interval: "INTERVAL literal"}

_T = exp.DataType.Type
_SIMPLE_TYPES = {
    _T.TINYINT: pa.int8(), _T.SMALLINT: pa.int16(), _T.INT: pa.int32(), _T.BIGINT: pa.int64(),
    _T.FLOAT: pa.float32(), _T.DOUBLE: pa.float64(), _T.BOOLEAN: pa.bool_(),
    _T.DATE: pa.date32(), _T.TEXT: pa.string(), _T.VARCHAR: pa.string(),
    _T.CHAR: pa.string(), _T.TIMESTAMP: pa.timestamp("us"), _T.TIMESTAMPTZ: pa.timestamp("us"),
    _T.TIMESTAMPNTZ: pa.timestamp("us"), _T.TIMESTAMPLTZ: pa.timestamp("us"),
}
_MAX_DECIMAL_PRECISION = 38

Resolver = Callable[[exp.Column], Expr]
AggregateHook = Callable[[exp.Expression], Expr]


@dataclass(frozen=True)
class BindContext:
    """What an expression may refer to where it appears (one clause of one SELECT)."""

    text: SqlText
    resolve: Resolver
    clause: str  # for messages, e.g. "WHERE"
    aggregate: AggregateHook | None = None  # None: aggregates are not allowed here
    # the error for a subquery inside the expression (correlated or not)
    subquery: Callable[[exp.Expression], UnsupportedSqlError] | None = None
    # binds a scalar subquery where one may stand as a value (the SELECT list)
    scalar: Callable[[exp.Subquery], Expr] | None = None
    no_aggregate: str = ""  # the construct to report for an aggregate (default: by clause)
    # binds a window call to the column standing for it (None: no window functions here)
    window: Callable[[exp.Window], Expr] | None = None

    def unsupported(self, construct: str, node: exp.Expression | None = None,
                    keyword: str | None = None, detail: str = "") -> UnsupportedSqlError:
        return self.text.unsupported(construct, node, keyword, detail)


def split_and(node: exp.Expression) -> list[exp.Expression]:
    """The conjuncts of ``node`` (parentheses and nested ANDs flattened)."""
    if isinstance(node, exp.Paren):
        return split_and(node.this)
    if isinstance(node, exp.And):
        return split_and(node.this) + split_and(node.expression)
    return [node]


def bind(node: exp.Expression, ctx: BindContext) -> Expr:
    """The ``imp_core.plan.expr`` equivalent of ``node``."""
    handler = _HANDLERS.get(type(node))
    if handler is not None:
        return handler(node, ctx)
    op = _BINARY.get(type(node))
    if op is not None:
        return BinaryOp(op, bind(node.this, ctx), bind(node.expression, ctx))
    return _bind_other(node, ctx)


def _bind_other(node: exp.Expression, ctx: BindContext) -> Expr:
    if isinstance(node, exp.Window):
        if ctx.window is not None:
            return ctx.window(node)
        raise ctx.unsupported("window function", node)
    if isinstance(node, exp.Subquery) and ctx.scalar is not None:
        return ctx.scalar(node)
    if isinstance(node, (exp.Subquery, exp.Exists, exp.Any, exp.All, exp.Select)):
        raise _subquery_error(node, ctx)
    if isinstance(node, exp.AggFunc):
        if ctx.aggregate is None:
            raise ctx.unsupported(ctx.no_aggregate or f"aggregate function in {ctx.clause}",
                                  node)
        return ctx.aggregate(node)
    if isinstance(node, exp.Anonymous):
        if node.name.lower() == "pmod" and len(node.expressions) == 2:
            return FuncCall("pmod", tuple(bind(a, ctx) for a in node.expressions))
        if node.name.lower() == "__imp_one_row" and len(node.expressions) == 2:
            return FuncCall("one_row", tuple(bind(a, ctx) for a in node.expressions))
        if node.name.lower() == "try_mod" and len(node.expressions) == 2:
            left, right = (bind(a, ctx) for a in node.expressions)
            return FuncCall("try", (BinaryOp("%", left, right),))
        raise ctx.unsupported(f"unknown function {node.name.lower()}", node)
    if isinstance(node, exp.Func):
        raise ctx.unsupported(f"unsupported function {node.sql_name().lower()}", node)
    if isinstance(node, exp.Star):
        raise ctx.unsupported("* inside an expression", node)
    named = _NAMED_OPERATORS.get(type(node))
    if named is not None:
        raise ctx.unsupported(named, node)
    raise ctx.unsupported("expression", node, detail=_sql(node))


def _subquery_error(node: exp.Expression, ctx: BindContext) -> UnsupportedSqlError:
    if ctx.subquery is not None:
        return ctx.subquery(node)
    return ctx.unsupported(f"subquery in {ctx.clause}", node)


def _sql(node: exp.Expression) -> str:
    try:
        return node.sql(dialect="spark")[:80]
    except Exception:  # message text only: a generator failure must not hide the real error
        return type(node).__name__


# -- leaves ------------------------------------------------------------------------------


def _column(node: exp.Column, ctx: BindContext) -> Expr:
    if isinstance(node.this, exp.Star):
        raise ctx.unsupported("* inside an expression", node)
    return ctx.resolve(node)


def _literal(node: exp.Literal, ctx: BindContext) -> Expr:
    if node.is_string:
        return Literal(node.this, pa.string())
    return _typed_literal(_number(node.this), node, ctx)


def _number(text: str) -> int | float | decimal.Decimal:
    """Spark's reading of a numeric literal: integer, exact decimal, or double (exponent)."""
    if re.fullmatch(r"\d+", text):
        value = int(text)
        return value if value < 2**63 else decimal.Decimal(text)
    if re.fullmatch(r"\d*\.\d*", text):
        return decimal.Decimal(text)
    return float(text)


def _typed_literal(value: object, node: exp.Expression, ctx: BindContext) -> Literal:
    try:
        return Literal(value, literal_type(value))
    except (ValueError, TypeError, pa.ArrowException):
        raise ctx.unsupported(f"decimal literal with more than {_MAX_DECIMAL_PRECISION} "
                              "digits", node) from None


def _null(node: exp.Null, ctx: BindContext) -> Expr:
    return Literal(None, pa.null())


def _boolean(node: exp.Boolean, ctx: BindContext) -> Expr:
    return Literal(bool(node.this), pa.bool_())


def _paren(node: exp.Paren, ctx: BindContext) -> Expr:
    return bind(node.this, ctx)


# -- operators ---------------------------------------------------------------------------


def _neg(node: exp.Neg, ctx: BindContext) -> Expr:
    operand = bind(node.this, ctx)
    if (isinstance(operand, Literal) and not isinstance(operand.value, bool)
            and isinstance(operand.value, (int, float, decimal.Decimal))):
        # fold so that "-1" is a literal, as IN lists require
        return Literal(-operand.value, operand.dtype)
    return UnaryOp("neg", operand)


def _not(node: exp.Not, ctx: BindContext) -> Expr:
    operand = bind(node.this, ctx)
    if isinstance(operand, InList):
        return InList(operand.operand, operand.values, not operand.negated)
    if isinstance(operand, Like):
        return Like(operand.operand, operand.pattern, not operand.negated)
    if isinstance(operand, UnaryOp) and operand.op in ("is_null", "is_not_null"):
        flipped = "is_not_null" if operand.op == "is_null" else "is_null"
        return UnaryOp(flipped, operand.operand)
    return UnaryOp("not", operand)


def _is(node: exp.Is, ctx: BindContext) -> Expr:
    if not isinstance(node.expression, exp.Null):
        raise ctx.unsupported(f"IS {_sql(node.expression).upper()}", node, keyword="IS")
    return UnaryOp("is_null", bind(node.this, ctx))


def _between(node: exp.Between, ctx: BindContext) -> Expr:
    if node.args.get("symmetric"):
        raise ctx.unsupported("BETWEEN SYMMETRIC", node)
    operand = bind(node.this, ctx)
    low, high = bind(node.args["low"], ctx), bind(node.args["high"], ctx)
    return BinaryOp("and", BinaryOp(">=", operand, low), BinaryOp("<=", operand, high))


def _in(node: exp.In, ctx: BindContext) -> Expr:
    if node.args.get("query") is not None:
        raise _subquery_error(node, ctx)
    if node.args.get("unnest") is not None or node.args.get("field") is not None:
        raise ctx.unsupported("IN over a non-list", node)
    operand = bind(node.this, ctx)
    values = []
    for value_node in node.expressions:
        value = bind(value_node, ctx)
        if not isinstance(value, Literal):
            raise ctx.unsupported("IN with non-literal values", value_node)
        values.append(value)
    return InList(operand, tuple(values))


def _like(node: exp.Like, ctx: BindContext) -> Expr:
    pattern = bind(node.expression, ctx)
    if not isinstance(pattern, Literal) or not isinstance(pattern.value, str):
        raise ctx.unsupported("LIKE with a non-literal pattern", node.expression)
    return Like(bind(node.this, ctx), pattern.value, bool(node.args.get("negate")))


def _refuse(construct: str, keyword: str | None = None) -> Callable[..., Expr]:
    def handler(node: exp.Expression, ctx: BindContext) -> Expr:
        raise ctx.unsupported(construct, node, keyword)

    return handler


def _case(node: exp.Case, ctx: BindContext) -> Expr:
    subject = node.args.get("this")
    subject_expr = None if subject is None else bind(subject, ctx)
    whens = []
    for branch in node.args.get("ifs") or []:
        cond = bind(branch.this, ctx)
        if subject_expr is not None:  # simple CASE x WHEN v: the searched form x = v
            cond = BinaryOp("=", subject_expr, cond)
        whens.append((cond, bind(branch.args["true"], ctx)))
    default = node.args.get("default")
    return Case(tuple(whens), None if default is None else bind(default, ctx))


def _if(node: exp.If, ctx: BindContext) -> Expr:
    otherwise = node.args.get("false")
    return Case(((bind(node.this, ctx), bind(node.args["true"], ctx)),),
                None if otherwise is None else bind(otherwise, ctx))


# -- casts and functions -----------------------------------------------------------------


def arrow_type(dtype: exp.DataType, ctx: BindContext,
               where: exp.Expression | None = None) -> pa.DataType:
    """The Arrow type of a SQL type name in CAST (``where``: the CAST, for messages)."""
    where = where or dtype
    kind = dtype.this
    if kind in _SIMPLE_TYPES:
        return _SIMPLE_TYPES[kind]
    if kind == _T.DECIMAL:
        params = [p.name for p in dtype.expressions]
        try:
            precision = int(params[0]) if params else 10
            scale = int(params[1]) if len(params) > 1 else 0
        except ValueError:
            raise ctx.unsupported("DECIMAL type with non-integer parameters", where) from None
        if not (1 <= precision <= _MAX_DECIMAL_PRECISION and 0 <= scale <= precision):
            raise ctx.unsupported(f"DECIMAL({precision}, {scale})", where)
        return pa.decimal128(precision, scale)
    raise ctx.unsupported(f"CAST to {_sql(dtype)}", where, keyword="CAST")


def _cast(node: exp.Cast, ctx: BindContext) -> Expr:
    to = arrow_type(node.args["to"], ctx, node)
    operand = bind(node.this, ctx)
    if isinstance(operand, Literal):
        return _fold_cast(operand, to, node, ctx)
    if isinstance(node, exp.TryCast) and node.args.get("safe"):
        return FuncCall("try", (Cast(operand, to),))  # NULL even where ANSI mode raises
    return Cast(operand, to)


_TRY_OPERATORS = {exp.SafeDivide: "/", exp.SafeAdd: "+", exp.SafeSubtract: "-",
                  exp.SafeMultiply: "*"}


def _try_operator(node: exp.Expression, ctx: BindContext) -> Expr:
    """try_divide, try_add, try_subtract, try_multiply: NULL where the operator would
    raise under ANSI mode, whatever the session's mode."""
    op = _TRY_OPERATORS[type(node)]
    return FuncCall("try", (BinaryOp(op, bind(node.this, ctx), bind(node.expression, ctx)),))


def _round(node: exp.Round, ctx: BindContext) -> Expr:
    digits = node.args.get("decimals")
    d = 0 if digits is None else bind(digits, ctx)
    if not isinstance(d, int) and not (isinstance(d, Literal) and isinstance(d.value, int)):
        raise ctx.unsupported("round with a non-constant scale", node)
    scale = d if isinstance(d, int) else d.value
    return FuncCall("round", (bind(node.this, ctx), Literal(scale, pa.int32())))


def _concat(node: exp.Expression, ctx: BindContext) -> Expr:
    """``a || b`` and ``concat(a, b, ...)``: NULL if any argument is NULL (Spark)."""
    args = [node.this, node.expression] if isinstance(node, exp.DPipe) else node.expressions
    return FuncCall("concat", tuple(bind(a, ctx) for a in args))


def _fold_cast(literal: Literal, to: pa.DataType, node: exp.Expression,
               ctx: BindContext) -> Expr:
    """Evaluate a cast of a constant now, so ``DATE '1998-12-01'`` is a date literal."""
    if literal.value is None:
        return Literal(None, to)
    if numeric_casts.handles(literal.dtype, to):  # Spark's rules (Arrow's need more digits)
        values, overflow = numeric_casts.cast_numbers(pa.array([literal.value],
                                                               literal.dtype), to)
        if overflow.any():  # NULL, or under ANSI mode an error: decided when it runs
            return Cast(literal, to)
        return Literal(values[0].as_py(), to)
    try:
        value = pc.cast(pa.scalar(literal.value, literal.dtype), to).as_py()
    except (pa.ArrowException, ValueError, TypeError, OverflowError):
        raise ctx.unsupported(f"invalid {to} literal", node, detail=repr(literal.value)) from None
    return Literal(value, to)


def _date_part(node: exp.Expression, ctx: BindContext) -> Expr:
    return _date_function(_DATE_PARTS[type(node)], node.this, ctx)


def _extract(node: exp.Extract, ctx: BindContext) -> Expr:
    unit = node.this.name.upper()
    if unit not in _EXTRACT_UNITS:
        raise ctx.unsupported(f"EXTRACT({unit})", node, keyword="EXTRACT")
    return _date_function(_EXTRACT_UNITS[unit], node.expression, ctx)


def _date_function(name: str, arg: exp.Expression, ctx: BindContext) -> Expr:
    # sqlglot wraps the argument of year()/month()/day() in a string-or-date conversion
    if isinstance(arg, exp.TsOrDsToDate) and arg.args.get("format") is None:
        arg = arg.this
    operand = bind(arg, ctx)
    if isinstance(operand, Literal) and isinstance(operand.value, str):
        operand = _fold_cast(operand, pa.date32(), arg, ctx)
    return FuncCall(name, (operand,))


def _unary_function(node: exp.Expression, ctx: BindContext) -> Expr:
    return FuncCall(_UNARY_FUNCTIONS[type(node)], (bind(node.this, ctx),))


def _integral_divide(node: exp.IntDiv, ctx: BindContext) -> Expr:
    """``a DIV b``: Spark's integral division (``imp_core.plan.division``)."""
    return FuncCall("div", (bind(node.this, ctx), bind(node.expression, ctx)))


def _coalesce(node: exp.Coalesce, ctx: BindContext) -> Expr:
    args = [node.this, *node.expressions]
    return FuncCall("coalesce", tuple(bind(a, ctx) for a in args))


def _substring(node: exp.Substring, ctx: BindContext) -> Expr:
    args: list[Expr] = [bind(node.this, ctx)]
    for key in ("start", "length"):
        bound_node = node.args.get(key)
        if bound_node is None:
            continue
        bound = bind(bound_node, ctx)
        # the evaluator slices with constant bounds
        if not isinstance(bound, Literal) or not isinstance(bound.value, int):
            raise ctx.unsupported("substring with non-constant bounds", bound_node)
        args.append(bound)
    return FuncCall("substring", tuple(args))


# -- aggregates --------------------------------------------------------------------------


def aggregate_call(node: exp.Expression, ctx: BindContext) -> tuple[str, Expr | None]:
    """``(function, argument)`` of an aggregate call; ``ctx`` binds the argument.

    ``f(DISTINCT x)`` is ``(distinct_call(f), x)`` (``imp_core.plan.aggregates.distinct``:
    the planner aggregates a DISTINCT of the group keys and ``x``).

    ``count(*)`` and ``count(<non-NULL constant>)`` are both ``count_star``.
    """
    fn = registry.from_sql_key(node.key)
    if fn is None:
        raise ctx.unsupported(f"aggregate function {node.sql_name().lower()}", node)
    func = fn.name
    arg = node.this
    if isinstance(arg, exp.Distinct):
        if len(arg.expressions) != 1:
            raise ctx.unsupported(f"{func.upper()}(DISTINCT ...) over several columns", node)
        bound = bind(arg.expressions[0], ctx)
        # MIN and MAX ignore duplicates anyway; the others aggregate distinct values
        return distinct_call(fn), bound
    if node.expressions:
        raise ctx.unsupported(f"{func.upper()} with several arguments", node)
    star = fn.for_star()  # count(*) for COUNT, None for the others
    if arg is None or isinstance(arg, exp.Star):
        if star is None:
            raise ctx.unsupported(f"{func.upper()}(*)", node)
        return star.name, None
    bound = bind(arg, ctx)
    if star is not None and isinstance(bound, Literal) and bound.value is not None:
        return star.name, None  # a non-NULL constant counts every row
    return func, bound


# -- generic rewriting -------------------------------------------------------------------


def map_children(expr: Expr, fn: Callable[[Expr], Expr]) -> Expr:
    """``expr`` with ``fn`` applied to each direct child (literals of IN lists excepted)."""
    if isinstance(expr, BinaryOp):
        return BinaryOp(expr.op, fn(expr.left), fn(expr.right))
    if isinstance(expr, UnaryOp):
        return UnaryOp(expr.op, fn(expr.operand))
    if isinstance(expr, Case):
        whens = tuple((fn(c), fn(v)) for c, v in expr.whens)
        return Case(whens, None if expr.default is None else fn(expr.default))
    if isinstance(expr, InList):
        return InList(fn(expr.operand), expr.values, expr.negated)
    if isinstance(expr, Like):
        return Like(fn(expr.operand), expr.pattern, expr.negated)
    if isinstance(expr, FuncCall):
        return FuncCall(expr.name, tuple(fn(a) for a in expr.args))
    if isinstance(expr, Cast):
        return Cast(fn(expr.operand), expr.to)
    return expr


_HANDLERS: dict[type, Callable[..., Expr]] = {
    exp.Column: _column, exp.Literal: _literal, exp.Null: _null, exp.Boolean: _boolean,
    exp.Paren: _paren, exp.Neg: _neg, exp.Not: _not, exp.Is: _is, exp.Between: _between,
    exp.In: _in, exp.Like: _like, exp.Case: _case, exp.If: _if,
    exp.Cast: _cast, exp.TryCast: _cast, exp.Extract: _extract, exp.Coalesce: _coalesce,
    exp.Substring: _substring, exp.IntDiv: _integral_divide, exp.Round: _round,
    exp.DPipe: _concat, exp.Concat: _concat,
    **{cls: _try_operator for cls in _TRY_OPERATORS},
    exp.Escape: _refuse("LIKE ... ESCAPE", "ESCAPE"), exp.ILike: _refuse("ILIKE", "ILIKE"),
    exp.RegexpLike: _refuse("RLIKE / REGEXP"), exp.Filter: _refuse("aggregate FILTER clause"),
    **{cls: _date_part for cls in _DATE_PARTS},
    **{cls: _unary_function for cls in _UNARY_FUNCTIONS},
}
