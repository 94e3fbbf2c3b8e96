"""The part of a predicate that a Parquet scan can apply itself (``pyarrow.dataset``).

A first capture reads whole tables; filtering while the files are decoded spares a copy
of every column that reading everything and filtering after would make.

Invariant: ``scan_filter(e, schema)`` is either None or an Arrow expression that is TRUE
on every row where ``e`` is TRUE (it may keep more rows: callers still apply ``e``).
Only conjuncts whose meaning is the same in Arrow and in ``evaluate`` are translated:
comparisons and IN / NOT IN lists between a column and literals of exactly the column's
type (or integers with integers), NULL tests, and AND / OR / NOT over such parts. Anything
else (casts, arithmetic, mixed types whose coercion ``evaluate`` decides) is left out.

No filter holds more than ``MAX_FILTER_TERMS`` tests (comparisons, set lookups, NULL
tests), however wide the predicate: Arrow canonicalizes every AND / OR chain of an
expression into a left-deep one and recurses down it in C++, about 500 bytes of stack a
term, so a wide filter crashes the process (signal 11: 15,000 ORed equalities on the
main thread's 8 MiB, 2,000 terms on a 1 MiB thread), balanced or not. So an IN list,
and an OR of equalities on one column, is one set lookup (two terms, whatever its
length); a conjunct wider than the budget is left out (the caller still applies it),
as are the conjuncts beyond the budget.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from imp_core.plan.expr import (
    BinaryOp,
    ColumnRef,
    Expr,
    InList,
    Literal,
    UnaryOp,
    balance,
    conjuncts,
    disjuncts,
)

_CMP = {"=": "__eq__", "<>": "__ne__", "<": "__lt__", "<=": "__le__", ">": "__gt__",
        ">=": "__ge__"}
_FLIP = {"=": "=", "<>": "<>", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


# The most tests one filter holds: 256 terms take ~128 KiB of Arrow's stack, and a
# Parquet scan prunes row groups on the first few conjuncts anyway.
MAX_FILTER_TERMS = 256

# a translated part: the Arrow expression, how many tests it holds, and whether it is
# exact (TRUE, FALSE and NULL where the plan expression is) rather than a superset
_Part = tuple[pc.Expression, int, bool]


def scan_filter(expr: Expr | None, schema: pa.Schema) -> pc.Expression | None:
    """The translatable conjuncts of ``expr`` over rows of ``schema``, ANDed (balanced),
    in order while they fit ``MAX_FILTER_TERMS``; None if there are none."""
    parts: list[pc.Expression] = []
    budget = MAX_FILTER_TERMS
    for conjunct in conjuncts(expr):
        part = _safely(conjunct, schema)
        if part is not None and part[1] <= budget:  # leaving a conjunct out is allowed
            parts.append(part[0])
            budget -= part[1]
    return balance(parts, lambda a, b: a & b) if parts else None


def _safely(e: Expr, schema: pa.Schema) -> _Part | None:
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


def _translate(e: Expr, schema: pa.Schema) -> _Part | None:
    """``e`` in Arrow with its number of tests; None if it cannot be translated or holds
    more than ``MAX_FILTER_TERMS`` tests."""
    out = _translate_any(e, schema)
    return None if out is None or out[1] > MAX_FILTER_TERMS else out


def _translate_any(e: Expr, schema: pa.Schema) -> _Part | None:
    if isinstance(e, BinaryOp) and e.op == "or":
        lookup = _or_lookup(e, schema)
        if lookup is not None:
            return lookup
    if isinstance(e, BinaryOp) and e.op in ("and", "or"):
        a, b = _translate(e.left, schema), _translate(e.right, schema)
        if a is None or b is None:
            # a part of an AND may be dropped (the rest still holds wherever the whole
            # does); a part of an OR may not
            kept = (a or b) if e.op == "and" else None
            return None if kept is None else (kept[0], kept[1], False)
        both = (a[0] & b[0]) if e.op == "and" else (a[0] | b[0])
        return both, a[1] + b[1], a[2] and b[2]
    if isinstance(e, BinaryOp) and e.op in _CMP:
        found = _comparison(e, schema)
        if found is None:
            return None
        op, name, t, value = found
        return getattr(_field(name, t), _CMP[op])(pa.scalar(value, t)), 1, True
    if isinstance(e, UnaryOp) and e.op in ("is_null", "is_not_null"):
        if _column(e.operand, schema) is None:
            return None
        test = pc.field(e.operand.name).is_null()
        return (test if e.op == "is_null" else ~test), 1, True
    if isinstance(e, UnaryOp) and e.op == "not":
        inner = _translate(e.operand, schema)
        # NOT over a part that kept extra rows would drop rows it must keep: only a part
        # translated exactly (no conjunct dropped) may be negated
        return None if inner is None or not inner[2] else (~inner[0], inner[1], True)
    if isinstance(e, InList):
        t = _column(e.operand, schema)
        if t is None or not e.values or any(
                v.value is None or not _same_type(t, v.dtype) for v in e.values):
            return None
        found = _is_in(_field(e.operand.name, t), [v.value for v in e.values], t)
        return (~found if e.negated else found), 2, True
    return None


def _comparison(e: BinaryOp, schema: pa.Schema) -> tuple[str, str, pa.DataType, object] | None:
    """``(op, column, column type, value)`` of ``column op literal`` (either way round)."""
    op, left, right = e.op, e.left, e.right
    if isinstance(left, Literal):
        op, left, right = _FLIP[op], right, left
    t = _column(left, schema)
    if t is None or not isinstance(right, Literal) or right.value is None \
            or not _same_type(t, right.dtype):
        return None
    assert isinstance(left, ColumnRef)
    return op, left.name, t, right.value


def _or_lookup(e: BinaryOp, schema: pa.Schema) -> _Part | None:
    """An OR of equalities and IN lists on one column as one set lookup (None if ``e``
    is not one): ``x = 1 OR x = 2 OR x IN (3, 4)`` is ``x IN (1, 2, 3, 4)`` in SQL too,
    NULL on a NULL ``x``. Not on floating point, where ``=`` and a set lookup disagree
    on NaN."""
    name, t, values = None, None, []
    for part in disjuncts(e):
        if isinstance(part, InList) and not part.negated:
            column = _column(part.operand, schema)
            if column is None or any(v.value is None or not _same_type(column, v.dtype)
                                     for v in part.values):
                return None
            here, more = part.operand.name, [v.value for v in part.values]
        elif isinstance(part, BinaryOp) and part.op == "=":
            found = _comparison(part, schema)
            if found is None:
                return None
            _, here, column, value = found
            more = [value]
        else:
            return None
        if name is not None and here != name:
            return None
        name, t = here, column
        values += more
    if name is None or t is None or not values or pa.types.is_floating(t):
        return None
    return _is_in(_field(name, t), values, t), 2, True


def _is_in(field: pc.Expression, values: list, t: pa.DataType) -> pc.Expression:
    """SQL's ``field IN (values)`` for non-NULL ``values``: TRUE where the field holds
    one of them, FALSE where it holds another value, NULL where it is NULL.

    Arrow's ``isin`` is FALSE on a NULL field (``SetLookupOptions`` has no SQL mode), and
    a NOT above would make that TRUE. ORing one equality restores the NULL under Kleene
    logic: ``FALSE OR (NULL = v)`` is NULL, and on a non-NULL field the equality adds
    nothing the lookup does not already say. Depth 2 for any number of values."""
    value_set = pa.array(values, t)  # a value the column's type cannot hold: not pushed
    return field.isin(value_set) | (field == pa.scalar(values[0], t))


def _whole(e: Expr, schema: pa.Schema) -> bool:
    """Whether ``_translate`` renders ``e`` exactly (no conjunct dropped anywhere)."""
    part = _translate(e, schema)
    return part is not None and part[2]
