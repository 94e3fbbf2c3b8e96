"""Safety of a sketch attribute for a query (IMP paper, sections 4.1 and 4.4).

A provenance sketch of query Q on a range partition of table R on attribute a holds the
fragments that contain provenance of Q. It is *safe* if Q over the sketch instance D_P
(R cut down to those fragments, every other table whole) returns Q(D). Attribute a is
*safe* for Q if every range partition on it gives a safe sketch. ``check_attribute``
decides this conservatively: "safe" is always really safe, "unsafe" may be a false alarm.

How it is argued. Annotate every row of every operator's result over D with its
fragment set A(r) (the engine's semantics: selection and projection keep it, a join
unions both sides, a group or a DISTINCT row unions all its input rows, top-k keeps its
k rows; the sketch S is the union over the result). The analysis proves, bottom-up, that
each operator's result over D_P is, as a bag of values,

    the rows r of its result over D with A(r) ⊆ S      ("exact" rows)
  + phantoms: each agrees with a *shadow* row g of the result over D with A(g) ⊄ S on
    every column except the *tainted* ones (aggregates of partial groups).

At the root every row has A ⊆ S (that is how S is defined), so no shadow and hence no
phantom can exist there, and Q(D_P) = Q(D). A phantom is a group of which D_P holds only
some tuples: a *partial group*. The rules that keep the invariant, each with why:

1. Scan, selection, projection, join and DISTINCT on untainted columns keep it (a
   phantom passes a test on untainted columns exactly when its shadow does). So a query
   built only of these (a monotone query) is safe for any attribute.
2. Top-k is safe when its input has no tainted column and every operator above it is a
   projection, DISTINCT or aggregation: then all k top tuples reach the result, so they
   are in D_P, and every other tuple of D_P ranks after them as it does in D. A selection,
   join or top-k above it may drop some of the k, letting other tuples of D_P move up.
3. An aggregation whose aggregate columns never decide whether a row reaches the result
   (no HAVING, join condition, grouping or top-k order on them) is safe: a partial group
   can only come from a group that does not reach the result, and it is dropped the
   same way, by tests on its (correct) group key.
4. An aggregation is exact (no partial groups) if, for every scan of R below it, the
   sketch attribute flows into one of its group-by columns, through plain column
   references of projections, group-by columns of aggregations below, and ``x = y``
   equalities of joins and selections: all R tuples of a group then share the attribute
   value, hence one fragment, so D_P holds a group entirely or not at all.
5. Otherwise a HAVING (a selection on aggregate columns) is safe only if a partial group
   passing it implies the complete group passes: ``agg > c`` / ``agg >= c`` with agg
   count, count(*), max or sum of an argument provably >= 0 (a partial group's value is
   smaller or equal), ``agg < c`` / ``agg <= c`` with min (a partial group's is larger or
   equal), c free of tainted columns; AND and OR of such tests (and of untainted ones) keep
   this; anything else (avg, =, NOT, sum of a possibly negative argument) is unsafe. A
   top-k over a partial aggregation is safe only if, in its total order (order keys, then
   the other columns ascending with NULLs first, until a unique key of its input is
   covered), each tainted column only ranks a partial group at or after its complete
   group: DESC on count / sum of non-negative / max (NULLs last), ASC on min (NULLs last).
   Non-negativity is interval analysis of the summed expression from the declared column
   domains, literals, + - * /, CASE, COALESCE and ABS; a column without a domain is
   unbounded, so its sign cannot be proved.
6. These monotonicity facts hold only when the partial group's input is itself exact
   (no tainted input), so an aggregate over possibly partial aggregates is never
   monotone, and grouping on, joining on or filtering on such values is unsafe.

>>> from imp_core.plan.nodes import Aggregate, AggCall, Field, Scan
>>> import pyarrow as pa
>>> scan = Scan("t", ("a", "b"), (Field("t.a", pa.int64()), Field("t.b", pa.int64())))
>>> plan = Aggregate(scan, ("t.a",), (AggCall("sum", "t.b", "s"),))
>>> check_attribute(plan, "t", "a").safe
True
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping, Sequence

from imp_core.errors import UnknownColumnError, UnknownTableError, UnsafeSketchError
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
    UnaryOp,
    conjuncts,
    rename_columns,
)
from imp_core.plan.nodes import (
    Aggregate,
    Distinct,
    Join,
    PlanNode,
    Project,
    QueryPlan,
    Scan,
    Select,
    SortKey,
    TopK,
)

Domains = Mapping[str, Mapping[str, Any]]

__all__ = ["SafetyVerdict", "check_attribute", "require_safe"]


@dataclass(frozen=True)
class SafetyVerdict:
    """Whether a sketch on ``table.column`` is safe for a query, and why (or why not)."""

    table: str
    column: str
    safe: bool
    reason: str

    @property
    def attribute(self) -> str:
        return f"{self.table}.{self.column}"


def check_attribute(
    plan: QueryPlan | PlanNode,
    table: str,
    column: str,
    domains: Domains | None = None,
    table_columns: Mapping[str, Sequence[str]] | None = None,
) -> SafetyVerdict:
    """Decide whether every range partition of ``table`` on ``column`` gives a safe sketch.

    ``domains`` maps table -> column -> declared ``(low, high)`` (``None`` for an open
    side); it only serves to prove sums non-negative. ``table_columns`` lists all
    columns of each table, to accept an attribute the query does not read; without it
    the column must be read by the query or have a declared domain.

    Raises ``UnknownTableError`` if the query does not read ``table`` and
    ``UnknownColumnError`` if ``column`` is not a column of it.
    """
    root = plan.root if isinstance(plan, QueryPlan) else plan
    table, column = _resolve(root, table, column, domains, table_columns)
    ctx = _Context(table, column, domains or {})
    try:
        _analyze(root, (), True, ctx)
    except _Unsafe as exc:
        return SafetyVerdict(table, column, False, exc.reason)
    return SafetyVerdict(table, column, True, ctx.safe_reason())


def require_safe(
    plan: QueryPlan | PlanNode,
    attributes: Iterable[tuple[str, str]],
    domains: Domains | None = None,
    force: bool = False,
    table_columns: Mapping[str, Sequence[str]] | None = None,
) -> list[SafetyVerdict]:
    """Check each ``(table, column)``; raise ``UnsafeSketchError`` for the first unsafe one.

    With ``force`` the verdicts are returned without raising (the caller accepts a
    possibly wrong result). Unknown tables or columns raise regardless of ``force``.
    """
    verdicts = [check_attribute(plan, t, c, domains, table_columns) for t, c in attributes]
    if not force:
        for verdict in verdicts:
            if not verdict.safe:
                raise UnsafeSketchError(
                    f"sketch attribute {verdict.attribute} is unsafe: {verdict.reason}"
                )
    return verdicts


# -- validation ---------------------------------------------------------------------------


def _pick(name: str, candidates: Iterable[str]) -> str | None:
    candidates = list(candidates)
    if name in candidates:
        return name
    folded = [c for c in candidates if c.casefold() == name.casefold()]
    return folded[0] if len(folded) == 1 else None


def _resolve(root: PlanNode, table: str, column: str, domains: Domains | None,
             table_columns: Mapping[str, Sequence[str]] | None) -> tuple[str, str]:
    scans = [n for n in root.walk() if isinstance(n, Scan)]
    real_table = _pick(table, {s.table for s in scans})
    if real_table is None:
        read = ", ".join(sorted({s.table for s in scans})) or "no table"
        raise UnknownTableError(f"table {table!r} is not read by the query (it reads {read})")
    table = real_table
    if table_columns is not None and _pick(table, table_columns) is not None:
        known: list[str] = list(table_columns[_pick(table, table_columns)])
    else:
        known = [c for s in scans if s.table == table for c in s.source_columns]
        if domains is not None and _pick(table, domains) is not None:
            known += list(domains[_pick(table, domains)])
    real_column = _pick(column, known)
    if real_column is None:
        raise UnknownColumnError(
            f"column {column!r} is not a column of table {table!r}"
            + ("" if table_columns is not None else
               " read by the query (pass table_columns to name columns it does not read)")
        )
    return table, real_column


# -- interval analysis ----------------------------------------------------------------------

INF = math.inf


@dataclass(frozen=True)
class _Interval:
    """Closed interval of the non-NULL values an expression can take; lo > hi: only NULL."""

    lo: float = -INF
    hi: float = INF

    @property
    def empty(self) -> bool:
        return self.lo > self.hi

    @property
    def nonneg(self) -> bool:
        return self.empty or self.lo >= 0

    def union(self, other: _Interval) -> _Interval:
        return _Interval(min(self.lo, other.lo), max(self.hi, other.hi))

    def __str__(self) -> str:
        if self.empty:
            return "[NULL]"
        return f"[{self.lo:g}, {self.hi:g}]"


_UNKNOWN = _Interval()
_NULL = _Interval(INF, -INF)
_NONNEG = _Interval(0.0, INF)


def _number(v: Any) -> float | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float, decimal.Decimal)):
        return float(v)
    return None


def _bounds(d: Any) -> _Interval:
    """A declared domain: a ``(low, high)`` pair or an object with ``lo``/``hi``."""
    if d is None:
        return _UNKNOWN
    if hasattr(d, "lo") and hasattr(d, "hi"):
        lo, hi = d.lo, d.hi
    else:
        try:
            lo, hi = d
        except (TypeError, ValueError):
            return _UNKNOWN
    lo_n, hi_n = _number(lo), _number(hi)
    if (lo is not None and lo_n is None) or (hi is not None and hi_n is None):
        return _UNKNOWN  # dates, strings: not numbers
    return _Interval(-INF if lo_n is None else lo_n, INF if hi_n is None else hi_n)


def _mul(a: float, b: float) -> float:
    if a == 0 or b == 0:  # the actual values are finite, so 0 * unbounded is 0
        return 0.0
    return a * b


def _interval(expr: Expr, cols: Mapping[str, _Interval]) -> _Interval:
    if isinstance(expr, ColumnRef):
        return cols.get(expr.name, _UNKNOWN)
    if isinstance(expr, Literal):
        if expr.value is None:
            return _NULL
        n = _number(expr.value)
        return _UNKNOWN if n is None else _Interval(n, n)
    if isinstance(expr, Cast):
        return _interval(expr.operand, cols)
    if isinstance(expr, UnaryOp) and expr.op == "neg":
        x = _interval(expr.operand, cols)
        return x if x.empty else _Interval(-x.hi, -x.lo)
    if isinstance(expr, BinaryOp) and expr.op in ("+", "-", "*", "/"):
        a, b = _interval(expr.left, cols), _interval(expr.right, cols)
        if a.empty or b.empty:
            return _NULL
        if expr.op == "+":
            return _Interval(a.lo + b.lo, a.hi + b.hi)
        if expr.op == "-":
            return _Interval(a.lo - b.hi, a.hi - b.lo)
        if expr.op == "*":
            ends = [_mul(x, y) for x in (a.lo, a.hi) for y in (b.lo, b.hi)]
            return _Interval(min(ends), max(ends))
        # division: only the sign is tracked (x / 0 is NULL)
        if (a.lo >= 0 and b.lo >= 0) or (a.hi <= 0 and b.hi <= 0):
            return _NONNEG
        if (a.lo >= 0 and b.hi <= 0) or (a.hi <= 0 and b.lo >= 0):
            return _Interval(-INF, 0.0)
        return _UNKNOWN
    if isinstance(expr, Case):
        out = _NULL if expr.default is None else _interval(expr.default, cols)
        for _, value in expr.whens:
            out = out.union(_interval(value, cols))
        return out
    if isinstance(expr, FuncCall):
        if expr.name == "coalesce":
            out = _NULL
            for arg in expr.args:
                out = out.union(_interval(arg, cols))
            return out
        if expr.name == "abs":
            x = _interval(expr.args[0], cols)
            if x.empty:
                return x
            lo = 0.0 if x.lo <= 0 <= x.hi else min(abs(x.lo), abs(x.hi))
            return _Interval(lo, max(abs(x.lo), abs(x.hi)))
        if expr.name == "month":
            return _Interval(1.0, 12.0)
        if expr.name == "day":
            return _Interval(1.0, 31.0)
    return _UNKNOWN


# -- rendering --------------------------------------------------------------------------------

_OPS = {"and": "AND", "or": "OR"}


def _sql_literal(v: Any) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, bool):
        return "TRUE" if v else "FALSE"
    if isinstance(v, str):
        return "'" + v.replace("'", "''") + "'"
    if isinstance(v, dt.datetime):
        return f"TIMESTAMP '{v.isoformat(sep=' ')}'"
    if isinstance(v, dt.date):
        return f"DATE '{v.isoformat()}'"
    return str(v)


def _sql(e: Expr) -> str:
    """SQL-like text of an expression (ColumnRef names are shown as they are)."""

    def wrap(x: Expr) -> str:
        return f"({_sql(x)})" if isinstance(x, BinaryOp) else _sql(x)

    if isinstance(e, ColumnRef):
        return e.name
    if isinstance(e, Literal):
        return _sql_literal(e.value)
    if isinstance(e, BinaryOp):
        return f"{wrap(e.left)} {_OPS.get(e.op, e.op)} {wrap(e.right)}"
    if isinstance(e, UnaryOp):
        if e.op == "not":
            return f"NOT {wrap(e.operand)}"
        if e.op == "neg":
            return f"-{wrap(e.operand)}"
        return f"{wrap(e.operand)} {'IS NULL' if e.op == 'is_null' else 'IS NOT NULL'}"
    if isinstance(e, Case):
        body = " ".join(f"WHEN {_sql(c)} THEN {_sql(v)}" for c, v in e.whens)
        default = "" if e.default is None else f" ELSE {_sql(e.default)}"
        return f"CASE {body}{default} END"
    if isinstance(e, InList):
        vals = ", ".join(_sql(v) for v in e.values)
        return f"{wrap(e.operand)} {'NOT IN' if e.negated else 'IN'} ({vals})"
    if isinstance(e, Like):
        return f"{wrap(e.operand)} {'NOT LIKE' if e.negated else 'LIKE'} {_sql_literal(e.pattern)}"
    if isinstance(e, FuncCall):
        return f"{e.name}({', '.join(_sql(a) for a in e.args)})"
    if isinstance(e, Cast):
        return f"CAST({_sql(e.operand)} AS {e.to})"
    return str(e)


def _order_text(order: Sequence[SortKey], facts: _Facts, k: int) -> str:
    keys = ", ".join(f"{facts.show(s.column)} {'DESC' if s.descending else 'ASC'}"
                     for s in order)
    return f"ORDER BY {keys} LIMIT {k}"


# -- the analysis -----------------------------------------------------------------------------


class _Unsafe(Exception):
    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class _Taint:
    """A column whose value in a phantom may differ from its shadow's.

    ``func`` is set when the phantom's value is ``func`` over a sub-bag of the values its
    shadow's group aggregates (the aggregation's input was exact); ``nonneg`` records that
    a sum's argument is provably >= 0.
    """

    label: str
    origin: int
    func: str | None = None
    nonneg: bool = False
    why_not: str = ""  # when func is None: why no monotonicity is known

    @property
    def shrinks(self) -> bool:
        """A partial group's value is <= the complete group's."""
        return self.func in ("count", "count_star", "max") or (
            self.func == "sum" and self.nonneg)

    @property
    def grows(self) -> bool:
        """A partial group's value is >= the complete group's."""
        return self.func == "min"

    @property
    def never_null(self) -> bool:
        return self.func in ("count", "count_star")


@dataclass
class _Facts:
    has_table: bool
    # tainted output columns
    tainted: dict[str, _Taint] = field(default_factory=dict)
    # per scan of the sketched table (by its path): output columns equal to its attribute
    attr: dict[tuple[int, ...], frozenset[str]] = field(default_factory=dict)
    # sets of output columns unique over the result (over D and over D_P)
    keys: tuple[frozenset[str], ...] = ()
    # display text of output columns (aggregates as ``sum(x)``), for reasons
    labels: dict[str, str] = field(default_factory=dict)
    # value intervals of output columns (from declared domains)
    ivals: dict[str, _Interval] = field(default_factory=dict)
    # display text of the definition of computed columns, e.g. ``l_price * (1 - l_disc)``
    exprs: dict[str, str] = field(default_factory=dict)

    def show(self, col: str) -> str:
        return self.labels.get(col, col)

    def render(self, expr: Expr) -> str:
        mapping: dict[str, Expr] = {c: ColumnRef(lbl) for c, lbl in self.labels.items()
                                    if lbl != c}
        return _sql(rename_columns(expr, mapping))


@dataclass
class _Context:
    table: str
    column: str
    domains: Domains
    notes: list[str] = field(default_factory=list)
    partial_aggs: dict[int, str] = field(default_factory=dict)  # origin -> description
    inspected: set[int] = field(default_factory=set)

    @property
    def attribute(self) -> str:
        return f"{self.table}.{self.column}"

    def domain(self, table: str, column: str) -> _Interval:
        cols = self.domains.get(table)
        if cols is None:
            name = _pick(table, self.domains)
            cols = self.domains[name] if name is not None else {}
        name = _pick(column, cols)
        return _bounds(cols[name]) if name is not None else _UNKNOWN

    def partial(self) -> str:
        return f"a partial group (only some of its {self.attribute} fragments)"

    def safe_reason(self) -> str:
        notes = list(self.notes)
        for origin, desc in self.partial_aggs.items():
            if origin not in self.inspected:
                notes.append(
                    f"{desc} may see partial groups in the sketch instance, but its "
                    f"aggregates never decide whether a row reaches the result (no HAVING, "
                    f"join, grouping or top-k on them), so partial groups never reach it")
        if not notes:
            return (f"safe: the query is monotone in {self.table} (only selection, projection, "
                    f"join and DISTINCT over it), so the sketch instance, which holds all "
                    f"provenance, yields exactly the same result")
        return "safe: " + "; ".join(notes)


def _equalities(pred: Expr | None) -> list[tuple[str, str]]:
    return [(p.left.name, p.right.name) for p in conjuncts(pred)
            if isinstance(p, BinaryOp) and p.op == "="
            and isinstance(p.left, ColumnRef) and isinstance(p.right, ColumnRef)]


def _close(attr: dict[tuple[int, ...], frozenset[str]],
           pairs: list[tuple[str, str]]) -> dict[tuple[int, ...], frozenset[str]]:
    out = {}
    for path, cols in attr.items():
        cur = set(cols)
        changed = bool(cur)
        while changed:
            changed = False
            for a, b in pairs:
                if (a in cur) != (b in cur):
                    cur |= {a, b}
                    changed = True
        out[path] = frozenset(cur)
    return out


def _tainted_in(expr: Expr, facts: _Facts) -> list[str]:
    return sorted(c for c in expr.columns() if c in facts.tainted)


def _analyze(node: PlanNode, path: tuple[int, ...], lossless: bool, ctx: _Context) -> _Facts:
    """Facts about ``node``'s result; ``lossless``: every row of it reaches the root's
    annotations (all operators above are projections, DISTINCTs or aggregations)."""
    if isinstance(node, Scan):
        return _scan(node, path, ctx)
    if isinstance(node, Select):
        return _select(node, _analyze(node.input, path + (0,), False, ctx), ctx)
    if isinstance(node, Project):
        return _project(node, _analyze(node.input, path + (0,), lossless, ctx))
    if isinstance(node, Join):
        left = _analyze(node.left, path + (0,), False, ctx)
        right = _analyze(node.right, path + (1,), False, ctx)
        return _join(node, left, right, ctx)
    if isinstance(node, Aggregate):
        return _aggregate(node, _analyze(node.input, path + (0,), lossless, ctx), path, ctx)
    if isinstance(node, Distinct):
        facts = _analyze(node.input, path + (0,), lossless, ctx)
        return replace(facts, keys=facts.keys + (frozenset(node.column_names),))
    if isinstance(node, TopK):
        return _topk(node, _analyze(node.input, path + (0,), False, ctx), lossless, ctx)
    raise _Unsafe(f"operator {type(node).__name__} is not covered by the safety analysis")


def _scan(node: Scan, path: tuple[int, ...], ctx: _Context) -> _Facts:
    ivals = {f.name: ctx.domain(node.table, src)
             for src, f in zip(node.source_columns, node.fields)}
    if node.table != ctx.table:
        return _Facts(False, ivals=ivals)
    cols = frozenset({node.output_name(ctx.column)}) if ctx.column in node.source_columns \
        else frozenset()
    return _Facts(True, attr={path: cols}, ivals=ivals)


def _check_filter(pred: Expr, facts: _Facts, ctx: _Context, what: str) -> None:
    """Raise unless a phantom passing ``pred`` implies its shadow passes it."""
    if not _tainted_in(pred, facts):
        return
    if isinstance(pred, BinaryOp) and pred.op in ("and", "or"):
        _check_filter(pred.left, facts, ctx, what)
        _check_filter(pred.right, facts, ctx, what)
        return
    text = facts.render(pred)
    if isinstance(pred, BinaryOp) and pred.op in ("<", "<=", ">", ">="):
        op, col, other = pred.op, pred.left, pred.right
        if not isinstance(col, ColumnRef) or col.name not in facts.tainted:
            flip = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}
            op, col, other = flip[op], pred.right, pred.left
        if isinstance(col, ColumnRef) and col.name in facts.tainted \
                and not _tainted_in(other, facts):
            taint = facts.tainted[col.name]
            ctx.inspected.add(taint.origin)
            if op in (">", ">=") and taint.shrinks:
                ctx.notes.append(f"{what} {text} is monotone: {ctx.partial()} has "
                                 f"{taint.label} no larger than the complete group, so it "
                                 f"passes only if the complete group passes")
                return
            if op in ("<", "<=") and taint.grows:
                ctx.notes.append(f"{what} {text} is monotone: {ctx.partial()} has "
                                 f"{taint.label} no smaller than the complete group, so it "
                                 f"passes only if the complete group passes")
                return
            raise _Unsafe(f"{what} {text} is not monotone: {_why_not(taint, op)}, so "
                          f"{ctx.partial()} could pass where the complete group fails")
    for c in _tainted_in(pred, facts):
        ctx.inspected.add(facts.tainted[c].origin)
    raise _Unsafe(f"{what} {text} is not monotone: it tests an aggregate of groups that "
                  f"may be partial in the sketch instance other than by 'aggregate > c' "
                  f"(count, max, sum of non-negative) or 'aggregate < c' (min), so "
                  f"{ctx.partial()} could pass where the complete group fails")


def _why_not(taint: _Taint, op: str) -> str:
    if taint.func is None:
        return f"{taint.label} {taint.why_not}"
    if taint.func == "avg":
        return f"{taint.label} of a partial group can be larger or smaller than the complete one"
    if taint.func == "sum" and not taint.nonneg and op in (">", ">="):
        return (f"the summed values of {taint.label} are not provably >= 0 under the declared "
                f"domains, so a partial group's sum can exceed the complete group's")
    if op in (">", ">="):
        return f"{taint.label} of a partial group can be larger than the complete group's"
    return f"{taint.label} of a partial group can be smaller than the complete group's"


def _select(node: Select, facts: _Facts, ctx: _Context) -> _Facts:
    _check_filter(node.predicate, facts, ctx, "HAVING")
    return replace(facts, attr=_close(facts.attr, _equalities(node.predicate)))


def _project(node: Project, facts: _Facts) -> _Facts:
    tainted: dict[str, _Taint] = {}
    labels: dict[str, str] = {}
    ivals: dict[str, _Interval] = {}
    exprs: dict[str, str] = {}
    renames: dict[str, list[str]] = {}
    defs = {c: ColumnRef(d) for c, d in {**facts.exprs, **facts.labels}.items()}
    for ne in node.exprs:
        e = ne.expr
        ivals[ne.name] = _interval(e, facts.ivals)
        if isinstance(e, ColumnRef):
            renames.setdefault(e.name, []).append(ne.name)
            if e.name in facts.exprs:
                exprs[ne.name] = facts.exprs[e.name]
            if e.name in facts.labels:
                labels[ne.name] = facts.labels[e.name]
            if e.name in facts.tainted:
                tainted[ne.name] = facts.tainted[e.name]
            continue
        text = facts.render(e)
        exprs[ne.name] = _sql(rename_columns(e, defs))
        if any(c in facts.tainted for c in e.columns()):
            labels[ne.name] = text
            src = facts.tainted[_tainted_in(e, facts)[0]]
            tainted[ne.name] = _Taint(text, src.origin,
                                      why_not="is an expression over aggregates of possibly "
                                              "partial groups; no monotonicity is known")
        elif any(c in facts.labels for c in e.columns()):
            labels[ne.name] = text
    attr = {p: frozenset(n for c in cols for n in renames.get(c, ()))
            for p, cols in facts.attr.items()}
    keys = tuple(frozenset(renames[c][0] for c in key) for key in facts.keys
                 if all(c in renames for c in key))
    return _Facts(facts.has_table, tainted, attr, keys, labels, ivals, exprs)


def _join(node: Join, left: _Facts, right: _Facts, ctx: _Context) -> _Facts:
    both = _Facts(left.has_table or right.has_table,
                  {**left.tainted, **right.tainted},
                  {**left.attr, **right.attr},
                  tuple(a | b for a in left.keys for b in right.keys),
                  {**left.labels, **right.labels},
                  {**left.ivals, **right.ivals},
                  {**left.exprs, **right.exprs})
    if node.condition is not None:
        bad = _tainted_in(node.condition, both)
        if bad:
            taint = both.tainted[bad[0]]
            ctx.inspected.add(taint.origin)
            raise _Unsafe(f"join condition {both.render(node.condition)} uses {taint.label}, "
                          f"which may be computed over {ctx.partial()} in the sketch "
                          f"instance, so a partial group could join where the complete "
                          f"one does not")
        both.attr = _close(both.attr, _equalities(node.condition))
    return both


def _aggregate(node: Aggregate, facts: _Facts, path: tuple[int, ...],
               ctx: _Context) -> _Facts:
    by = ", ".join(facts.show(g) for g in node.group_by)
    desc = f"the aggregation BY [{by}]" if node.group_by else "the aggregation without GROUP BY"
    labels = {g: facts.labels[g] for g in node.group_by if g in facts.labels}
    ivals = {g: facts.ivals.get(g, _UNKNOWN) for g in node.group_by}
    exprs = {g: facts.exprs[g] for g in node.group_by if g in facts.exprs}
    for a in node.aggregates:
        arg = "*" if a.arg is None else facts.labels.get(a.arg, facts.exprs.get(a.arg, a.arg))
        func = "count" if a.func == "count_star" else a.func
        labels[a.name] = f"{func}({arg})"
        arg_iv = _UNKNOWN if a.arg is None else facts.ivals.get(a.arg, _UNKNOWN)
        if a.func in ("count", "count_star"):
            ivals[a.name] = _NONNEG
        elif a.func == "sum":
            ivals[a.name] = _NONNEG if arg_iv.nonneg else (
                _Interval(-INF, 0.0) if arg_iv.hi <= 0 else _UNKNOWN)
        else:
            ivals[a.name] = arg_iv
    keys = (frozenset(node.group_by),)
    attr = {p: cols & frozenset(node.group_by) for p, cols in facts.attr.items()}
    out = _Facts(facts.has_table, {}, attr, keys, labels, ivals, exprs)
    if not facts.has_table:
        return out
    bad_keys = [g for g in node.group_by if g in facts.tainted]
    if bad_keys:
        taint = facts.tainted[bad_keys[0]]
        ctx.inspected.add(taint.origin)
        raise _Unsafe(f"{desc} groups on {taint.label}, which may be computed over "
                      f"{ctx.partial()} in the sketch instance, so a partial group's row "
                      f"could fall into a different group")
    if all(cols for cols in attr.values()):
        keys_hit = sorted({g for cols in attr.values() for g in cols})
        ctx.notes.append(f"{ctx.attribute} determines the group key "
                         f"{', '.join(facts.show(g) for g in keys_hit)} of {desc}, so each "
                         f"group lies in one fragment and the sketch instance holds it whole")
        return out
    if not node.aggregates:
        return out  # grouping only: a partial group has the same value as the whole one
    origin = len(ctx.partial_aggs)
    ctx.partial_aggs[origin] = desc
    exact_input = not facts.tainted
    for a in node.aggregates:
        if exact_input:
            nonneg = a.func == "sum" and facts.ivals.get(a.arg or "", _UNKNOWN).nonneg
            out.tainted[a.name] = _Taint(labels[a.name], origin, a.func, nonneg)
        else:
            out.tainted[a.name] = _Taint(
                labels[a.name], origin,
                why_not="aggregates values that may themselves come from partial groups, "
                        "so no monotonicity is known")
    return out


def _covered(seen: set[str], keys: tuple[frozenset[str], ...]) -> bool:
    return any(key <= seen for key in keys)


def _topk(node: TopK, facts: _Facts, lossless: bool, ctx: _Context) -> _Facts:
    out = replace(facts, tainted={})
    if not facts.has_table:
        return out
    text = _order_text(node.order, facts, node.k)
    if not lossless:
        raise _Unsafe(f"the top-k {text} has a selection, join or top-k above it that may "
                      f"drop some of its k tuples; their fragments then need not be in the "
                      f"sketch, and other tuples of the sketch instance could move up into "
                      f"the top-k")
    if not facts.tainted:
        ctx.notes.append(f"the top-k {text} ranks an input without partial groups and all "
                         f"its k tuples reach the result, so they are in the sketch instance "
                         f"and every other tuple there ranks after them")
        return out
    ordered = {s.column for s in node.order}
    sequence = [(s.column, s.descending, s.effective_nulls_first) for s in node.order]
    sequence += [(c, False, True) for c in node.input.column_names if c not in ordered]
    seen: set[str] = set()
    used: list[str] = []
    for col, desc, nulls_first in sequence:
        if _covered(seen, facts.keys):
            break
        seen.add(col)
        taint = facts.tainted.get(col)
        if taint is None:
            continue
        ctx.inspected.add(taint.origin)
        in_order = col in ordered
        if in_order and desc and taint.shrinks and (taint.never_null or not nulls_first):
            used.append(f"{taint.label} DESC can only fall for a partial group")
            continue
        if in_order and not desc and taint.grows and not nulls_first:
            used.append(f"{taint.label} ASC NULLS LAST can only rise for a partial group")
            continue
        if not in_order:
            why = (f"ties on its order keys are broken by {taint.label} (ascending, NULLs "
                   f"first), which is not monotone that way")
        elif taint.func is None:
            why = f"it ranks on {taint.label}, which {taint.why_not}"
        elif desc and taint.shrinks:
            why = f"it ranks on {taint.label} DESC NULLS FIRST, and a partial group's value " \
                  f"may be NULL"
        elif not desc and taint.grows:
            why = f"it ranks on {taint.label} ASC with NULLs first, and a partial group's " \
                  f"value may be NULL"
        else:
            direction, op = ("DESC", ">") if desc else ("ASC", "<")
            why = f"it ranks on {taint.label} {direction}, and {_why_not(taint, op)}"
        raise _Unsafe(f"the top-k {text} is not monotone: {why}, so {ctx.partial()} could "
                      f"rank into the top-k ahead of a complete one")
    if used:
        ctx.notes.append(f"the top-k {text} is monotone: {'; '.join(used)}, so no partial "
                         f"group ranks ahead of a complete one and all k tuples reach the "
                         f"result")
    else:
        ctx.notes.append(f"the top-k {text} ranks on a unique key of its input that a partial "
                         f"group shares with its complete group, so no partial group ranks "
                         f"ahead of a complete one and all k tuples reach the result")
    return out
