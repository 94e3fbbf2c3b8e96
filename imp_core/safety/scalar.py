"""Rule 9 of the package docstring: a one-row aggregate joined to every row (an
uncorrelated scalar subquery, as ``imp_core.sql.subqueries`` plans it).

An aggregation without GROUP BY over R has one group g that is partial in the sketch
instance unless its whole input is in the sketch, so rule 4 never applies and a test on
its value (``c_acctbal > avg(c_acctbal)``) fails rule 5. Yet g is whole in every case
that matters when the join J that brings it in is *essential* (every row of the root
derives from a row of J, so every result row carries A(g)) and J's other input X is
*covered* (every row of X carries a tuple of R):

- if the result over D is not empty, A(g) is in the sketch, so all of g's input is in
  the sketch instance (each input row's fragments are among A(g)) and g is the same row;
- if it is empty, the sketch is empty, D_P holds no tuple of R, X over D_P is empty, so
  is J and so is the result over D_P.

So g's columns are treated as exact. Requiring X (rather than g's input) covered keeps
the argument under SQL's semantics too, where an aggregate over no rows is one row.
"""

from __future__ import annotations

from dataclasses import replace

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
    TopK,
)
from imp_core.safety.facts import Context, Facts, Path


def essential_paths(root: PlanNode) -> frozenset[Path]:
    """Paths of the nodes every row of ``root`` derives from (its annotation includes one
    of theirs): the root, and down through every operator whose output rows each derive
    from a row of that input. Not: an aggregation without GROUP BY (SQL gives it a row
    over no input), a negated side (also EXCEPT's right), a NULL-supplying side, either
    input of a UNION."""
    out: set[Path] = set()

    def walk(node: PlanNode, path: Path) -> None:
        out.add(path)
        if isinstance(node, Aggregate) and not node.group_by:
            return
        if isinstance(node, SemiJoin):
            edges = (0,) if node.anti else (0, 1)
        elif isinstance(node, OuterJoin):
            edges = (0,) if node.kind == "left" else ()
        elif isinstance(node, SetOp):  # a UNION row derives from one input or the other
            edges = {"union": (), "intersect": (0, 1), "except": (0,)}[node.kind]
        else:
            edges = tuple(range(len(node.children())))
        for i in edges:
            walk(node.children()[i], path + (i,))

    walk(root, ())
    return frozenset(out)


def covered(node: PlanNode, table: str) -> bool:
    """Whether every row of ``node``'s result, over any instance, carries a tuple of
    ``table`` in its provenance."""
    if isinstance(node, Scan):
        return node.table == table
    if isinstance(node, (Select, Project, Distinct, TopK)):
        return covered(node.input, table)
    if isinstance(node, Aggregate):
        return bool(node.group_by) and covered(node.input, table)
    if isinstance(node, Join):
        return covered(node.left, table) or covered(node.right, table)
    if isinstance(node, SemiJoin):
        return covered(node.left, table) or (not node.anti and covered(node.right, table))
    if isinstance(node, OuterJoin):
        left = covered(node.left, table)
        return left and covered(node.right, table) if node.kind == "full" else left
    if isinstance(node, SetOp):
        left = covered(node.left, table)
        if node.kind == "union":
            return left and covered(node.right, table)
        return left or (node.kind == "intersect" and covered(node.right, table))
    return False


def _one_row(node: PlanNode) -> Aggregate | None:
    while isinstance(node, Project):
        node = node.input
    return node if isinstance(node, Aggregate) and not node.group_by else None


def pin_single_rows(node: Join, path: Path, left: Facts, right: Facts,
                    ctx: Context) -> tuple[Facts, Facts]:
    """``left`` and ``right`` with the taint of a one-row aggregate side removed where
    rule 9 proves it whole."""
    sides = [left, right]
    for i, (facts, other) in enumerate(((left, node.right), (right, node.left))):
        if not facts.tainted or _one_row(node.children()[i]) is None:
            continue
        if path not in ctx.essential or not covered(other, ctx.table):
            continue
        origins = sorted({t.origin for t in facts.tainted.values()})
        descs = [ctx.partial_aggs.pop(o) for o in origins if o in ctx.partial_aggs]
        desc = " and ".join(descs) or "the aggregation without GROUP BY"
        ctx.notes.append(f"{desc} has one row, joined to rows that each read "
                         f"{ctx.table}, and every result row derives from that join: if "
                         f"the result is not empty the row's whole input is in the sketch, "
                         f"so the sketch instance computes the same row; if it is empty the "
                         f"sketch is empty and so is the result over the sketch instance")
        sides[i] = replace(facts, tainted={})
    return sides[0], sides[1]
