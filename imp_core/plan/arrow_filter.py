"""The part of a predicate that a Parquet scan can apply itself (``pyarrow.dataset``).

A first capture reads whole tables; filtering while the files are decoded spares a copy
of every column that reading everything and filtering after would make.

Invariant: ``scan_filter(e, schema)`` is either None or an Arrow expression that is TRUE
on every row where ``e`` is TRUE (it may keep more rows: callers still apply ``e``).
Only conjuncts whose meaning is the same in Arrow and in ``evaluate`` are translated:
comparisons and IN lists between a column and literals of exactly the column's type
(or integers with integers), NULL tests, and AND / OR / NOT over such parts. Anything
else (casts, arithmetic, mixed types whose coercion ``evaluate`` decides) is left out.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from imp_core.plan.expr import BinaryOp, ColumnRef, Expr, InList, Literal, UnaryOp, conjuncts

_CMP = {"=": "__eq__", "<>": "__ne__", "<": "__lt__", "<=": "__le__", ">": "__gt__",
        ">=": "__ge__"}
_FLIP = {"=": "=", "<>": "<>", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


def scan_filter(expr: Expr | None, schema: pa.Schema) -> pc.Expression | None:
    """The translatable conjuncts of ``expr`` over rows of ``schema``, ANDed; None if
    there are none."""
    parts = [p for p in (_safely(c, schema) for c in conjuncts(expr)) if p is not None]
    if not parts:
        return None
    out = parts[0]
    for p in parts[1:]:
        out = out & p
    return out


def _safely(e: Expr, schema: pa.Schema) -> pc.Expression | None:
    try:
        return _translate(e, schema)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        return None  # a literal Arrow will not take as the column's type: not pushed


def _is_string(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)


def _same_type(column: pa.DataType, literal: pa.DataType) -> bool:
    if column == literal or (_is_string(column) and _is_string(literal)):
        return True
    return pa.types.is_integer(column) and pa.types.is_integer(literal)


def _column(e: Expr, schema: pa.Schema) -> pa.DataType | None:
    if isinstance(e, ColumnRef) and schema.get_field_index(e.name) >= 0:
        t = schema.field(e.name).type
        return pa.string() if _is_string(t) else t
    return None


def _field(name: str, t: pa.DataType) -> pc.Expression:
    # a file may hold strings in another encoding than the schema says (string_view):
    # compare on one
    return pc.field(name).cast(pa.string()) if _is_string(t) else pc.field(name)


def _translate(e: Expr, schema: pa.Schema) -> pc.Expression | None:
    if isinstance(e, BinaryOp) and e.op in ("and", "or"):
        a, b = _translate(e.left, schema), _translate(e.right, schema)
        if a is None or b is None:
            # a part of an AND may be dropped (the rest still holds wherever the whole
            # does); a part of an OR may not
            return (a or b) if e.op == "and" else None
        return (a & b) if e.op == "and" else (a | b)
    if isinstance(e, BinaryOp) and e.op in _CMP:
        op, left, right = e.op, e.left, e.right
        if isinstance(left, Literal):
            op, left, right = _FLIP[op], right, left
        t = _column(left, schema)
        if t is None or not isinstance(right, Literal) or right.value is None \
                or not _same_type(t, right.dtype):
            return None
        return getattr(_field(left.name, t), _CMP[op])(pa.scalar(right.value, t))
    if isinstance(e, UnaryOp) and e.op in ("is_null", "is_not_null"):
        if _column(e.operand, schema) is None:
            return None
        test = pc.field(e.operand.name).is_null()
        return test if e.op == "is_null" else ~test
    if isinstance(e, UnaryOp) and e.op == "not":
        inner = _translate(e.operand, schema)
        # NOT over a part that kept extra rows would drop rows it must keep: only a part
        # translated whole (no dropped conjunct) may be negated
        return None if inner is None or not _whole(e.operand, schema) else ~inner
    if isinstance(e, InList) and not e.negated:
        t = _column(e.operand, schema)
        if t is None or not e.values or any(
                v.value is None or not _same_type(t, v.dtype) for v in e.values):
            return None
        # ORed equalities rather than isin(): isin() is FALSE on NULL where SQL's IN is
        # NULL, which a NOT above would turn into TRUE
        out = None
        for v in e.values:
            eq = _field(e.operand.name, t) == pa.scalar(v.value, t)
            out = eq if out is None else out | eq
        return out
    return None


def _whole(e: Expr, schema: pa.Schema) -> bool:
    """Whether ``_translate`` renders ``e`` exactly (no conjunct dropped anywhere)."""
    if isinstance(e, BinaryOp) and e.op in ("and", "or"):
        return _whole(e.left, schema) and _whole(e.right, schema)
    if isinstance(e, UnaryOp) and e.op == "not":
        return _whole(e.operand, schema)
    return _translate(e, schema) is not None
