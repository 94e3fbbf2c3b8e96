"""The per-operator rules of the safety analysis (rules 1 to 6 of the package docstring;
semi-joins, anti-joins and outer joins in ``negation.py``, one-row aggregates in
``scalar.py``, set operations in ``set_ops.py``).

``analyze`` walks a plan bottom-up and returns each operator's ``Facts``, or raises
``Unsafe`` at the first operator whose rule fails, with the reason. The facts it returns
keep the invariant of the package docstring for the operator's result, and every note it
adds to the ``Context`` states why one operator is safe.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from imp_core.plan.aggregates import registry
from imp_core.plan.aggregates.base import Monotonicity, ValueRange
from imp_core.plan.expand import Expand
from imp_core.plan.expr import BinaryOp, ColumnRef, Expr, rename_columns
from imp_core.plan.nodes import (
    Aggregate,
    Distinct,
    Join,
    OuterJoin,
    PlanNode,
    Project,
    Scan,
    Select,
    SemiJoin,
    SetOp,
    SortKey,
    TopK,
    Window,
)
from imp_core.safety.expand import expand
from imp_core.safety.facts import (
    Context,
    Facts,
    Taint,
    close,
    equalities,
    never_null,
    partial_taint,
    rejects_null,
    tainted_in,
)
from imp_core.safety.intervals import INF, NONNEG, UNKNOWN, Interval, interval_of
from imp_core.safety.negation import anti_join, outer_join, semi_join
from imp_core.safety.render import sql_text
from imp_core.safety.scalar import pin_single_rows
from imp_core.safety.set_ops import set_operation
from imp_core.safety.totals import at_aggregate, through_project, through_topk
from imp_core.safety.verdict import Unsafe
from imp_core.safety.window import ranked_filter, window

# the operators a grand-total row provably survives (``totals.py``)
_KEEP_TOTALS = (Project, TopK, Aggregate, Window, Distinct, Expand)


def analyze(node: PlanNode, path: tuple[int, ...], lossless: bool, ctx: Context) -> Facts:
    """Facts about ``node``'s result; ``lossless``: every row of it reaches the root's
    annotations (all operators above are projections, DISTINCTs or aggregations)."""
    facts = _rule(node, path, lossless, ctx)
    if facts.totals and not isinstance(node, _KEEP_TOTALS):
        facts = replace(facts, totals={})
    if facts.tainted and path in ctx.complete:
        facts = replace(facts, tainted={})
    return facts


def _rule(node: PlanNode, path: tuple[int, ...], lossless: bool, ctx: Context) -> Facts:
    if isinstance(node, Scan):
        return _scan(node, path, ctx)
    if isinstance(node, Select) and isinstance(node.input, Window):
        inner = analyze(node.input.input, path + (0, 0), False, ctx)
        facts = window(node.input, inner, ctx, path + (0,) in ctx.complete)
        ranked = ranked_filter(node, inner, facts, lossless, ctx)
        return ranked if ranked is not None else _select(node, facts, ctx)
    if isinstance(node, Select):
        return _select(node, analyze(node.input, path + (0,), False, ctx), ctx)
    if isinstance(node, Window):  # rule 11 (``window.py``): each input row reaches it
        return window(node, analyze(node.input, path + (0,), lossless, ctx), ctx,
                      path in ctx.complete)
    if isinstance(node, Project):
        return _project(node, analyze(node.input, path + (0,), lossless, ctx))
    if isinstance(node, Join):
        left = analyze(node.left, path + (0,), False, ctx)
        right = analyze(node.right, path + (1,), False, ctx)
        return _join(node, *pin_single_rows(node, path, left, right, ctx), ctx)
    if isinstance(node, (SemiJoin, OuterJoin)):
        left = analyze(node.left, path + (0,), False, ctx)
        right = analyze(node.right, path + (1,), False, ctx)
        if isinstance(node, OuterJoin):
            return outer_join(node, path, left, right, lossless, ctx)
        if node.anti:
            return anti_join(node, path, left, right, ctx)
        return semi_join(node, left, right, ctx)
    if isinstance(node, Aggregate):
        return _aggregate(node, analyze(node.input, path + (0,), lossless, ctx), path, ctx)
    if isinstance(node, Distinct):
        facts = analyze(node.input, path + (0,), lossless, ctx)
        return replace(facts, keys=facts.keys + (frozenset(node.column_names),))
    if isinstance(node, TopK):
        facts = _topk(node, analyze(node.input, path + (0,), False, ctx), lossless,
                      path in ctx.complete, ctx)
        return replace(facts, totals=through_topk(node, facts.totals))
    if isinstance(node, SetOp):
        # every row of a UNION's inputs reaches its output; INTERSECT and EXCEPT drop rows
        through = lossless and node.kind == "union"
        left = analyze(node.left, path + (0,), through, ctx)
        right = analyze(node.right, path + (1,), through, ctx)
        return set_operation(node, path, left, right, ctx)
    if isinstance(node, Expand):
        return expand(node, analyze(node.input, path + (0,), lossless, ctx))
    raise Unsafe(f"operator {type(node).__name__} is not covered by the safety analysis")


def _scan(node: Scan, path: tuple[int, ...], ctx: Context) -> Facts:
    ivals = {f.name: ctx.domain(node.table, src)
             for src, f in zip(node.source_columns, node.fields)}
    required = ctx.required.get(node.table, frozenset())
    not_null = frozenset(f.name for src, f in zip(node.source_columns, node.fields)
                         if src in required)
    if node.table != ctx.table:
        return Facts(False, ivals=ivals, not_null=not_null)
    cols = frozenset({node.output_name(ctx.column)}) if ctx.column in node.source_columns \
        else frozenset()
    return Facts(True, attr={path: cols}, ivals=ivals, not_null=not_null)


def _check_filter(pred: Expr, facts: Facts, ctx: Context, what: str) -> None:
    """Raise unless a phantom passing ``pred`` implies its shadow passes it."""
    if not tainted_in(pred, facts):
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
                and not tainted_in(other, facts):
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
            raise Unsafe(f"{what} {text} is not monotone: {_why_not(taint, op)}, so "
                          f"{ctx.partial()} could pass where the complete group fails")
    for c in tainted_in(pred, facts):
        ctx.inspected.add(facts.tainted[c].origin)
    raise Unsafe(f"{what} {text} is not monotone: it tests an aggregate of groups that "
                  f"may be partial in the sketch instance other than by 'aggregate > c' "
                  f"(count, max, sum of non-negative) or 'aggregate < c' (min), so "
                  f"{ctx.partial()} could pass where the complete group fails")


def _why_not(taint: Taint, op: str) -> str:
    if taint.func is None:
        return f"{taint.label} {taint.why_not}"
    partial = registry.get(taint.func).partial
    if partial is Monotonicity.EITHER:
        return f"{taint.label} of a partial group can be larger or smaller than the complete one"
    if partial is Monotonicity.SMALLER_IF_NONNEG and not taint.nonneg and op in (">", ">="):
        return (f"the summed values of {taint.label} are not provably >= 0 under the declared "
                f"domains, so a partial group's sum can exceed the complete group's")
    if op in (">", ">="):
        return f"{taint.label} of a partial group can be larger than the complete group's"
    return f"{taint.label} of a partial group can be smaller than the complete group's"


def _select(node: Select, facts: Facts, ctx: Context) -> Facts:
    _check_filter(node.predicate, facts, ctx, "HAVING")
    return replace(facts, attr=close(facts.attr, equalities(node.predicate)),
                   not_null=facts.not_null | rejects_null(node.predicate))


def _project(node: Project, facts: Facts) -> Facts:
    tainted: dict[str, Taint] = {}
    labels: dict[str, str] = {}
    ivals: dict[str, Interval] = {}
    exprs: dict[str, str] = {}
    renames: dict[str, list[str]] = {}
    defs = {c: ColumnRef(d) for c, d in {**facts.exprs, **facts.labels}.items()}
    not_null = frozenset(ne.name for ne in node.exprs if never_null(ne.expr, facts.not_null))
    for ne in node.exprs:
        e = ne.expr
        ivals[ne.name] = interval_of(e, facts.ivals)
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
        exprs[ne.name] = sql_text(rename_columns(e, defs))
        if any(c in facts.tainted for c in e.columns()):
            labels[ne.name] = text
            src = facts.tainted[tainted_in(e, facts)[0]]
            tainted[ne.name] = Taint(text, src.origin,
                                      why_not="is an expression over aggregates of possibly "
                                              "partial groups; no monotonicity is known")
        elif any(c in facts.labels for c in e.columns()):
            labels[ne.name] = text
    attr = {p: frozenset(n for c in cols for n in renames.get(c, ()))
            for p, cols in facts.attr.items()}
    keys = tuple(frozenset(renames[c][0] for c in key) for key in facts.keys
                 if all(c in renames for c in key))
    return Facts(facts.has_table, tainted, attr, keys, labels, ivals, exprs, facts.optional,
                 not_null, through_project(node, facts.totals) if facts.totals else {})


def _join(node: Join, left: Facts, right: Facts, ctx: Context) -> Facts:
    both = Facts(left.has_table or right.has_table,
                  {**left.tainted, **right.tainted},
                  {**left.attr, **right.attr},
                  tuple(a | b for a in left.keys for b in right.keys),
                  {**left.labels, **right.labels},
                  {**left.ivals, **right.ivals},
                  {**left.exprs, **right.exprs},
                  left.optional | right.optional,
                  left.not_null | right.not_null | rejects_null(node.condition))
    if node.condition is not None:
        bad = tainted_in(node.condition, both)
        if bad:
            taint = both.tainted[bad[0]]
            ctx.inspected.add(taint.origin)
            raise Unsafe(f"join condition {both.render(node.condition)} uses {taint.label}, "
                          f"which may be computed over {ctx.partial()} in the sketch "
                          f"instance, so a partial group could join where the complete "
                          f"one does not")
        both.attr = close(both.attr, equalities(node.condition))
    return both


def _aggregate(node: Aggregate, facts: Facts, path: tuple[int, ...],
               ctx: Context) -> Facts:
    by = ", ".join(facts.show(g) for g in node.group_by)
    desc = f"the aggregation BY [{by}]" if node.group_by else "the aggregation without GROUP BY"
    labels = {g: facts.labels[g] for g in node.group_by if g in facts.labels}
    ivals = {g: facts.ivals.get(g, UNKNOWN) for g in node.group_by}
    exprs = {g: facts.exprs[g] for g in node.group_by if g in facts.exprs}
    for a in node.aggregates:
        arg = "*" if a.arg is None else facts.labels.get(a.arg, facts.exprs.get(a.arg, a.arg))
        fn = a.function
        labels[a.name] = f"{fn.label()}({arg})"
        arg_iv = UNKNOWN if a.arg is None else facts.ivals.get(a.arg, UNKNOWN)
        if fn.value_range is ValueRange.NONNEG:
            ivals[a.name] = NONNEG
        elif fn.value_range is ValueRange.SUM:  # the sign of the summed values, if they share one
            ivals[a.name] = NONNEG if arg_iv.nonneg else (
                Interval(-INF, 0.0) if arg_iv.hi <= 0 else UNKNOWN)
        elif fn.value_range is ValueRange.ARGUMENT:
            ivals[a.name] = arg_iv
        else:
            ivals[a.name] = UNKNOWN
    keys = (frozenset(node.group_by),) + _sets_told_apart(node, facts)
    attr = {p: cols & frozenset(node.group_by) for p, cols in facts.attr.items()}
    out = Facts(facts.has_table, {}, attr, keys, labels, ivals, exprs, facts.optional,
                facts.not_null & frozenset(node.group_by))
    if not facts.has_table:
        return out
    if path in ctx.whole:
        ctx.notes.append(f"the grand total of {desc} reaches the result whenever it exists "
                         f"and carries the fragments of every row of its input, so the "
                         f"sketch instance holds that input whole and every group is "
                         f"complete")
        out.totals = {path: at_aggregate(node)}
        return out
    bad_keys = [g for g in node.group_by if g in facts.tainted]
    if bad_keys:
        taint = facts.tainted[bad_keys[0]]
        ctx.inspected.add(taint.origin)
        raise Unsafe(f"{desc} groups on {taint.label}, which may be computed over "
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
    for a in node.aggregates:
        out.tainted[a.name] = partial_taint(labels[a.name], origin, a.func, a.arg, facts)
    return out


def _sets_told_apart(node: Aggregate, facts: Facts) -> tuple[frozenset[str], ...]:
    """Over grouping sets (an Expand below), the group key without the set column when
    the key columns alone tell the sets apart: each key whose membership differs between
    sets is never NULL in the input, so its column is NULL exactly in the sets without
    it (ROLLUP (a, b) over non-NULL a and b: (x, NULL) is the subtotal of x, never a
    group of the finest set)."""
    ex = node.input
    if not isinstance(ex, Expand) or ex.set_column not in node.group_by \
            or len({frozenset(g) for g in ex.sets}) != len(ex.sets):
        return ()
    varying = [j for j in range(len(ex.keys)) if not ex.in_every_set(j)]
    if any(ex.keys[j] not in facts.not_null or ex.names[j] not in node.group_by
           for j in varying):
        return ()
    return (frozenset(node.group_by) - {ex.set_column},)


def _covered(seen: set[str], keys: tuple[frozenset[str], ...]) -> bool:
    return any(key <= seen for key in keys)


def _order_text(order: Sequence[SortKey], facts: Facts, k: int) -> str:
    keys = ", ".join(f"{facts.show(s.column)} {'DESC' if s.descending else 'ASC'}"
                     for s in order)
    return f"ORDER BY {keys} LIMIT {k}"


def _topk(node: TopK, facts: Facts, lossless: bool, complete: bool, ctx: Context) -> Facts:
    out = replace(facts, tainted={})
    if not facts.has_table:
        return out
    text = _order_text(node.order, facts, node.k)
    if complete:
        ctx.notes.append(f"the top-k {text} ranks an input the sketch instance holds whole, "
                         f"so it keeps the same k tuples there")
        return out
    if not lossless:
        raise Unsafe(f"the top-k {text} has a selection, join or top-k above it that may "
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
        raise Unsafe(f"the top-k {text} is not monotone: {why}, so {ctx.partial()} could "
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
