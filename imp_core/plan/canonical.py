"""A canonical form of plans, for comparing two plans by structure.

``plan_sql`` pushes a selection into a planned subquery as far as it goes
(``imp_core.sql.pushdown``): ``SELECT * FROM (q) x WHERE x.a > 5`` does not hold ``q``'s
plan as a subtree, the ``a > 5`` sits somewhere inside it. ``canonical`` undoes that
in one direction for every plan: each selection is lifted as high as it can go without
changing the bag of rows, so two plans that differ only by where their selections sit
(or by renames between them) come out the same, and a selection added on top of a
subquery shows up as a stronger condition of one ``Select``.

The canonical tree is equivalent to the input: for every database it yields the same
bag of rows with the same columns (names and order). Its shape:
- every maximal chain of ``Project`` and ``Select`` nodes is at most one ``Project``
  over at most one ``Select`` over a node of another kind (projections composed, the
  selection's conjuncts rewritten over that node's columns, deduplicated and sorted);
- a ``Project`` that passes its input through unchanged is dropped;
- a conjunct is lifted above an ``Aggregate`` when it reads group keys only (there is
  at least one), above a ``Distinct``, out of either input of an inner ``Join`` and out
  of the left input of a ``SemiJoin``, when every column it reads reaches that node
  unchanged (a plain column of the input's projection); the non-equi conjuncts of an
  inner join's condition are lifted too (an inner join is a selection over the cross
  product). Nothing crosses a ``TopK`` (its k rows depend on all rows), an
  ``OuterJoin`` (a filtered input pads rows with NULLs instead of dropping them) or a
  ``SetOp`` (a conjunct on one input only is not one on the output).
Expressions are deterministic (``imp_core.plan.expr``), so evaluating a conjunct above
or below a projection of it gives the same rows.
"""

from __future__ import annotations

from dataclasses import replace

from imp_core.plan.expr import BinaryOp, ColumnRef, Expr, conjoin, conjuncts, rename_columns
from imp_core.plan.nodes import (
    Aggregate,
    Distinct,
    Join,
    NamedExpr,
    OuterJoin,
    PlanNode,
    Project,
    Scan,
    Select,
    SemiJoin,
    SetOp,
    TopK,
)

Projection = tuple[NamedExpr, ...] | None  # None: the node's own columns
_INPUTS = ("input", "left", "right")  # the fields of plan nodes that hold their inputs


def canonical(node: PlanNode, lift: bool = True) -> PlanNode:
    """``node`` in the canonical form of the module docstring (equivalent to it).

    ``lift`` False lifts no selection across an aggregation, join or DISTINCT (chains of
    projections and selections are still merged): a subquery used as an input of one
    then keeps its own top selection, where lifting would merge it with others."""
    return _build(*_block(node, lift))


def _block(node: PlanNode, lift: bool) -> tuple[PlanNode, list[Expr], Projection]:
    """(core, conjuncts, projection) with ``node`` equivalent to ``Project_projection(
    Select_conjuncts(core))``; conjuncts and projection read ``core``'s columns."""
    if isinstance(node, Select):
        core, preds, proj = _block(node.input, lift)
        return core, preds + conjuncts(_through(node.predicate, proj)), proj
    if isinstance(node, Project):
        core, preds, proj = _block(node.input, lift)
        return core, preds, tuple(NamedExpr(e.name, _through(e.expr, proj))
                                  for e in node.exprs)
    if not lift:
        kids = {k: canonical(getattr(node, k), False) for k in _INPUTS
                if isinstance(getattr(node, k, None), PlanNode)}
        return replace(node, **kids) if kids else node, [], None
    core, lifted = _core(node)
    return core, lifted, None


def _through(expr: Expr, proj: Projection) -> Expr:
    """``expr`` over a projection's output rewritten over the projection's input."""
    return expr if proj is None else rename_columns(expr, {e.name: e.expr for e in proj})


def _build(core: PlanNode, preds: list[Expr], proj: Projection) -> PlanNode:
    node = core
    if preds:
        unique = {repr(p): p for p in preds}
        node = Select(core, conjoin([unique[k] for k in sorted(unique)]))
    if proj is not None and not _passes_through(proj, node):
        node = Project(node, proj)
    return node


def _passes_through(proj: tuple[NamedExpr, ...], node: PlanNode) -> bool:
    names = node.column_names
    return len(proj) == len(names) and all(
        e.name == n and e.expr == ColumnRef(n) for e, n in zip(proj, names))


def _core(node: PlanNode) -> tuple[PlanNode, list[Expr]]:
    """``node`` (not a Project or Select) with canonical inputs, and the conjuncts lifted
    out of them over ``node``'s columns (to be applied above it)."""
    if isinstance(node, Aggregate):
        keys = set(node.group_by)
        child, up = _lift(node.input, lambda cols: bool(cols) and cols <= keys, keys)
        return replace(node, input=child), up
    if isinstance(node, Distinct):
        child, up = _lift(node.input, lambda cols: True, set())
        return replace(node, input=child), up
    if isinstance(node, Join):
        left, up_l = _lift(node.left, bool, set())
        right, up_r = _lift(node.right, bool, set())
        lk, rk, rest = node.equi_keys()
        keys = [BinaryOp("=", ColumnRef(a), ColumnRef(b)) for a, b in zip(lk, rk)]
        residual = [p for p in conjuncts(rest) if p.columns()]
        constant = [p for p in conjuncts(rest) if not p.columns()]
        return Join(left, right, conjoin(keys + constant)), up_l + up_r + residual
    if isinstance(node, SemiJoin):
        left, up = _lift(node.left, bool, set())
        return replace(node, left=left, right=canonical(node.right)), up
    if isinstance(node, (OuterJoin, TopK, SetOp)):
        kids = {k: canonical(getattr(node, k)) for k in _INPUTS
                if isinstance(getattr(node, k, None), PlanNode)}
        return replace(node, **kids), []
    return node, []  # a Scan, or a kind this module does not know: compared as it is


def _lift(child: PlanNode, may_lift, prefer: set[str]) -> tuple[PlanNode, list[Expr]]:
    """``child`` canonical with the conjuncts of its top selection that ``may_lift`` (given
    the columns a conjunct reads over ``child``'s output) taken out, rewritten over that
    output (choosing output names in ``prefer`` where a column is output twice)."""
    core, preds, proj = _block(child, True)
    if proj is None:
        outputs = {n: n for n in core.column_names}
    else:
        outputs = {}
        for e in proj:
            if isinstance(e.expr, ColumnRef) and (e.expr.name not in outputs
                                                  or e.name in prefer):
                outputs[e.expr.name] = e.name
    keep, up = [], []
    for p in preds:
        cols = p.columns()
        if cols <= set(outputs):
            out = rename_columns(p, {c: ColumnRef(outputs[c]) for c in cols})
            if may_lift(out.columns()):
                up.append(out)
                continue
        keep.append(p)
    return _build(core, keep, proj), up


def projection_of(m: PlanNode, e: PlanNode) -> dict[str, str] | None:
    """A map of every column of ``m`` to a column of ``e`` such that, over every database,
    ``m``'s rows are ``e``'s rows with only those columns, renamed (``m = ρπ(e)``,
    multiplicities kept); None when that is not shown. Shown for equal plans, and for
    plans alike but for columns a projection, an aggregation's list of aggregates or a
    join's inputs leave out (as ``plan_sql`` prunes what a subquery's user does not
    read); structurally, never by what the data holds."""
    if m == e:
        return {n: n for n in m.column_names}
    if isinstance(m, Project):
        return _project_of(m, e)
    if type(m) is not type(e):
        return None
    if isinstance(m, Select):
        inner = projection_of(m.input, e.input)
        same = inner is not None and _same_conjuncts(m.predicate, e.predicate, inner)
        return inner if same else None
    if isinstance(m, Aggregate):
        return _aggregate_of(m, e)
    if isinstance(m, Scan):
        return _scan_of(m, e)
    if isinstance(m, (Join, OuterJoin, SemiJoin)):
        flags = ("kind",) if isinstance(m, OuterJoin) else \
            ("anti", "null_aware") if isinstance(m, SemiJoin) else ()
        left, right = projection_of(m.left, e.left), projection_of(m.right, e.right)
        if left is None or right is None or any(getattr(m, f) != getattr(e, f)
                                                for f in flags):
            return None
        both = {**left, **right}
        if not _same_conjuncts(m.condition, e.condition, both):
            return None
        return left if isinstance(m, SemiJoin) else both
    return None  # TopK, Distinct, SetOp: only when equal (rows depend on all columns)


def _project_of(m: Project, e: PlanNode) -> dict[str, str] | None:
    """``m`` a projection of ``e`` (a projection of an input alike), or ``m``'s input
    one of ``e`` and ``m`` picking plain columns."""
    if isinstance(e, Project):
        inner = projection_of(m.input, e.input)
        if inner is not None:
            outputs = {x.expr: x.name for x in e.exprs}
            picked = {x.name: outputs.get(_renamed(x.expr, inner)) for x in m.exprs}
            if all(v is not None for v in picked.values()):
                return picked  # type: ignore[return-value]
    inner = projection_of(m.input, e)
    if inner is None or not all(isinstance(x.expr, ColumnRef) for x in m.exprs):
        return None
    return {x.name: inner[x.expr.name] for x in m.exprs}  # type: ignore[attr-defined]


def _scan_of(m: Scan, e: Scan) -> dict[str, str] | None:
    """Both a row per stored row of the same table; ``m`` reads some of ``e``'s columns."""
    fields = dict(zip(e.source_columns, e.fields))
    if m.table != e.table:
        return None
    out = {}
    for column, field in zip(m.source_columns, m.fields):
        theirs = fields.get(column)
        if theirs is None or theirs.dtype != field.dtype:
            return None
        out[field.name] = theirs.name
    return out


def _aggregate_of(m: Aggregate, e: Aggregate) -> dict[str, str] | None:
    """The same groups (keys alike) and a subset of ``e``'s aggregates."""
    inner = projection_of(m.input, e.input)
    if inner is None:
        return None
    keys = [inner[g] for g in m.group_by]
    if len(set(keys)) != len(keys) or set(keys) != set(e.group_by):
        return None
    calls = {(a.func, a.arg): a.name for a in e.aggregates}
    out = dict(zip(m.group_by, keys))
    for a in m.aggregates:
        name = calls.get((a.func, None if a.arg is None else inner[a.arg]))
        if name is None:
            return None
        out[a.name] = name
    return out


def _renamed(expr: Expr, columns: dict[str, str]) -> Expr:
    return rename_columns(expr, {k: ColumnRef(v) for k, v in columns.items()})


def _same_conjuncts(a: Expr | None, b: Expr | None, columns: dict[str, str]) -> bool:
    """``a`` over ``m``'s input, renamed by ``columns``, is ``b`` (as a set of conjuncts)."""
    renamed = None if a is None else _renamed(a, columns)
    return set(conjuncts(renamed)) == set(conjuncts(b))
