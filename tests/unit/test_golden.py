"""Golden tests: the worked examples of the IMP paper, reproduced exactly.

- Example 1.1 / 1.2 / 4.2 (Fig. 1): Q_Top over ``sales`` partitioned on price.
- Example 5.1 / Fig. 5: the incremental operators one by one on R ⋈ S with HAVING.
- Example 5.2: the merge operator μ alone.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pyarrow as pa
from pyroaring import BitMap

from imp_core.engine.annotation import Annotation
from imp_core.engine.operators.aggregate import AggregateOp
from imp_core.engine.operators.base import ProjectOp, ScanOp, SelectOp, TableDelta
from imp_core.engine.operators.join import JoinOp
from imp_core.engine.operators.merge import MergeOp
from imp_core.engine.pipeline import IncrementalQuery
from imp_core.engine.zset import DeltaBatch
from imp_core.oracle.reference import reference_capture, restrict_to_sketch
from imp_core.plan.expr import BinaryOp, ColumnRef, Literal
from imp_core.plan.nodes import (
    AggCall,
    Aggregate,
    Field,
    Join,
    NamedExpr,
    Project,
    QueryPlan,
    Scan,
    Select,
)
from imp_core.sketch.partition import PartitionSet, RangePartition

# -- Example 1.1 / 1.2 ------------------------------------------------------------------

SALES_SCHEMA = pa.schema([("sid", pa.int64()), ("brand", pa.string()),
                          ("productName", pa.string()), ("price", pa.int64()),
                          ("numSold", pa.int64())])

SALES = [
    (1, "Lenovo", "ThinkPad T14s Gen 2", 349, 1),
    (2, "Lenovo", "ThinkPad T14s Gen 2", 449, 2),
    (3, "Apple", "MacBook Air 13-inch", 1199, 1),
    (4, "Apple", "MacBook Pro 14-inch", 3875, 1),
    (5, "Dell", "Dell XPS 13 Laptop", 1345, 1),
    (6, "HP", "HP ProBook 450 G9", 999, 4),
    (7, "HP", "HP ProBook 550 G9", 899, 1),
]
S8 = (8, "HP", "HP ProBook 650 G10", 1299, 1)

# ρ1..ρ4 of φ_price are global fragment ids 0..3
RHO1, RHO2, RHO3, RHO4 = 0, 1, 2, 3


def sales_table(rows) -> pa.Table:
    return pa.Table.from_pylist([dict(zip(SALES_SCHEMA.names, r)) for r in rows],
                                schema=SALES_SCHEMA)


def q_top() -> QueryPlan:
    """SELECT brand, SUM(price * numSold) AS rev FROM sales GROUP BY brand
    HAVING SUM(price * numSold) > 5000"""
    scan = Scan("sales", ("brand", "price", "numSold"),
                (Field("sales.brand", pa.string()), Field("sales.price", pa.int64()),
                 Field("sales.numSold", pa.int64())))
    proj = Project(scan, (NamedExpr("sales.brand", ColumnRef("sales.brand")),
                          NamedExpr("_a0", BinaryOp("*", ColumnRef("sales.price"),
                                                    ColumnRef("sales.numSold")))))
    agg = Aggregate(proj, ("sales.brand",), (AggCall("sum", "_a0", "_agg0"),))
    having = Select(agg, BinaryOp(">", ColumnRef("_agg0"), Literal(5000, pa.int32())))
    root = Project(having, (NamedExpr("brand", ColumnRef("sales.brand")),
                            NamedExpr("rev", ColumnRef("_agg0"))))
    return QueryPlan("SELECT brand, SUM(price * numSold) AS rev FROM sales GROUP BY brand "
                     "HAVING SUM(price * numSold) > 5000", root)


def phi_price() -> PartitionSet:
    return PartitionSet((RangePartition.from_ranges(
        "sales", "price", pa.int64(), [(1, 600), (601, 1000), (1001, 1500), (1501, 10000)]),))


def test_example_1_1_and_1_2_sales():
    plan, parts = q_top(), phi_price()
    q = IncrementalQuery(plan, parts)

    # Example 1.1: capture (the whole table as one insertion delta)
    delta = q.apply({"sales": TableDelta.inserts(sales_table(SALES))})
    assert set(delta.added) == {RHO3, RHO4} and not delta.removed
    assert set(q.sketch().fragments) == {RHO3, RHO4}
    assert q.result().to_counter() == Counter({(("Apple", 5074), (RHO3, RHO4)): 1})
    # adjacent ρ3, ρ4 merge into one range; ρ4 is the last range, so it is open above
    assert q.sketch().predicate("sales") == "price >= 1001"
    ref = reference_capture(plan, {"sales": sales_table(SALES)}, parts)
    assert ref.sketch == q.sketch() and ref.rows() == Counter({("Apple", 5074): 1})
    # the sketch is sufficient: the query over its data returns the same result
    small = restrict_to_sketch({"sales": sales_table(SALES)}, q.sketch())
    assert reference_capture(plan, small, parts).rows() == ref.rows()

    # Example 4.2: the annotated delta of s8 is ⟨s8, {ρ3}⟩
    scan = next(o for o in q.operators if isinstance(o, ScanOp))
    ann = scan.from_table(TableDelta.inserts(sales_table([S8])))
    assert ann.to_counter() == Counter({(("HP", 1299, 1), (RHO3,)): 1})

    # Example 1.2: inserting s8 makes the sketch stale; maintenance adds ρ2
    delta = q.apply({"sales": TableDelta.inserts(sales_table([S8]))})
    assert set(delta.added) == {RHO2} and not delta.removed
    assert set(q.sketch().fragments) == {RHO2, RHO3, RHO4}
    assert q.result().to_counter() == Counter({
        (("Apple", 5074), (RHO3, RHO4)): 1,
        (("HP", 6194), (RHO2, RHO3)): 1,
    })
    assert q.sketch().predicate("sales") == "price >= 601"
    ref = reference_capture(plan, {"sales": sales_table(SALES + [S8])}, parts)
    assert ref.sketch == q.sketch()
    assert ref.rows() == Counter({("Apple", 5074): 1, ("HP", 6194): 1})

    # the stale sketch misses HP; the maintained one does not
    stale = restrict_to_sketch({"sales": sales_table(SALES + [S8])},
                               reference_capture(plan, {"sales": sales_table(SALES)},
                                                 parts).sketch)
    assert reference_capture(plan, stale, parts).rows() == Counter({("Apple", 5074): 1})

    # and deleting s8 again takes ρ2 back out
    delta = q.apply({"sales": TableDelta.deletes(sales_table([S8]))})
    assert set(delta.removed) == {RHO2} and not delta.added
    assert set(q.sketch().fragments) == {RHO3, RHO4}


# -- Example 5.1 / Fig. 5 -----------------------------------------------------------------

R_SCHEMA = pa.schema([("a", pa.int64()), ("b", pa.int64())])
S_SCHEMA = pa.schema([("c", pa.int64()), ("d", pa.int64())])
F1, F2, G1, G2 = 0, 1, 2, 3  # φ_a = {f1, f2}, φ_c = {g1, g2} as global ids


def fig5_plan() -> QueryPlan:
    """SELECT a, sum(c) AS sc FROM (SELECT a, b FROM R WHERE a > 3) JOIN S ON b = d
    GROUP BY a HAVING sum(c) > 5"""
    r = Scan("R", ("a", "b"), (Field("R.a", pa.int64()), Field("R.b", pa.int64())))
    s = Scan("S", ("c", "d"), (Field("S.c", pa.int64()), Field("S.d", pa.int64())))
    sel = Select(r, BinaryOp(">", ColumnRef("R.a"), Literal(3, pa.int64())))
    join = Join(sel, s, BinaryOp("=", ColumnRef("R.b"), ColumnRef("S.d")))
    agg = Aggregate(join, ("R.a",), (AggCall("sum", "S.c", "sc"),))
    having = Select(agg, BinaryOp(">", ColumnRef("sc"), Literal(5, pa.int64())))
    root = Project(having, (NamedExpr("a", ColumnRef("R.a")), NamedExpr("sc", ColumnRef("sc"))))
    return QueryPlan("fig5", root)


def fig5_partitions() -> PartitionSet:
    return PartitionSet((
        RangePartition.from_ranges("R", "a", pa.int64(), [(1, 5), (6, 10)]),
        RangePartition.from_ranges("S", "c", pa.int64(), [(1, 6), (7, 15)]),
    ))


def _record(q: IncrementalQuery) -> dict[str, list[DeltaBatch]]:
    """Wrap every operator of ``q`` so that each output delta is recorded by kind."""
    seen: dict[str, list[DeltaBatch]] = {}

    for op in q.operators:
        if isinstance(op, ScanOp):
            inner = op.from_table

            def from_table(delta, _inner=inner, _op=op):
                out = _inner(delta)
                seen.setdefault(f"scan {_op.scan.table}", []).append(out)
                return out

            op.from_table = from_table
        else:
            inner = op.step
            label = {SelectOp: "select", JoinOp: "join", AggregateOp: "aggregate",
                     ProjectOp: "project"}[type(op)]
            if label == "select":
                label = "having" if isinstance(op.node.input, Aggregate) else "select"

            def step(inputs, _inner=inner, _label=label):
                out = _inner(inputs)
                seen.setdefault(_label, []).append(out)
                return out

            op.step = step
    return seen


def _group_state(agg: AggregateOp, key: int) -> tuple[int, int, set, dict]:
    """(SUM, CNT, P, F_g) of a group, read from the operator's state."""
    g = agg.groups.gid_of((key,))
    assert g is not None
    fg = {}
    for k, c in zip(agg.frags.keys.tolist(), agg.frags.counts.tolist()):
        gid, frag = divmod(k, agg.frags.P)
        if gid == g and c:
            fg[frag] = c
    return int(agg.sums[0][g]), int(agg.cnt[g]), set(agg.frags.sketch(g)), fg


def _merge_state(q: IncrementalQuery) -> dict[int, int]:
    return {i: int(c) for i, c in enumerate(q.merge.counts) if c}


def test_figure_5_operator_by_operator():
    plan, parts = fig5_plan(), fig5_partitions()
    r0 = pa.table({"a": [1, 9], "b": [7, 9]}, schema=R_SCHEMA)
    s0 = pa.table({"c": [6, 7], "d": [9, 8]}, schema=S_SCHEMA)
    q = IncrementalQuery(plan, parts)

    # bootstrap: the sketch before the delta, P_R = {f2}, P_S = {g1}
    q.apply({"R": TableDelta.inserts(r0), "S": TableDelta.inserts(s0)})
    assert q.sketch().table_fragments("R") == [1] and q.sketch().table_fragments("S") == [0]
    assert set(q.sketch().fragments) == {F2, G1}
    assert q.result().to_counter() == Counter({((9, 6), (F2, G1)): 1})
    assert reference_capture(plan, {"R": r0, "S": s0}, parts).sketch == q.sketch()

    (agg,) = [o for o in q.operators if isinstance(o, AggregateOp)]
    # S[9] = (SUM = 6, CNT = 1, P = {f2, g1}, F_9 = {f2: 1, g1: 1})
    assert _group_state(agg, 9) == (6, 1, {F2, G1}, {F2: 1, G1: 1})
    assert agg.groups.gid_of((5,)) is None
    assert _merge_state(q) == {F2: 1, G1: 1}  # μ's S

    # ΔR = {+⟨(5, 8), {f1}⟩}
    seen = _record(q)
    dr = pa.table({"a": [5], "b": [8]}, schema=R_SCHEMA)
    delta = q.apply({"R": TableDelta.inserts(dr)})

    def only(label):
        (batch,) = seen[label]
        return batch.to_counter()

    assert only("scan R") == Counter({((5, 8), (F1,)): 1})  # table access
    assert "scan S" not in seen  # ΔS = ∅
    assert only("select") == Counter({((5, 8), (F1,)): 1})  # σ_{a>3}
    assert only("join") == Counter({((5, 8, 7, 8), (F1, G2)): 1})  # ⋈_{b=d}
    assert only("aggregate") == Counter({((5, 7), (F1, G2)): 1})  # γ_{sum(c); a}
    assert only("having") == Counter({((5, 7), (F1, G2)): 1})  # σ_{sum(c)>5}
    assert only("project") == Counter({((5, 7), (F1, G2)): 1})

    # aggregation state: S'[9] unchanged, S'[5] = (7, 1, {f1, g2}, {f1: 1, g2: 1})
    assert _group_state(agg, 9) == (6, 1, {F2, G1}, {F2: 1, G1: 1})
    assert _group_state(agg, 5) == (7, 1, {F1, G2}, {F1: 1, G2: 1})
    # μ: S' = {f1: 1, f2: 1, g1: 1, g2: 1}; sketch delta +{f1, g2}
    assert _merge_state(q) == {F1: 1, F2: 1, G1: 1, G2: 1}
    assert set(delta.added) == {F1, G2} and not delta.removed
    assert q.sketch().table_fragments("R") == [0, 1] and q.sketch().table_fragments("S") == [0, 1]

    r1 = pa.concat_tables([r0, dr])
    ref = reference_capture(plan, {"R": r1, "S": s0}, parts)
    assert ref.sketch == q.sketch()
    assert q.result().to_counter() == Counter(ref.bag.items) == Counter({
        ((9, 6), (F2, G1)): 1, ((5, 7), (F1, G2)): 1})


def test_figure_5_deleting_the_tuple_again_reverts_everything():
    plan, parts = fig5_plan(), fig5_partitions()
    r0 = pa.table({"a": [1, 9], "b": [7, 9]}, schema=R_SCHEMA)
    s0 = pa.table({"c": [6, 7], "d": [9, 8]}, schema=S_SCHEMA)
    dr = pa.table({"a": [5], "b": [8]}, schema=R_SCHEMA)
    q = IncrementalQuery(plan, parts)
    q.apply({"R": TableDelta.inserts(r0), "S": TableDelta.inserts(s0)})
    q.apply({"R": TableDelta.inserts(dr)})
    delta = q.apply({"R": TableDelta.deletes(dr)})
    assert set(delta.removed) == {F1, G2} and not delta.added
    assert set(q.sketch().fragments) == {F2, G1}
    assert _merge_state(q) == {F2: 1, G1: 1}
    assert q.result().to_counter() == Counter({((9, 6), (F2, G1)): 1})


# -- Example 5.2 -----------------------------------------------------------------------

def _tuples(names: list[str], sets: list[tuple[int, ...]], weight: int) -> DeltaBatch:
    data = pa.table({"t": pa.array(names, pa.string())})
    return DeltaBatch.of(data, weight, Annotation.from_sets(sets))


def test_example_5_2_merge_operator():
    merge = MergeOp(4)  # ρ1..ρ4 = ids 0..3
    # t1, t2 have ρ2 in their sketch, t3 has ρ1 and ρ2
    added, removed = merge.step(_tuples(["t1", "t2", "t3"],
                                        [(RHO2,), (RHO2,), (RHO1, RHO2)], 1))
    assert added == BitMap([RHO1, RHO2]) and not removed
    assert merge.sketch() == BitMap([RHO1, RHO2])
    assert merge.counts.tolist() == [1, 3, 0, 0]  # S[ρ1] = 1, S[ρ2] = 3
    # deleting t3: S'[ρ1] = 0, S'[ρ2] = 2 and μ returns -{ρ1}
    added, removed = merge.step(_tuples(["t3"], [(RHO1, RHO2)], -1))
    assert merge.counts.tolist() == [0, 2, 0, 0]
    assert removed == BitMap([RHO1]) and not added
    assert merge.sketch() == BitMap([RHO2])
    # an empty delta changes nothing
    assert merge.step(_tuples([], [], 1)) == (BitMap(), BitMap())
    # the merge in Ex. 5.1: S = {f2: 1, g1: 1}; +⟨t, {f1, g2}⟩ gives +{f1, g2}
    mu = MergeOp(4)
    mu.step(_tuples(["(9, 6)"], [(F2, G1)], 1))
    added, removed = mu.step(_tuples(["(5, 7)"], [(F1, G2)], 1))
    assert added == BitMap([F1, G2]) and not removed
    assert mu.counts.tolist() == [1, 1, 1, 1]
    assert np.array_equal(mu.counts, np.ones(4, dtype=np.int64))
