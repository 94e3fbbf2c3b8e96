"""The grand-total rule (rule 13 of the package docstring): an aggregation whose grand
total always reaches the result holds its whole input in the sketch instance.

A grand-total row G (the group of an empty grouping set ``()`` of ROLLUP / CUBE /
GROUPING SETS, or the one row of an aggregation without GROUP BY) is annotated with the
union of the annotations of every input row of its aggregation. If, for every D, G
reaches the query's result whenever it exists, then every input row r over D has
A(r) ⊆ A(G) ⊆ S. By the invariant of the package docstring the input over D_P is then the
rows of D with A(r) ⊆ S, which is all of them, plus phantoms of shadows with A(g) ⊄ S, of
which there are none: the input over D_P equals the input over D, so does the
aggregation's result (every group complete), and so does every operator above it that
reads no other scan of R. Such a result is *complete*: no column of it is tainted, a
window over it is exact, and a top-k over it keeps the same k rows whatever is above.
An empty input gives no G, an empty input over D_P too (it has no rows with A(r) ⊆ S and
no shadows), and equal results.

That G reaches the result is proved bottom-up with a ``Total`` per aggregation assumed
whole: it survives a projection (one row per row), a window (which adds columns and whose
row annotation includes the row's own), a DISTINCT (its row merges into one that
survives) and a grouping-set Expand (its copies keep its values). It survives a top-k when
G sorts strictly ahead of the rows of every other grouping set on a prefix of the order
keys that are functions of the grouping set alone (``grouping()`` and ``grouping_id()``
are CASEs over the set column): ``ORDER BY grouping(a) + grouping(b) DESC`` puts the grand
total of ``ROLLUP(a, b)`` first. Every other operator (a selection, join, semi-join,
aggregation, set operation) may drop G, so the proof stops there.

``check_attribute`` first analyses without assumptions; if that fails, it assumes every
aggregation with a grand total whole, keeps the assumptions whose ``Total`` reaches the
root, and analyses again until they all do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import pyarrow as pa

from imp_core.plan.evaluate import evaluate
from imp_core.plan.expand import SET_TYPE, Expand
from imp_core.plan.nodes import Aggregate, PlanNode, Project, Scan, SortKey, TopK

Path = tuple[int, ...]


@dataclass(frozen=True)
class Total:
    """Columns of an aggregation's result that are functions of the grouping set.

    ``flags`` holds each such column's value in each of the ``sets`` grouping sets, row
    ``i`` for the set at position ``i``; ``whole`` holds the positions of the empty sets,
    whose row is the grand total.
    """

    sets: int
    whole: frozenset[int]
    flags: pa.Table

    def table(self) -> pa.Table:
        """``flags``, or a column-less stand-in of one row per set (constants evaluate
        over it)."""
        return self.flags if self.flags.num_columns else \
            pa.table({"_set": pa.array(range(self.sets), pa.int32())})


def candidates(root: PlanNode) -> frozenset[Path]:
    """Paths of the aggregations that have a grand-total row."""
    out: set[Path] = set()

    def walk(node: PlanNode, path: Path) -> None:
        if isinstance(node, Aggregate) and _whole_sets(node):
            out.add(path)
        for i, child in enumerate(node.children()):
            walk(child, path + (i,))

    walk(root, ())
    return frozenset(out)


def complete_paths(root: PlanNode, table: str, whole: frozenset[Path]) -> frozenset[Path]:
    """Paths of the nodes whose every scan of ``table`` lies below an aggregation of
    ``whole`` (the aggregation itself included): their results are complete."""
    out: set[Path] = set()

    def walk(node: PlanNode, path: Path) -> bool:
        kids = [walk(c, path + (i,)) for i, c in enumerate(node.children())]
        ok = path in whole or (all(kids) and not (isinstance(node, Scan)
                                                   and node.table == table))
        if ok:
            out.add(path)
        return ok

    walk(root, ())
    return frozenset(out)


def _whole_sets(node: Aggregate) -> frozenset[int]:
    ex = node.input
    if isinstance(ex, Expand) and ex.set_column in node.group_by:
        return frozenset(i for i, s in enumerate(ex.sets) if not s)
    return frozenset({0}) if not node.group_by else frozenset()


def at_aggregate(node: Aggregate) -> Total:
    """The ``Total`` of ``node``'s result: the set column's value is the set's position."""
    ex = node.input
    if isinstance(ex, Expand) and ex.set_column in node.group_by:
        n = len(ex.sets)
        return Total(n, _whole_sets(node),
                     pa.table({ex.set_column: pa.array(range(n), SET_TYPE)}))
    return Total(1, frozenset({0}), pa.table({}))


def through_project(node: Project, totals: Mapping[Path, Total]) -> dict[Path, Total]:
    """The totals after ``node``: each output column computed from flag columns alone
    (or constants) is evaluated once per grouping set."""
    out: dict[Path, Total] = {}
    for path, t in totals.items():
        table = t.table()
        flags: dict[str, pa.Array] = {}
        for ne in node.exprs:
            if not ne.expr.columns() <= set(t.flags.column_names):
                continue
            try:
                flags[ne.name] = evaluate(ne.expr, table)
            except Exception:  # noqa: BLE001 - a flag we cannot evaluate is no flag
                continue
        out[path] = Total(t.sets, t.whole, pa.table(flags))
    return out


def _before(a: Any, b: Any, key: SortKey) -> int:
    """-1 if a row with ``a`` sorts before one with ``b`` on ``key``, 1 if after, 0 if tied."""
    if a is None or b is None:
        if a is None and b is None:
            return 0
        first = key.effective_nulls_first
        return (-1 if first else 1) if a is None else (1 if first else -1)
    if a == b:
        return 0
    return -1 if (a > b) == key.descending else 1


def first_in(node: TopK, t: Total) -> bool:
    """Whether the grand total of ``t`` sorts strictly ahead of every other grouping set's
    rows in ``node``'s order, on the order keys that are flag columns."""
    if node.k < 1:
        return False
    prefix = []
    for key in node.order:
        if key.column not in t.flags.column_names:
            break
        prefix.append(key)
    values = {k.column: t.flags.column(k.column).to_pylist() for k in prefix}
    g = next(iter(t.whole))
    for j in range(t.sets):
        if j in t.whole:
            continue
        order = [_before(values[k.column][g], values[k.column][j], k) for k in prefix]
        if next((o for o in order if o != 0), 0) != -1:
            return False
    return True


def through_topk(node: TopK, totals: Mapping[Path, Total]) -> dict[Path, Total]:
    """The totals whose grand total ``node`` keeps."""
    return {p: t for p, t in totals.items() if first_in(node, t)}
