"""Rules 7 and 8 of the package docstring: semi-joins, anti-joins and outer joins.

A semi-join (EXISTS, IN) is monotone in both inputs, like a join followed by keeping the
left columns. An anti-join (NOT EXISTS, NOT IN) is *antitone* in its right input, and an
outer join in its NULL-supplying input(s): dropping a row's only partners from that side
makes NOT EXISTS true for it, or makes it appear NULL-padded, so the sketch instance would
gain a row the full instance does not have. Such a side may read the sketched table R
only if no row of the preserved side that is in the sketch instance can lose a partner:

(a) the side's rows carry no provenance of R (``attr`` has no entry): every row of it is
    exact, so the side is the same over D and D_P;
(b) co-location: for every scan of R on that side, the condition's equalities make its
    attribute equal to a column that equals the attribute of a scan of R on the preserved
    side that gives every row a tuple (not ``optional``). A preserved row present in D_P
    has that tuple in D_P, so its fragment is in S; every partner (over D) then has all
    its R tuples in that fragment, so every partner is exact and present in D_P, and a
    phantom partner (values equal to a shadow whose annotation is not in S) cannot match;
(c) outer joins only: the join is *lossless* (only projections, DISTINCT and
    aggregations above), so every row of it over D reaches the result, each partner of
    each row is in S and present in D_P.

In every case the condition must not read a tainted column, so a phantom finds the
partners its shadow finds. NOT IN admits only (a): it is also decided by two facts about
the whole right result, whether it is empty and whether it holds a NULL key, and dropping
right rows that are nobody's partner (which (b) allows) can flip both; without declared
nullability a NULL key cannot be ruled out.

Provenance follows the engine (``imp_core.engine.operators.keyed_join``): a semi-join row
carries its partners' fragments, an anti-join row only its own, an outer-join pair both
rows', a NULL-padded row only its own side's.
"""

from __future__ import annotations

from imp_core.plan.expr import Expr
from imp_core.plan.nodes import OuterJoin, PlanNode, Scan, SemiJoin
from imp_core.safety.facts import Context, Facts, Path, close, equalities, tainted_in
from imp_core.safety.verdict import Unsafe


def _name(node: SemiJoin | OuterJoin, facts: Facts) -> str:
    on = "" if node.condition is None else f" ON {facts.render(node.condition)}"
    if isinstance(node, OuterJoin):
        return f"{node.kind.upper()} OUTER JOIN{on}"
    if node.null_aware:
        return f"NOT IN (null-aware anti-join{on})"
    return f"NOT EXISTS (anti-join{on})" if node.anti else f"EXISTS / IN (semi-join{on})"


def _merged(left: Facts, right: Facts) -> Facts:
    return Facts(left.has_table or right.has_table,
                 {**left.tainted, **right.tainted},
                 {**left.attr, **right.attr},
                 (),
                 {**left.labels, **right.labels},
                 {**left.ivals, **right.ivals},
                 {**left.exprs, **right.exprs},
                 left.optional | right.optional,
                 left.not_null | right.not_null)


def _check_condition(cond: Expr | None, both: Facts, what: str, ctx: Context) -> None:
    bad = [] if cond is None else tainted_in(cond, both)
    if bad:
        taint = both.tainted[bad[0]]
        ctx.inspected.add(taint.origin)
        raise Unsafe(f"the condition of {what} uses {taint.label}, which may be computed "
                     f"over {ctx.partial()} in the sketch instance, so a partial group "
                     f"could find partners where the complete one finds none, or the "
                     f"reverse")


def _scan_at(node: PlanNode, here: Path, target: Path) -> str:
    """How to name the scan at ``target`` (below ``node`` at ``here``) in a reason."""
    for i in target[len(here):]:
        node = node.children()[i]
    if not isinstance(node, Scan):
        return "a scan"
    alias = node.fields[0].name.split(".")[0] if node.fields else node.table
    return node.table if alias == node.table else f"{node.table} (as {alias})"


def _colocation(cond: Expr | None, side: Facts, other: Facts
                ) -> tuple[dict[Path, str], list[Path]]:
    """For each provenance scan of ``side``: the column of ``other`` the condition's
    equalities make equal to its attribute and that equals an attribute of ``other``'s
    rows (rule (b)); the scans without one."""
    anchors = frozenset().union(*(c for q, c in other.attr.items() if q not in other.optional))
    tied: dict[Path, str] = {}
    loose: list[Path] = []
    for p, cols in close(side.attr, equalities(cond)).items():
        hit = sorted(cols & anchors)
        if hit:
            tied[p] = hit[0]
        else:
            loose.append(p)
    return tied, loose


def semi_join(node: SemiJoin, left: Facts, right: Facts, ctx: Context) -> Facts:
    """EXISTS / IN: monotone. The right side's provenance flows to the left columns the
    condition's equalities tie its attribute to (all partners satisfy them)."""
    what = _name(node, _merged(left, right))
    _check_condition(node.condition, _merged(left, right), what, ctx)
    cols = frozenset(node.left.column_names)
    attr = {p: c & cols
            for p, c in close({**left.attr, **right.attr}, equalities(node.condition)).items()}
    return Facts(left.has_table or right.has_table, dict(left.tainted), attr, left.keys,
                 dict(left.labels), dict(left.ivals), dict(left.exprs),
                 left.optional | right.optional, left.not_null)


def anti_join(node: SemiJoin, path: Path, left: Facts, right: Facts,
              ctx: Context) -> Facts:
    """NOT EXISTS / NOT IN: the left's facts, if the right side cannot lose a partner."""
    both = _merged(left, right)
    what = _name(node, both)
    _check_condition(node.condition, both, what, ctx)
    if right.attr:
        if node.null_aware:
            raise Unsafe(f"{ctx.table} is read under {what}: NOT IN is decided by the "
                         f"whole subquery result too (every row passes when it is empty, "
                         f"none when it holds a NULL), and a sketch can drop subquery rows "
                         f"that are no row's partner, so rows that are not in the result "
                         f"could appear")
        tied, loose = _colocation(node.condition, right, left)
        if loose:
            scan = _scan_at(node, path, loose[0])
            raise Unsafe(f"{scan} is read under {what} with no equality of the condition "
                         f"tying its {ctx.column} to the {ctx.attribute} of the outer row: "
                         f"a sketch that drops a row's only partners would make NOT EXISTS "
                         f"true for it, so a row that is not in the result could appear")
        ties = ", ".join(sorted({left.show(c) for c in tied.values()}))
        ctx.notes.append(f"{what} reads {ctx.table}, but the condition ties each partner's "
                         f"{ctx.column} to {ties}, the {ctx.attribute} of the outer row, so "
                         f"a row in the sketch instance keeps all its partners and NOT "
                         f"EXISTS decides as over the full data")
    return Facts(left.has_table, dict(left.tainted), dict(left.attr), left.keys,
                 dict(left.labels), dict(left.ivals), dict(left.exprs), left.optional,
                 left.not_null)


def outer_join(node: OuterJoin, path: Path, left: Facts, right: Facts, lossless: bool,
               ctx: Context) -> Facts:
    """LEFT / FULL OUTER JOIN: as a join, if no NULL-supplying side can lose a partner."""
    both = _merged(left, right)
    what = _name(node, both)
    _check_condition(node.condition, both, what, ctx)
    full = node.kind == "full"
    sides = [(1, right, left)] + ([(0, left, right)] if full else [])
    for index, side, other in sides:
        if not side.attr:
            continue
        where = f"its NULL-supplying {('left', 'right')[index]} side"
        tied, loose = _colocation(node.condition, side, other)
        if not loose:
            ties = ", ".join(sorted({other.show(c) for c in tied.values()}))
            ctx.notes.append(f"{what} reads {ctx.table} on {where}, but the condition ties "
                             f"each partner's {ctx.column} to {ties}, the {ctx.attribute} of "
                             f"the preserved row, so a row in the sketch instance keeps all "
                             f"its partners and is NULL-padded exactly when it is over the "
                             f"full data")
        elif lossless:
            ctx.notes.append(f"{what} reads {ctx.table} on {where}, but every row of the "
                             f"join reaches the result (only projections, DISTINCT and "
                             f"aggregations above), so every partner of every row is in the "
                             f"sketch and no row is NULL-padded in the sketch instance that "
                             f"is not over the full data")
        else:
            scan = _scan_at(node, path, loose[0])
            raise Unsafe(f"{scan} is read on {where} of {what} with no equality of the "
                         f"condition tying its {ctx.column} to the {ctx.attribute} of the "
                         f"preserved row, and operators above may drop rows (selection, "
                         f"join, top-k): a sketch that drops a row's only partners would "
                         f"make it appear NULL-padded, a row that is not in the result")
    # NULL-padded columns are NULL, not the attribute: only the NULL-supplying side's own
    # provenance may be tied to the preserved side's columns (a padded row has none).
    if full:
        attr = {**left.attr, **right.attr}
        keys: tuple[frozenset[str], ...] = ()  # two padded rows may agree on all-NULL keys
    else:
        attr = {**left.attr, **close(right.attr, equalities(node.condition))}
        keys = tuple(a | b for a in left.keys for b in right.keys)
    supplying = frozenset(attr) if full else frozenset(right.attr)
    both.attr, both.keys, both.optional = attr, keys, both.optional | supplying
    both.not_null = frozenset() if full else left.not_null  # padded columns are NULL
    return both
