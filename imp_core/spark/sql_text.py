"""Spark SQL text shared by the plan compilers (``compile``, ``compile_joins``).

- names and literals: ``quote`` (back-quoted identifiers, dots stay part of the name),
  ``spark_type``, ``sql_literal`` (a literal of exactly the given Arrow type);
- scalar expressions: ``write_expr`` keeps the semantics of ``imp_core.plan.evaluate``,
  which are Spark's with ANSI off (``imp_core.plan.division``): ``/``, ``%``, ``pmod`` and
  ``div`` keep Spark's result types and give NULL for a zero divisor (and ``/`` for a
  decimal quotient beyond its type) in a session with ANSI on as well; literals keep
  their exact types;
- annotation columns of a compiled relation (``AnnColumn``, ``Relation``): a row's
  fragments are the union of its annotation columns, each an ``INT`` (one base row's
  fragment id, never NULL on a real row) or an ``ARRAY<INT>`` (sorted, duplicate-free);
  ``ann_union`` (per row), ``ann_aggregate`` (per group) and ``ann_union_padded`` (per
  row, an absent side of an outer join's NULL-padded row counting as no fragments).
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
import os
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from imp_core.errors import RequestLimitError, SparkCompileError
from imp_core.plan.ansi import can_raise
from imp_core.plan.evaluate import infer_type, literal_type
from imp_core.plan.expr import (
    BinaryOp,
    Case,
    Cast,
    ColumnRef,
    Expr,
    FuncCall,
    InList,
    Like,
    Literal,
    Strict,
    UnaryOp,
    balance,
    conjuncts,
    disjuncts,
)

EMPTY_ANNOTATION = "CAST(array() AS ARRAY<INT>)"


# -- names and literals ---------------------------------------------------------------------
def quote(name: str) -> str:
    """A back-quoted Spark identifier (dots stay part of the name)."""
    return "`" + name.replace("`", "``") + "`"


def spark_type(t: pa.DataType) -> str:
    """The Spark SQL type name of an Arrow type."""
    if pa.types.is_boolean(t):
        return "BOOLEAN"
    if pa.types.is_int8(t) or pa.types.is_uint8(t):
        return "TINYINT" if pa.types.is_int8(t) else "SMALLINT"
    if pa.types.is_int16(t) or pa.types.is_uint16(t):
        return "SMALLINT" if pa.types.is_int16(t) else "INT"
    if pa.types.is_int32(t) or pa.types.is_uint32(t):
        return "INT" if pa.types.is_int32(t) else "BIGINT"
    if pa.types.is_int64(t):
        return "BIGINT"
    if pa.types.is_float32(t):
        return "FLOAT"
    if pa.types.is_float64(t):
        return "DOUBLE"
    if pa.types.is_decimal(t):
        return f"DECIMAL({t.precision},{t.scale})"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return "STRING"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return "BINARY"
    if pa.types.is_date(t):
        return "DATE"
    if pa.types.is_timestamp(t):
        return "TIMESTAMP" if t.tz else "TIMESTAMP_NTZ"
    raise SparkCompileError(f"no Spark SQL type for Arrow type {t}")


def string_literal(s: str) -> str:
    """A Spark string literal (Spark unescapes backslashes inside literals)."""
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"


def sql_literal(value: Any, dtype: pa.DataType) -> str:
    """``value`` as a Spark SQL literal of exactly type ``dtype``."""
    if value is None:
        return "NULL" if pa.types.is_null(dtype) else f"CAST(NULL AS {spark_type(dtype)})"
    if pa.types.is_boolean(dtype):
        return "TRUE" if value else "FALSE"
    if pa.types.is_integer(dtype):
        v = int(value)
        suffix = {"TINYINT": "Y", "SMALLINT": "S", "INT": "", "BIGINT": "L"}[spark_type(dtype)]
        if v == -(2**63):
            return "CAST('-9223372036854775808' AS BIGINT)"
        text = f"{v}{suffix}"
        return f"({text})" if v < 0 else text
    if pa.types.is_floating(dtype):
        v = float(value)
        text = "NaN" if math.isnan(v) else repr(v).replace("inf", "Infinity")
        return f"CAST('{text}' AS {spark_type(dtype)})"
    if pa.types.is_decimal(dtype):
        d = decimal.Decimal(value)
        text = format(d, "f")
        if literal_type(d) == dtype:  # Spark types 12.50BD as decimal(4, 2), like we do
            return f"({text}BD)" if d < 0 else f"{text}BD"
        return f"CAST('{text}' AS {spark_type(dtype)})"
    if pa.types.is_string(dtype) or pa.types.is_large_string(dtype) \
            or pa.types.is_string_view(dtype):
        return string_literal(str(value))
    if pa.types.is_date(dtype):
        if isinstance(value, dt.datetime):
            value = value.date()
        return f"DATE '{value.isoformat()}'"
    if pa.types.is_timestamp(dtype):
        kind = "TIMESTAMP" if dtype.tz else "TIMESTAMP_NTZ"
        return f"{kind} '{value.isoformat(sep=' ')}'"
    raise SparkCompileError(f"cannot write a literal of type {dtype}")


# -- expressions ----------------------------------------------------------------------------
_FUNCS = {"year": "year", "month": "month", "day": "dayofmonth", "abs": "abs",
          "upper": "upper", "lower": "lower", "coalesce": "coalesce", "substring": "substring",
          "round": "round", "concat": "concat"}
_TRY_FUNCS = {"/": "try_divide", "+": "try_add", "-": "try_subtract", "*": "try_multiply",
              "%": "try_mod"}


class _ExprWriter:
    """Scalar expressions over one input schema, in Spark SQL with our semantics."""

    def __init__(self, schema: pa.Schema):
        self.schema = schema

    def type_of(self, e: Expr) -> pa.DataType:
        return infer_type(e, self.schema)

    def write(self, e: Expr) -> str:
        if isinstance(e, ColumnRef):
            return quote(e.name)
        if isinstance(e, Literal):
            return sql_literal(e.value, e.dtype)
        if isinstance(e, BinaryOp):
            return self._binary(e)
        if isinstance(e, UnaryOp):
            x = self.write(e.operand)
            return {"not": f"(NOT {x})", "neg": f"(- {x})", "is_null": f"({x} IS NULL)",
                    "is_not_null": f"({x} IS NOT NULL)"}[e.op]
        if isinstance(e, Case):
            whens = " ".join(f"WHEN {self.write(c)} THEN {self.write(v)}" for c, v in e.whens)
            default = "NULL" if e.default is None else self.write(e.default)
            return f"(CASE {whens} ELSE {default} END)"
        if isinstance(e, InList):
            values = ", ".join(self.write(v) for v in e.values)
            neg = "NOT " if e.negated else ""
            return f"({self.write(e.operand)} {neg}IN ({values}))"
        if isinstance(e, Like):
            neg = "NOT " if e.negated else ""
            return f"({self.write(e.operand)} {neg}LIKE {string_literal(e.pattern)})"
        if isinstance(e, FuncCall) and e.name in ("pmod", "div"):
            left, right = (self.write(a) for a in e.args)
            if e.name == "pmod":
                return f"pmod({left}, NULLIF({right}, 0))"
            return f"({left} DIV NULLIF({right}, 0))"
        if isinstance(e, FuncCall) and e.name == "try":
            return self._try(e.args[0])
        if isinstance(e, FuncCall) and e.name == "one_row":  # Spark raises as for the text
            value, rows = (self.write(a) for a in e.args)
            return (f"(CASE WHEN {rows} > 1 THEN raise_error('[SCALAR_SUBQUERY_TOO_MANY_ROWS]"
                    f" More than one row returned by a subquery used as an expression.') "
                    f"ELSE {value} END)")
        if isinstance(e, FuncCall):
            return f"{_FUNCS[e.name]}({', '.join(self.write(a) for a in e.args)})"
        if isinstance(e, Cast):
            return f"CAST({self.write(e.operand)} AS {spark_type(e.to)})"
        if isinstance(e, Strict):  # ANSI mode: Spark's own operator, raising in its session
            return self._strict(e.inner)
        raise SparkCompileError(f"no Spark SQL translation for {type(e).__name__}")

    def _try(self, e: Expr) -> str:
        """Spark's try_ form of ``e`` (NULL where it would raise)."""
        if isinstance(e, Cast):
            return f"TRY_CAST({self.write(e.operand)} AS {spark_type(e.to)})"
        if isinstance(e, BinaryOp) and e.op in _TRY_FUNCS:
            return f"{_TRY_FUNCS[e.op]}({self.write(e.left)}, {self.write(e.right)})"
        raise SparkCompileError(f"no Spark SQL translation for try({e})")

    def _strict(self, e: Expr) -> str:
        if isinstance(e, BinaryOp):
            return f"({self.write(e.left)} {e.op} {self.write(e.right)})"
        if isinstance(e, FuncCall) and e.name == "div":
            left, right = (self.write(a) for a in e.args)
            return f"({left} DIV {right})"
        if isinstance(e, FuncCall) and e.name == "pmod":
            return f"pmod({', '.join(self.write(a) for a in e.args)})"
        return self.write(e)

    def _binary(self, e: BinaryOp) -> str:
        if e.op in ("and", "or"):
            return self._chain(e.op, conjuncts(e) if e.op == "and" else disjuncts(e))
        left, right = self.write(e.left), self.write(e.right)
        if e.op == "/":  # NULL for a zero divisor or a decimal overflow, ANSI or not
            return f"try_divide({left}, {right})"
        if e.op == "%":
            return f"({left} % NULLIF({right}, 0))"
        return f"({left} {e.op} {right})"


    def _chain(self, op: str, parts: list[Expr]) -> str:
        """An AND / OR of ``parts`` (in order) in a form Spark's optimizer survives.

        Spark re-associates every AND / OR it plans into a left-deep chain and recurses
        down it (ConstantPropagation, predicate push-down): 1,000 terms overflowed a
        driver thread's stack, 3,000 left a collect waiting forever on a thread that
        had died, and copies of such plans ran a 4 GiB driver out of memory. So an OR
        of equalities (an AND of inequalities) between a column and literals of its
        type is one ``IN`` (``NOT IN``) per column: the same in three-valued logic
        (merged only when no part may raise under ANSI mode: moving a comparison ahead
        of one would spare it on some rows). A chain still
        longer than ``_INLINE_TERMS`` is ``forall`` / ``exists`` over an array of its
        terms, which are three-valued AND / OR without a chain, when no term can raise
        under ANSI mode (every term is evaluated); beyond ``spark_max_terms()`` terms,
        or ``_INLINE_TERMS`` raising ones, it is refused (``RequestLimitError``)."""
        raising = any(can_raise(x) for p in parts for x in p.walk())
        # merging moves a comparison ahead of the parts between: not ahead of one that
        # may raise, which it would then spare on some rows
        terms = [self.write(p) for p in parts] if raising else self._merged(op, parts)
        if len(terms) <= _INLINE_TERMS:
            return balance(terms, lambda a, b: f"({a} {op.upper()} {b})")
        limit = spark_max_terms()
        if len(terms) > limit or raising:
            raise RequestLimitError(
                f"an {op.upper()} of {len(terms):,} different conditions is more than Spark "
                f"is given ({_INLINE_TERMS} that may raise under ANSI mode, else "
                f"{limit:,}: {SPARK_MAX_TERMS_ENV}); equalities of one column and "
                "literals count as one IN list, of any length")
        quantifier = "forall" if op == "and" else "exists"
        return f"{quantifier}(array({', '.join(terms)}), x -> x)"

    def _merged(self, op: str, parts: list[Expr]) -> list[str]:
        """The text of each part, with the comparisons ``_chain`` merges merged into one
        IN / NOT IN per column (where its first one was)."""
        out: list[str | list] = []
        lists: dict[str, list] = {}  # column -> the values of its IN list, in ``out``
        for part in parts:
            found = self._merge_key(op, part)
            if found is None:
                out.append(self.write(part))
                continue
            column, values = found
            if column not in lists:
                lists[column] = [column]
                out.append(lists[column])
            lists[column].extend(values)
        neg = "NOT " if op == "and" else ""
        return [t if isinstance(t, str) else
                (f"({quote(t[0])} {'<>' if neg else '='} {t[1]})" if len(t) == 2 else
                 f"({quote(t[0])} {neg}IN ({', '.join(t[1:])}))") for t in out]

    def _merge_key(self, op: str, part: Expr) -> tuple[str, list[str]] | None:
        """(column, literal texts) of ``column = literal`` or ``column IN (...)`` (for an
        OR; ``<>`` and NOT IN for an AND) where every literal has the column's type, is
        not NULL and the column is not floating point (``=`` and IN disagree on NaN)."""
        if isinstance(part, InList) and part.negated == (op == "and"):
            column, literals = part.operand, list(part.values)
        elif isinstance(part, BinaryOp) and part.op == ("<>" if op == "and" else "="):
            column, other = (part.left, part.right) if isinstance(part.left, ColumnRef) \
                else (part.right, part.left)
            if not isinstance(other, Literal):
                return None
            literals = [other]
        else:
            return None
        if not isinstance(column, ColumnRef) or not literals:
            return None
        t = self.type_of(column)
        if pa.types.is_floating(t) or any(
                v.value is None or not (v.dtype == t or (pa.types.is_integer(v.dtype)
                                                         and pa.types.is_integer(t)))
                for v in literals):
            return None
        return column.name, [self.write(v) for v in literals]


# AND / OR chains up to this many terms are written as (balanced) text
_INLINE_TERMS = 64
SPARK_MAX_TERMS_ENV = "IMP_SPARK_MAX_TERMS"
DEFAULT_SPARK_MAX_TERMS = 2048  # forall over 3,000 terms took 6 s; 15,000 ran out of memory


def spark_max_terms() -> int:
    """``IMP_SPARK_MAX_TERMS`` (an integer > ``_INLINE_TERMS``), else 2,048: the most
    terms of one AND / OR that Spark is given (after equalities become IN lists)."""
    raw = os.environ.get(SPARK_MAX_TERMS_ENV, "").strip()
    if not raw:
        return DEFAULT_SPARK_MAX_TERMS
    if not raw.isdigit() or int(raw) <= _INLINE_TERMS:
        raise ValueError(f"{SPARK_MAX_TERMS_ENV} must be an integer above {_INLINE_TERMS}, "
                         f"not {raw!r}")
    return int(raw)


def write_expr(expr: Expr, schema: pa.Schema) -> str:
    """Spark SQL text of ``expr`` over rows of ``schema`` (column names back-quoted)."""
    return _ExprWriter(schema).write(expr)


# -- annotation columns ---------------------------------------------------------------------
@dataclass(frozen=True)
class AnnColumn:
    """One annotation column of a compiled relation."""

    name: str
    is_set: bool  # ARRAY<INT> (after aggregation) or INT (one base row's fragment)


@dataclass(frozen=True)
class Relation:
    """A compiled plan node: the CTE ``name`` with the node's columns plus ``ann``."""

    name: str  # CTE name
    ann: tuple[AnnColumn, ...]


def ann_union(anns: tuple[AnnColumn, ...]) -> str:
    """Per-row annotation as a sorted, duplicate-free ARRAY<INT>."""
    if len(anns) == 1:
        a = anns[0]
        return quote(a.name) if a.is_set else f"array({quote(a.name)})"
    parts = [quote(a.name) if a.is_set else f"array({quote(a.name)})" for a in anns]
    return f"array_sort(array_distinct(concat({', '.join(parts)})))"


def ann_aggregate(anns: tuple[AnnColumn, ...]) -> str:
    """Union of the annotations of a group's rows, sorted: an aggregate expression."""
    parts = [f"flatten(collect_set({quote(a.name)}))" if a.is_set
             else f"collect_set({quote(a.name)})" for a in anns]
    inner = parts[0] if len(parts) == 1 else f"concat({', '.join(parts)})"
    return f"array_sort(array_distinct({inner}))"


def ann_union_padded(anns: tuple[AnnColumn, ...]) -> str:
    """Per-row annotation like ``ann_union``, where a NULL annotation column (the absent
    side of an outer join's NULL-padded row) contributes no fragments: never NULL and
    never holding a NULL id."""
    parts = [f"coalesce({quote(a.name)}, {EMPTY_ANNOTATION})" if a.is_set
             else f"IF({quote(a.name)} IS NULL, {EMPTY_ANNOTATION}, array({quote(a.name)}))"
             for a in anns]
    inner = parts[0] if len(parts) == 1 else f"concat({', '.join(parts)})"
    return f"array_sort(array_distinct({inner}))"


class CompilerHost:
    """What the compiler mixins (joins, set operations, grouping sets, windows) call on
    the compiler they are mixed into (``imp_core.spark.compile``)."""

    def compile(self, node: Any) -> Relation:  # pragma: no cover - the host's
        raise NotImplementedError

    def _cte(self, body: str, ann: tuple[AnnColumn, ...]) -> Relation:  # pragma: no cover
        raise NotImplementedError

    def _new_ann(self, is_set: bool) -> AnnColumn:  # pragma: no cover - the host's
        raise NotImplementedError
