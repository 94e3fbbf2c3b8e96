"""Safety of a sketch attribute for a query (IMP paper, sections 4.1 and 4.4).

A provenance sketch of query Q on a range partition of table R on attribute a holds the
fragments that contain provenance of Q. It is *safe* if Q over the sketch instance D_P
(R cut down to those fragments, every other table whole) returns Q(D). Attribute a is
*safe* for Q if every range partition on it gives a safe sketch. ``check_attribute``
decides this conservatively: "safe" is always really safe, "unsafe" may be a false alarm.

How it is argued. Annotate every row of every operator's result over D with its
fragment set A(r) (the engine's semantics: selection and projection keep it, a join
unions both sides, a group or a DISTINCT row unions all its input rows, top-k keeps its
k rows, a semi-join row adds its partners', an anti-join row and a NULL-padded row keep
their own; the sketch S is the union over the result). The analysis proves, bottom-up, that
each operator's result over D_P is, as a bag of values,

    the rows r of its result over D with A(r) ⊆ S      ("exact" rows)
  + phantoms: each agrees with a *shadow* row g of the result over D with A(g) ⊄ S on
    every column except the *tainted* ones (aggregates of partial groups).

At the root every row has A ⊆ S (that is how S is defined), so no shadow and hence no
phantom can exist there, and Q(D_P) = Q(D). A phantom is a group of which D_P holds only
some tuples: a *partial group*. The rules that keep the invariant, each with why:

1. Scan, selection, projection, join, semi-join and DISTINCT on untainted columns keep
   it (a phantom passes a test on untainted columns exactly when its shadow does). So a
   query built only of these (a monotone query) is safe for any attribute.
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
7. A semi-join (EXISTS, IN) is monotone like a join that keeps the left columns: its
   condition must not read tainted columns. A kept row carries its partners' fragments,
   so the attribute of a scan of R on the right flows (rule 4) to the left columns the
   condition's equalities tie it to, and to none otherwise.
8. An anti-join (NOT EXISTS, NOT IN) and an outer join are not monotone in their negated
   or NULL-supplying side: a sketch that drops a row's only partners makes NOT EXISTS true
   for it, or makes it appear NULL-padded. With an untainted condition, such a side may
   read R only if (a) its rows carry no provenance of R (it is then the same over D and
   D_P), or (b) the condition's equalities tie the attribute of each scan of R on it to
   the attribute of a scan of R on the preserved side that gives every row a tuple (all
   partners of a row share its fragment, so a row in D_P keeps all of them), or (c) for
   an outer join, all operators above are projections, DISTINCTs or aggregations (every
   partner of every row is then in the sketch). NOT IN admits only (a): it also depends
   on whether the whole subquery result is empty or holds a NULL. An anti-join row
   carries only its left row's fragments; a NULL-padded column is NULL, not the
   attribute, so the attribute of the preserved side never flows into the other side's
   columns.
9. An aggregation without GROUP BY (a scalar subquery) joined to an input X whose rows
   each read R, by a join every result row derives from, is exact: a non-empty result
   carries the one row's fragments, so its whole input is in the sketch; an empty result
   gives an empty sketch, an empty X over D_P and an empty result there too.

10. A set operation compares whole rows (``set_ops.py``). UNION [ALL] is monotone like a
   projection of both inputs (and DISTINCT): nothing is tested, and every row of its
   inputs reaches it. INTERSECT [ALL] is monotone like a semi-join on all columns and
   EXCEPT [ALL] antitone in its right input like an anti-join on all columns: neither may
   compare tainted columns, and EXCEPT's right input may read R only under (a) or (b) of
   rule 8, the "condition" being the equality of all columns by position. A UNION row
   carries its own fragments (ALL) or those of all equal rows, an INTERSECT row those of
   all equal rows of both inputs, an EXCEPT row those of the equal left rows only.
11. A window (``OVER``) needs untainted PARTITION BY and ORDER BY columns; its columns
   are exact when the attribute flows into a PARTITION BY column (each partition lies in
   one fragment), else tainted: an aggregate over a frame of an exact input with its
   function's monotonicity (rule 5), a rank with none.
   A window whose PARTITION BY holds a unique key of its input has one-row partitions:
   a rank is 1 and an aggregate the row's own value, whatever the order.
12. A partitioned top-k, ``r <= c`` / ``r < c`` / ``r = 1`` alone on a rank, dense_rank
   or row_number of a window over an exact input with only projections, DISTINCTs and
   aggregations above, is safe: the first c rows of every partition reach the result,
   so they are in D_P, and every other row there ranks after them.
13. An aggregation whose grand-total row (the group of an empty grouping set, or the
   one row without GROUP BY) reaches the result whenever it exists holds its whole input
   in the sketch: that row's fragments are those of every input row. Its result over
   D_P is then its result over D (*complete*), and so is every operator above it that
   reads no other scan of R: nothing there is tainted, a window over it is exact and a
   top-k over it keeps its k rows. The grand total survives projections, windows,
   DISTINCT and a top-k that provably sorts it first (``ORDER BY grouping(a) +
   grouping(b) DESC`` over ROLLUP(a, b)); ``totals.py`` holds the proof.

Where it is: the rules in ``rules.py`` (one function per operator), rules 7 and 8 in
``negation.py``, rule 9 in ``scalar.py``, rule 10 in ``set_ops.py``, rules 11 and 12 in
``window.py``, rule 13 in ``totals.py``, grouping-set expansion in ``expand.py``, what
they know of a result in ``facts.py``, the interval analysis in ``intervals.py``, name
resolution in ``names.py``, the text of reasons in ``render.py``, the verdict in
``verdict.py``.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

import pyarrow as pa

from imp_core.errors import UnsafeSketchError
from imp_core.plan.nodes import PlanNode, QueryPlan
from imp_core.safety import totals
from imp_core.safety.facts import Context
from imp_core.safety.intervals import Domains
from imp_core.safety.names import resolve
from imp_core.safety.rules import analyze
from imp_core.safety.scalar import essential_paths
from imp_core.safety.verdict import SafetyVerdict, Unsafe

__all__ = ["SafetyVerdict", "check_attribute", "declared_not_null", "require_safe"]


def check_attribute(
    plan: QueryPlan | PlanNode,
    table: str,
    column: str,
    domains: Domains | None = None,
    table_columns: Mapping[str, Sequence[str]] | None = None,
    not_null: Mapping[str, Iterable[str]] | None = None,
) -> SafetyVerdict:
    """Decide whether every range partition of ``table`` on ``column`` gives a safe sketch.

    ``domains`` maps table -> column -> declared ``(low, high)`` (``None`` for an open
    side); it only serves to prove sums non-negative. ``table_columns`` lists all
    columns of each table, to accept an attribute the query does not read; without it
    the column must be read by the query or have a declared domain. ``not_null`` maps
    table -> its columns declared NOT NULL (enforced on every write): with them a
    grouping set's subtotal rows are told apart from the finest groups by their NULLs.

    Raises ``UnknownTableError`` if the query does not read ``table`` and
    ``UnknownColumnError`` if ``column`` is not a column of it.
    """
    root = plan.root if isinstance(plan, QueryPlan) else plan
    table, column = resolve(root, table, column, domains, table_columns)
    essential = essential_paths(root)
    required = {t: frozenset(cols) for t, cols in (not_null or {}).items()}
    ctx = Context(table, column, domains or {}, essential=essential, required=required)
    try:
        analyze(root, (), True, ctx)
    except Unsafe as exc:
        # rule 13: assume the aggregations with a grand total whole, keep those whose
        # grand total provably reaches the result, and try again until all of them do
        whole = totals.candidates(root)
        while whole:
            ctx = Context(table, column, domains or {}, essential=essential,
                          required=required, whole=whole,
                          complete=totals.complete_paths(root, table, whole))
            try:
                reached = frozenset(analyze(root, (), True, ctx).totals) & whole
            except Unsafe:
                break
            if reached == whole:
                return SafetyVerdict(table, column, True, ctx.safe_reason())
            whole = reached
        return SafetyVerdict(table, column, False, exc.reason)
    return SafetyVerdict(table, column, True, ctx.safe_reason())


def declared_not_null(catalog: Mapping[str, pa.Schema]) -> dict[str, frozenset[str]]:
    """Per table of ``catalog``, its columns declared NOT NULL."""
    return {t: frozenset(f.name for f in schema if not f.nullable)
            for t, schema in catalog.items()}


def require_safe(
    plan: QueryPlan | PlanNode,
    attributes: Iterable[tuple[str, str]],
    domains: Domains | None = None,
    force: bool = False,
    table_columns: Mapping[str, Sequence[str]] | None = None,
    not_null: Mapping[str, Iterable[str]] | None = None,
) -> list[SafetyVerdict]:
    """Check each ``(table, column)``; raise ``UnsafeSketchError`` for the first unsafe one.

    With ``force`` the verdicts are returned without raising (the caller accepts a
    possibly wrong result). Unknown tables or columns raise regardless of ``force``.
    """
    verdicts = [check_attribute(plan, t, c, domains, table_columns, not_null)
                for t, c in attributes]
    if not force:
        for verdict in verdicts:
            if not verdict.safe:
                raise UnsafeSketchError(
                    f"sketch attribute {verdict.attribute} is unsafe: {verdict.reason}"
                )
    return verdicts

