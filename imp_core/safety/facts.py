"""What the analysis knows of one operator's result, and of the attribute under test.

``Facts`` compares an operator's result over the sketch instance D_P with its result over D
(see the package docstring): ``tainted`` holds every column whose value in a phantom may
differ from its shadow's (a column not in it is equal in both), ``attr`` holds per scan of
the sketched table the output columns equal to the sketch attribute, and each set in
``keys`` is unique over both results. ``Context`` gathers, for one attribute, the notes
that make up a safe verdict's reason; each note is a reason some operator is safe.

An ``attr`` entry is a statement about every result, over D and over D_P alike: a column
in ``attr[p]`` equals, in every row, the sketch attribute of each tuple the scan at path
``p`` contributes to that row's provenance (vacuously true for a row with none, such as
a NULL-padded row of an outer join). Only scans that contribute provenance have an
entry: a scan read under NOT EXISTS / NOT IN contributes none. ``optional`` lists the
scans that may contribute no tuple to a row (the NULL-supplying side of an outer join);
for the others every row has one, so a row present in D_P has its attribute's fragment
in the sketch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from imp_core.plan.aggregates import registry
from imp_core.plan.aggregates.base import Monotonicity
from imp_core.plan.expr import (
    BinaryOp,
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
from imp_core.safety.intervals import UNKNOWN, Domains, Interval, domain_interval
from imp_core.safety.names import pick
from imp_core.safety.render import sql_text
from imp_core.safety.totals import Path, Total


def equalities(pred: Expr | None) -> list[tuple[str, str]]:
    """The ``x = y`` conjuncts of ``pred`` between plain columns, as name pairs."""
    return [(p.left.name, p.right.name) for p in conjuncts(pred)
            if isinstance(p, BinaryOp) and p.op == "="
            and isinstance(p.left, ColumnRef) and isinstance(p.right, ColumnRef)]


_NULL_REJECTING = frozenset({"=", "<>", "!=", "<", "<=", ">", ">="})


def rejects_null(pred: Expr | None) -> frozenset[str]:
    """The columns a row must have non-NULL to pass ``pred``: the plain columns compared
    by its conjuncts (a comparison with NULL is not true), tested by IN, LIKE or IS NOT
    NULL."""
    out: set[str] = set()
    for p in conjuncts(pred):
        if isinstance(p, BinaryOp) and p.op in _NULL_REJECTING:
            out.update(x.name for x in (p.left, p.right) if isinstance(x, ColumnRef))
        elif isinstance(p, (InList, Like)) and isinstance(p.operand, ColumnRef):
            out.add(p.operand.name)
        elif isinstance(p, UnaryOp) and p.op == "is_not_null" \
                and isinstance(p.operand, ColumnRef):
            out.add(p.operand.name)
    return frozenset(out)


def never_null(expr: Expr, not_null: frozenset[str]) -> bool:
    """Whether ``expr`` is never NULL on rows whose ``not_null`` columns are not: a column
    among them, a non-NULL constant, or a concatenation of such."""
    if isinstance(expr, ColumnRef):
        return expr.name in not_null
    if isinstance(expr, Literal):
        return expr.value is not None
    if isinstance(expr, FuncCall) and expr.name == "concat":
        return all(never_null(a, not_null) for a in expr.args)
    return False


def close(attr: dict[Path, frozenset[str]],
          pairs: list[tuple[str, str]]) -> dict[Path, frozenset[str]]:
    """Each column set of ``attr`` grown by the columns ``pairs`` make equal to it."""
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


@dataclass(frozen=True)
class Taint:
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
        """A partial group's value is <= the complete group's (the function's
        ``partial`` monotonicity, see ``imp_core.plan.aggregates.base``)."""
        if self.func is None:
            return False
        partial = registry.get(self.func).partial
        return partial is Monotonicity.SMALLER or (
            partial is Monotonicity.SMALLER_IF_NONNEG and self.nonneg)

    @property
    def grows(self) -> bool:
        """A partial group's value is >= the complete group's."""
        return self.func is not None and registry.get(self.func).partial is Monotonicity.LARGER

    @property
    def never_null(self) -> bool:
        return self.func is not None and registry.get(self.func).never_null


@dataclass
class Facts:
    has_table: bool
    # tainted output columns
    tainted: dict[str, Taint] = field(default_factory=dict)
    # per scan of the sketched table (by its path) that contributes provenance: output
    # columns equal to its attribute (see the module docstring)
    attr: dict[Path, frozenset[str]] = field(default_factory=dict)
    # sets of output columns unique over the result (over D and over D_P)
    keys: tuple[frozenset[str], ...] = ()
    # display text of output columns (aggregates as ``sum(x)``), for reasons
    labels: dict[str, str] = field(default_factory=dict)
    # value intervals of output columns (from declared domains)
    ivals: dict[str, Interval] = field(default_factory=dict)
    # display text of the definition of computed columns, e.g. ``l_price * (1 - l_disc)``
    exprs: dict[str, str] = field(default_factory=dict)
    # paths in ``attr`` whose scan may contribute no tuple to a row
    optional: frozenset[Path] = frozenset()
    # output columns never NULL (declared NOT NULL, or a condition rejected NULL)
    not_null: frozenset[str] = frozenset()
    # per aggregation assumed whole (by its path), what is known of its grand total
    # while it provably reaches this result (``totals.py``)
    totals: Mapping[Path, Total] = field(default_factory=dict)

    def show(self, col: str) -> str:
        return self.labels.get(col, col)

    def render(self, expr: Expr) -> str:
        mapping: dict[str, Expr] = {c: ColumnRef(lbl) for c, lbl in self.labels.items()
                                    if lbl != c}
        return sql_text(rename_columns(expr, mapping))


def partial_taint(label: str, origin: int, func: str, arg: str | None, facts: Facts) -> Taint:
    """The taint of ``func(arg)`` over part of its rows (a partial group or frame), the
    rows' columns having ``facts``: with an exact input the function's monotonicity
    holds (a sum's when its argument is provably >= 0), else none is known."""
    if facts.tainted:
        return Taint(label, origin,
                     why_not="aggregates values that may themselves come from partial "
                             "groups, so no monotonicity is known")
    nonneg = registry.get(func).partial is Monotonicity.SMALLER_IF_NONNEG and \
        facts.ivals.get(arg or "", UNKNOWN).nonneg
    return Taint(label, origin, func, nonneg)


def tainted_in(expr: Expr, facts: Facts) -> list[str]:
    """The tainted columns ``expr`` reads, sorted."""
    return sorted(c for c in expr.columns() if c in facts.tainted)


@dataclass
class Context:
    table: str
    column: str
    domains: Domains
    notes: list[str] = field(default_factory=list)
    partial_aggs: dict[int, str] = field(default_factory=dict)  # origin -> description
    inspected: set[int] = field(default_factory=set)
    # paths of the nodes every root row derives from (``negation.essential_paths``)
    essential: frozenset[Path] = frozenset()
    # per table, its columns declared NOT NULL
    required: Mapping[str, frozenset[str]] = field(default_factory=dict)
    # aggregations assumed to hold their whole input (rule 13, ``totals.py``), and the
    # nodes whose results are complete because of them
    whole: frozenset[Path] = frozenset()
    complete: frozenset[Path] = frozenset()

    @property
    def attribute(self) -> str:
        return f"{self.table}.{self.column}"

    def domain(self, table: str, column: str) -> Interval:
        cols = self.domains.get(table)
        if cols is None:
            name = pick(table, self.domains)
            cols = self.domains[name] if name is not None else {}
        name = pick(column, cols)
        return domain_interval(cols[name]) if name is not None else UNKNOWN

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
                    f"join, semi-join and DISTINCT over it), so the sketch instance, which "
                    f"holds all provenance, yields exactly the same result")
        return "safe: " + "; ".join(notes)

