"""Safety rules of window functions (rules 11 and 12 of the package docstring).

A window row's annotation holds its partition's rows its values depend on (the whole
partition, or the rows up to its last peer), so a window row whose annotation is in the
sketch S finds all of those rows in the sketch instance D_P, and its values there are
its values over D, provided no *phantom* (a row of D_P whose shadow over D is not in S)
lands in its partition before it: a phantom agrees with its shadow on untainted columns,
so with untainted PARTITION BY and ORDER BY columns its shadow would be one of the rows
the annotation holds, and would be in S. Hence:

10. A window needs untainted PARTITION BY and ORDER BY columns (else a phantom row could
    change partition or move ahead of a complete row). If the sketch attribute flows into
    a PARTITION BY column (rule 4's flow, every scan of R contributing a tuple to every
    row), each partition lies in one fragment and D_P holds it whole: the window's
    columns are exact. Otherwise a row of D_P whose shadow is not in S may see only part
    of its partition: its window columns are tainted. An aggregate over a frame of an
    exact input is then the function over a sub-bag of the shadow's frame (the
    monotonicity of rule 5 applies: ``sum OVER (...) > c`` with non-negative values is
    safe); over a tainted input no monotonicity is known; a rank of a partial partition
    is at most its complete rank, which no filter of the rule-5 kind can use.
11. A partitioned top-k: a selection ``r <= c`` / ``r < c`` / ``r = 1`` alone on a rank,
    dense_rank or row_number r of a window over an exact input, with every operator
    above it a projection, DISTINCT or aggregation (lossless), is safe. A row over D
    with r > c has at least c rows before it in its partition whose r is at most c (the
    first c rows of the order; for dense_rank the first row of each of the c first
    values); they pass, reach the result, so they are in D_P, ahead of it, and its r
    over D_P is more than c too: no phantom passes. The counterexample without
    losslessness: a filter above that drops the first rows lets a later row of D_P move
    up to rank 1.
"""

from __future__ import annotations

from dataclasses import replace

from imp_core.plan.aggregates import registry
from imp_core.plan.aggregates.base import ValueRange
from imp_core.plan.expr import BinaryOp, ColumnRef, Expr, Literal
from imp_core.plan.nodes import Select, Window
from imp_core.safety.facts import Context, Facts, Taint, partial_taint
from imp_core.safety.intervals import NONNEG, UNKNOWN
from imp_core.safety.verdict import Unsafe


def _describe(node: Window, facts: Facts) -> str:
    by = ", ".join(facts.show(c) for c in node.partition_by)
    order = ", ".join(f"{facts.show(s.column)} {'DESC' if s.descending else 'ASC'}"
                      for s in node.order)
    text = f"PARTITION BY {by}" if by else ""
    if order:
        text = f"{text} ORDER BY {order}".strip()
    return f"the window OVER ({text})"


def window(node: Window, facts: Facts, ctx: Context, complete: bool = False) -> Facts:
    """Rule 10: the facts of ``node``'s result from those of its input; ``complete``:
    its input over the sketch instance is its input over D (rule 13)."""
    desc = _describe(node, facts)
    labels = dict(facts.labels)
    ivals = dict(facts.ivals)
    for c in node.calls:
        arg = "" if c.arg is None else facts.show(c.arg)
        labels[c.name] = f"{c.func}({arg}) OVER (...)"
        nonneg = c.ranking or registry.get(c.func).value_range is ValueRange.NONNEG
        ivals[c.name] = NONNEG if nonneg else UNKNOWN
    out = replace(facts, tainted=dict(facts.tainted), labels=labels, ivals=ivals)
    if not facts.has_table:
        return out
    if complete:
        ctx.notes.append(f"{desc} reads an input the sketch instance holds whole, so its "
                         f"columns are exact")
        return out
    by = frozenset(node.partition_by)
    alone = any(key <= by for key in facts.keys)
    tested = list(node.partition_by) + ([] if alone else [s.column for s in node.order])
    for col in tested:
        taint = facts.tainted.get(col)
        if taint is not None:
            ctx.inspected.add(taint.origin)
            raise Unsafe(f"{desc} partitions or orders on {taint.label}, which may be "
                         f"computed over {ctx.partial()} in the sketch instance, so a "
                         f"partial group's row could change partition or rank ahead of "
                         f"complete rows")
    if alone:
        return _one_row_partitions(node, facts, out, desc, ctx)
    if not facts.tainted and not facts.optional and \
            all(cols & by for cols in facts.attr.values()):
        ctx.notes.append(f"{ctx.attribute} determines a PARTITION BY column of {desc}, so "
                         f"each partition lies in one fragment and the sketch instance "
                         f"holds it whole")
        return out
    origin = len(ctx.partial_aggs)
    ctx.partial_aggs[origin] = desc
    for c in node.calls:
        if c.ranking:
            out.tainted[c.name] = Taint(
                labels[c.name], origin,
                why_not="is a rank within a partition the sketch instance may hold only in "
                        "part, so it may be smaller there")
        else:
            out.tainted[c.name] = partial_taint(labels[c.name], origin, c.func, c.arg, facts)
    return out


# over one row, a function bounded by its argument's values (or by them times the rows)
# is the row's own value
_OWN_VALUE = (ValueRange.ARGUMENT, ValueRange.SUM)


def _one_row_partitions(node: Window, facts: Facts, out: Facts, desc: str,
                        ctx: Context) -> Facts:
    """The window's PARTITION BY holds a unique key of its input (over D and over D_P),
    so every partition is one row, a phantom's as well as its shadow's: a rank is 1, and
    an aggregate is a function of the row's own value, tainted only as that value is."""
    for c in node.calls:
        if c.ranking or c.arg is None or c.arg not in facts.tainted:
            continue
        taint = facts.tainted[c.arg]
        own = registry.get(c.func).value_range in _OWN_VALUE
        out.tainted[c.name] = taint if own else Taint(
            out.labels[c.name], taint.origin,
            why_not="is a function of a value from a possibly partial group")
    ctx.notes.append(f"{desc} partitions on a unique key of its input, so each partition "
                     f"is one row, in the sketch instance as over the whole tables")
    return out


def _rank_bound(pred: Expr, ranks: set[str]) -> str | None:
    """The rank column ``pred`` bounds from above (``r <= c``, ``r < c``, ``r = 1`` and
    the mirrored forms, c an integer literal), else None."""
    if not isinstance(pred, BinaryOp):
        return None
    flip = {"<=": ">=", "<": ">", ">=": "<=", ">": "<", "=": "="}
    for op, col, lit in ((pred.op, pred.left, pred.right),
                         (flip.get(pred.op, ""), pred.right, pred.left)):
        if not (isinstance(col, ColumnRef) and col.name in ranks and isinstance(lit, Literal)
                and isinstance(lit.value, int)):
            continue
        if op in ("<=", "<") or (op == "=" and lit.value == 1):
            return col.name
    return None


def ranked_filter(node: Select, inner: Facts, facts: Facts, lossless: bool,
                  ctx: Context) -> Facts | None:
    """Rule 11 for ``node``, a selection over a window whose input has the facts
    ``inner`` and whose result has ``facts``: the facts of the selection's result when
    the rule applies, else None (the selection's usual rule decides)."""
    win = node.input
    assert isinstance(win, Window)
    ranks = {c.name for c in win.calls if c.ranking}
    col = _rank_bound(node.predicate, ranks)
    if col is None or col not in facts.tainted:
        return None
    text = facts.render(node.predicate)
    if not lossless:
        raise Unsafe(f"the partitioned top-k WHERE {text} has a selection, join or top-k "
                     f"above it that may drop some of its first rows; their fragments then "
                     f"need not be in the sketch, and a later row of the sketch instance "
                     f"could move up into the top")
    if inner.tainted:
        raise Unsafe(f"the partitioned top-k WHERE {text} ranks rows that may come from "
                     f"partial groups, so a partial group could rank into the top")
    ctx.inspected.add(facts.tainted[col].origin)
    ctx.notes.append(f"the partitioned top-k WHERE {text} keeps the first rows of every "
                     f"partition and all of them reach the result, so they are in the "
                     f"sketch instance and every other row there ranks after them")
    return replace(facts, tainted={})
