"""Sketch reuse: whether the sketch captured for one query may answer another.

A sketch of query P is used by cutting every table it partitions down to the rows of a
superset D' of its fragments (``imp_actors.spark_work``; the fitted filter may read
more). What makes that correct for P is the premise of this module: P(D') = P(D), P over
D' returns P's full result (the sketch is *safe*, paper section 4.4, checked at
registration unless it was forced). ``reuse_decision`` accepts another plan P2 only
when P2(D') = P2(D) follows from that premise alone, for every database; anything it
cannot prove is refused with the reason (a refusal only costs reading the tables whole).

Both plans are compared in ``imp_core.plan.canonical`` form (projections composed,
selections lifted as high as they go, or, in a second try, not across aggregations and
joins), so the planner's push-down of an outer WHERE into a subquery does not hide the
subquery. The proof:

- *Exact parts of P.* P's root is exact (its output over D' is its output over D). Below
  a projection, the input is exact too when the projection keeps every input column as
  it is (the input can be read back from the output) or when the input is monotone
  (scans, selections, projections, inner and semi-joins, DISTINCT): D' only lacks rows
  of D, so the input over D' is a sub-bag of the input over D with as many rows. Nothing
  else of P is: below a selection, an aggregation or a top-k, D' may lack rows P's
  result does not need.
- *Derived from an exact part E*: a projection of E (``imp_core.plan.canonical.
  projection_of``: some of its columns or aggregates, renamed): a function of E's rows;
  ``σ_θ2(X)`` when ``θ2`` implies E = ``σ_θ1(X)``'s ``θ1`` (``imp_core.plan.implication``),
  since ``σ_θ2(X) = σ_θ2(σ_θ1(X))``: a stronger HAVING, or a filter over P's result (X
  may be a projection of E's input); ``TopK_k2(X)`` when E = ``TopK_k1(X)`` in the same
  order with ``k2 <= k1``: the first k2 of the first k1 (ties broken as for P itself);
  ``π(σ_θ1∧R(X))`` when E = ``π_E(σ_θ1(X))`` outputs every column R reads and the
  expressions of π: ``π(σ_R(E))``, a filter over P's result that the planner pushed
  below P's projection.
- *Everything else of P2* must be computed from exact parts, derived parts and inputs
  reading no table the sketch filters (those read D' = D); any operator over exact
  inputs is exact. A scan of a sketched table reached otherwise refuses the plan.

Not accepted, because the premise does not give it: a selection stronger *below* an
aggregation, a top-k or a DISTINCT of P (a group P keeps may lose rows D' lacks; the top
k of fewer rows may reach rows beyond P's k); a stronger selection below P's top-k, or
over columns P's result does not keep (the projection then loses what D' may change);
any other use of a sketched table, e.g. joining P's result with it again or counting it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from imp_core.plan.canonical import canonical, projection_of
from imp_core.plan.expr import ColumnRef, Expr, conjoin, conjuncts, rename_columns
from imp_core.plan.implication import implies
from imp_core.plan.nodes import (
    Aggregate,
    Distinct,
    Join,
    PlanNode,
    Project,
    QueryPlan,
    Scan,
    Select,
    SemiJoin,
    TopK,
)

SAME_PLAN = "same-plan"
SUBQUERY = "subquery"
STRONGER_SELECTION = "stronger-selection"
SMALLER_LIMIT = "smaller-limit"
UNFILTERED = "unfiltered"  # reads no table the sketch filters


@dataclass(frozen=True)
class ReuseDecision:
    """Whether the sketch of ``query`` may answer a plan: ``rules`` that allowed it (one
    of the constants above each; empty when refused) and ``reason``, one line."""

    query: str
    allowed: bool
    rules: tuple[str, ...]
    reason: str

    @property
    def rule(self) -> str:
        return "+".join(self.rules)


def reuse_decision(query: str, sketched: QueryPlan | PlanNode, tables: Iterable[str],
                   plan: QueryPlan | PlanNode, proven_safe: bool = True) -> ReuseDecision:
    """May the sketch of ``query`` (of plan ``sketched``, partitioning ``tables``) answer
    ``plan``, i.e. does ``plan`` over the rows of the sketch give its full result? Module
    docstring. ``proven_safe`` False (registered with ``force``): the premise is not
    proven, so only ``sketched``'s own plan is accepted, as registered."""
    p = sketched.root if isinstance(sketched, QueryPlan) else sketched
    p2 = plan.root if isinstance(plan, QueryPlan) else plan
    filtered = frozenset(t.lower() for t in tables)
    if p2 == p or p2.fingerprint() == p.fingerprint():
        return ReuseDecision(query, True, (SAME_PLAN,), f"the plan is {query}'s own")
    read = sorted(p2.tables() & filtered)
    if not read:
        return ReuseDecision(query, True, (UNFILTERED,),
                             f"reads no table the sketch of {query} filters "
                             f"({', '.join(sorted(filtered)) or 'none'})")
    refusals = []
    # two canonical forms, each equivalent to its plan: one lifts selections as high as
    # they go (undoing the push-down of a WHERE over a subquery), one lifts none (keeping
    # a subquery used as an input of a join or an aggregation whole)
    for lift in (True, False):
        cp, cp2 = canonical(p, lift), canonical(p2, lift)
        if cp2 == cp:
            return ReuseDecision(query, True, (SAME_PLAN,), f"the plan is {query}'s own "
                                 "(but for where its selections sit)")
        if not proven_safe:
            return ReuseDecision(query, False, (), f"{query} was registered with force "
                                 "(its sketch attribute is not proven safe), so its "
                                 "sketch answers only its own plan")
        match = _Match(query, cp, filtered)
        if match.exact(cp2):
            return ReuseDecision(query, True, tuple(match.rules),
                                 f"reuses the sketch of {query}: {'; '.join(match.notes)}")
        refusals.append(match)
    match = next((m for m in refusals if m.near), refusals[0])
    detail = f" ({match.near})" if match.near else ""
    return ReuseDecision(query, False, (), f"the sketch of {query} is for another query; "
                         f"{match.outside or read[0]} is read outside {query}'s plan, "
                         f"where its sketch may miss rows{detail}")


def find_reusable(candidates: Iterable[tuple[str, QueryPlan, Iterable[str], bool]],
                  plan: QueryPlan | PlanNode
                  ) -> tuple[ReuseDecision | None, list[ReuseDecision]]:
    """The first of ``candidates`` ((query, plan, sketched tables, proven safe), in the
    order given) whose sketch may answer ``plan`` and filters a table it reads: one of the
    same plan first, else one allowed by the other rules; and the refusals of the
    others (all of them when none is allowed)."""
    decisions = [reuse_decision(n, p, t, plan, safe) for n, p, t, safe in candidates]
    useful = [d for d in decisions if d.allowed and UNFILTERED not in d.rules]
    refused = [d for d in decisions if not d.allowed]
    same = [d for d in useful if d.rules == (SAME_PLAN,)]
    return (same or useful or [None])[0], refused


class _Match:
    """Which nodes of a canonical P2 are exact given the exact parts of canonical P (the
    module docstring's proof); records the rules used and, on a refusal, where."""

    def __init__(self, query: str, p: PlanNode, filtered: frozenset[str]):
        self.query = query
        self.filtered = filtered
        self.anchors = _exact_parts(p)
        self.p_nodes = list(p.walk())
        self.names = _display_names(self.anchors)
        self.rules: list[str] = []
        self.notes: list[str] = []
        self.outside: str | None = None  # the first sketched table read outside
        self.near: str | None = None  # the first difference found, on a refusal
        self._memo: dict[int, bool] = {}

    def exact(self, m: PlanNode) -> bool:
        key = id(m)
        if key not in self._memo:
            self._memo[key] = self._exact(m)
        return self._memo[key]

    def _exact(self, m: PlanNode) -> bool:
        if not m.tables() & self.filtered:
            return True  # reads D' = D
        if any(projection_of(m, e) is not None for e in self.anchors):
            tables = ", ".join(sorted(m.tables() & self.filtered))
            self._use(SUBQUERY, f"reads {tables} only through {self.query}'s result, "
                      "used as a subquery")
            return True
        if any(type(e) is type(m) and self._derived(m, e) for e in self.anchors):
            return True
        kids = m.children()
        if not kids:
            if isinstance(m, Scan) and self.outside is None:
                self.outside = m.table
            return False
        self._note_difference(m)
        # every child checked (not all(...)): the first sketched scan outside is reported
        return all([self.exact(k) for k in kids])

    def _derived(self, m: PlanNode, e: PlanNode) -> bool:
        """``m`` is a function of the exact part ``e`` of its kind."""
        q = self.query
        if isinstance(m, Select) and isinstance(e, Select):
            # σ_θ2(ρπ(X)) = ρπ(σ_θ2'(X)) = ρπ(σ_θ2'(σ_θ1(X))) when θ2' implies θ1
            columns = projection_of(m.input, e.input)
            if columns is None:
                return False
            mine = rename_columns(m.predicate, {k: ColumnRef(v) for k, v in columns.items()})
            if implies(mine, e.predicate, e.input.schema):
                self._use(STRONGER_SELECTION, self._stronger(mine, e.predicate))
                return True
            self._near(f"`{self._show(mine)}` is not proven to imply {q}'s "
                       f"`{self._show(e.predicate)}`")
        elif isinstance(m, Project) and isinstance(e, Project):
            return self._filtered_projection(m, e)
        elif isinstance(m, TopK) and isinstance(e, TopK) and m.input == e.input:
            # only over the same input: a top-k breaks ties on all its input's columns
            if m.order == e.order and m.k <= e.k:
                self._use(SMALLER_LIMIT, f"the first {m.k} rows of {q}'s top {e.k}, "
                          "in the same order")
                return True
            self._near(f"LIMIT {m.k} is more than {q}'s {e.k}" if m.order == e.order
                       else f"ordered otherwise than {q}'s top {e.k}")
        return False

    def _filtered_projection(self, m: Project, e: Project) -> bool:
        """``m`` = π(σ_R(``e``)): ``m`` adds conditions R to ``e``'s selection (if any)
        that read only columns ``e`` outputs, and outputs some of ``e``'s expressions.
        (The planner pushes a filter over a subquery's result below its projection.)"""
        x2, mine = _split_select(m.input)
        x1, theirs = _split_select(e.input)
        columns = projection_of(x2, x1)
        if columns is None:
            return False
        renamed = {k: ColumnRef(v) for k, v in columns.items()}
        added = conjuncts(None if mine is None else rename_columns(mine, renamed))
        own = conjuncts(theirs)
        if not all(c in added for c in own):
            if implies(conjoin(added), theirs, x1.schema):
                self._near(f"a condition stronger than {self.query}'s on columns "
                           f"{self.query}'s result does not keep, whose values may differ "
                           "over the sketch's rows")
            return False
        extra = [c for c in added if c not in own]
        kept = {x.expr.name for x in e.exprs if isinstance(x.expr, ColumnRef)}
        outputs = {x.expr for x in e.exprs}
        if not extra or not all(rename_columns(x.expr, renamed) in outputs for x in m.exprs):
            return False
        if not all(c.columns() <= kept for c in extra):
            self._near(f"`{self._show(conjoin(extra))}` reads columns {self.query}'s "
                       "result does not keep")
            return False
        self._use(STRONGER_SELECTION, f"adds `{self._show(conjoin(extra))}` over "
                  f"{self.query}'s result")
        return True

    def _note_difference(self, m: PlanNode) -> None:
        """On the way to a refusal: a node of P like ``m`` but for its own parameters,
        below P's exact parts (where D' may lack rows), tells where the plans differ."""
        for n in self.p_nodes:
            if type(n) is type(m) and n != m and (n.children() == m.children() or (
                    isinstance(m, Aggregate) and m.group_by == n.group_by)):
                mine, theirs = (x._describe().replace("`", "") for x in (m, n))
                self._near(f"`{mine}` where {self.query} has `{theirs}`, under "
                           f"{self.query}'s result")
                return

    def _use(self, rule: str, note: str) -> None:
        if rule not in self.rules:
            self.rules.append(rule)
        if note not in self.notes:
            self.notes.append(note)

    def _near(self, text: str) -> None:
        if self.near is None:
            self.near = text

    def _stronger(self, mine: Expr, theirs: Expr) -> str:
        q, own = self.query, conjuncts(theirs)
        extra = [c for c in conjuncts(mine) if c not in own]
        if all(c in conjuncts(mine) for c in own):
            return f"adds `{self._show(conjoin(extra))}` over {q}'s result"
        return f"`{self._show(mine)}` implies {q}'s `{self._show(theirs)}`"

    def _show(self, expr: Expr | None) -> str:
        """``expr`` with P's internal column names (``_agg0``) shown as P outputs them."""
        if expr is None:
            return "TRUE"
        text = str(rename_columns(expr, {k: ColumnRef(v) for k, v in self.names.items()
                                         if k in expr.columns()})).replace("`", "")
        return text[1:-1] if text.startswith("(") and text.endswith(")") else text


def _exact_parts(p: PlanNode) -> list[PlanNode]:
    """P's root, and the input of each projection from there down that keeps every input
    column as it is (its output determines its input) or whose input is monotone (D' only
    lacks rows of D, so a monotone input over D' is a sub-bag of it over D; a projection
    keeps the number of rows, so equal outputs leave no row missing)."""
    out = [p]
    while isinstance(p, Project) and (_monotone(p.input) or {e.expr for e in p.exprs} >= {
            ColumnRef(n) for n in p.input.column_names}):
        p = p.input
        out.append(p)
    return out


def _split_select(node: PlanNode) -> tuple[PlanNode, Expr | None]:
    """(input, condition) of a selection; (``node``, None) for any other node."""
    return (node.input, node.predicate) if isinstance(node, Select) else (node, None)


def _monotone(node: PlanNode) -> bool:
    """Over a sub-database (each table a sub-bag) ``node`` yields a sub-bag of its rows:
    scans, selections, projections, inner joins, semi-joins, DISTINCT, nothing else (an
    aggregate's values change, a top-k takes other rows, an anti-join or an outer join
    may gain rows)."""
    if isinstance(node, SemiJoin) and node.anti:
        return False
    return isinstance(node, (Scan, Select, Project, Join, SemiJoin, Distinct)) and all(
        _monotone(k) for k in node.children())


def _display_names(parts: list[PlanNode]) -> dict[str, str]:
    """Column name of an exact part -> the name P's result gives it."""
    names: dict[str, str] = {}
    for node in parts:
        if isinstance(node, Project):
            names = {e.expr.name: names.get(e.name, e.name) for e in node.exprs
                     if isinstance(e.expr, ColumnRef)}
    return names
