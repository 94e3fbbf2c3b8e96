"""Sketch reuse (``imp_core.sketch.reuse``): which other SQL a query's sketch may answer.

Accepted: the same plan, the query used as a subquery, a stronger condition over its
result (a tighter HAVING constant, a filter on top), a smaller LIMIT in the same order.
Refused, with the reason: anything reading a sketched table outside the query's result
(counting it, joining the result with it again), a stronger WHERE below an aggregation,
other aggregates, a larger LIMIT. The property tests run every accepted pair (P, P2) on
random tables with the reference evaluator: P2 over the rows of P's accurate sketch (or
of a superset over which P is still exact) gives P2's full result; and the canonical
form the rules compare is equivalent to the plan.
"""

from __future__ import annotations

import os
import random
from collections import Counter

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyroaring import BitMap
from strategies import SEEDS

from imp_core.oracle.reference import reference_capture, restrict_to_sketch
from imp_core.plan.canonical import canonical
from imp_core.plan.implication import implies
from imp_core.plan.nodes import PlanNode, QueryPlan
from imp_core.safety import check_attribute
from imp_core.sketch.partition import PartitionSet, RangePartition
from imp_core.sketch.reuse import (
    SAME_PLAN,
    SMALLER_LIMIT,
    STRONGER_SELECTION,
    SUBQUERY,
    UNFILTERED,
    find_reusable,
    reuse_decision,
)
from imp_core.sketch.sketch import Sketch
from imp_core.sql import plan_sql

I64 = pa.int64()
SCALE = float(os.environ.get("IMP_TEST_SCALE", "1"))
SETTINGS = settings(max_examples=int(150 * SCALE), deadline=None)
# t: the sketched table (id unique); u: another one
COLUMNS = {"t": ("id", "a", "b", "c"), "u": ("aa", "bb")}
DOMAINS = {"t": {"b": (0, None)}}  # sums of b grow with rows: more attributes are safe
CATALOG = {name: pa.schema([(c, I64) for c in cols]) for name, cols in COLUMNS.items()}

HAVING = "SELECT a, sum(b) AS s, count(*) AS n FROM t GROUP BY a HAVING sum(b) > 10"
TOP = "SELECT a, sum(b) AS s FROM t GROUP BY a ORDER BY s DESC, a LIMIT 3"
# its HAVING reads a column its result drops (as q_groups_1000's)
NARROW = "SELECT a, count(*) AS n FROM t GROUP BY a HAVING sum(b) > 10"


def plan(sql: str) -> QueryPlan:
    return plan_sql(sql, CATALOG)


def decide(p: str, p2: str, tables: tuple[str, ...] = ("t",), safe: bool = True):
    return reuse_decision("q", plan(p), tables, plan(p2), proven_safe=safe)


# -- the rules on examples -------------------------------------------------------------------

@pytest.mark.parametrize("p, p2, rule", [
    (HAVING, HAVING, SAME_PLAN),
    (HAVING, "-- another text of the same query\n" + HAVING.lower(), SAME_PLAN),
    (HAVING, f"SELECT count(*) AS m FROM ({HAVING}) x", SUBQUERY),
    (HAVING, f"SELECT x.a, x.s, u.bb FROM ({HAVING}) x JOIN u ON x.a = u.aa", SUBQUERY),
    (HAVING, f"SELECT DISTINCT x.n FROM ({HAVING}) x", SUBQUERY),
    (HAVING, HAVING.replace("> 10", "> 20"), STRONGER_SELECTION),
    (HAVING, HAVING.replace("> 10", ">= 11"), STRONGER_SELECTION),
    (HAVING, HAVING.replace("> 10", "= 12"), STRONGER_SELECTION),
    (HAVING, HAVING.replace("> 10", "BETWEEN 11 AND 30"), STRONGER_SELECTION),
    (HAVING, f"SELECT * FROM ({HAVING}) x WHERE x.n >= 2", STRONGER_SELECTION),
    (HAVING, f"SELECT * FROM ({HAVING}) x WHERE x.a = 3", STRONGER_SELECTION),  # pushed down
    (HAVING, HAVING.replace("> 10", "> 10 AND count(*) > 1"), STRONGER_SELECTION),
    ("SELECT id, a FROM t WHERE b > 2", "SELECT id, a FROM t WHERE b > 3 AND a = 1",
     STRONGER_SELECTION),  # no aggregation: the WHERE is over the result
    (NARROW, f"SELECT * FROM ({NARROW}) x WHERE x.n > 2", STRONGER_SELECTION),
    (NARROW, f"SELECT count(*) AS m FROM ({NARROW}) x", SUBQUERY),
    (TOP, TOP.replace("LIMIT 3", "LIMIT 2"), SMALLER_LIMIT),
    (TOP, f"SELECT x.a FROM ({TOP}) x WHERE x.s > 0", SUBQUERY),
    (HAVING, "SELECT count(*) AS m FROM u", UNFILTERED),
])
def test_accepted(p, p2, rule):
    got = decide(p, p2)
    assert got.allowed, got.reason
    assert rule in got.rules, got
    assert got.reason


@pytest.mark.parametrize("p, p2, table, why", [
    # issue 28: another query's sketch applied to a count of its table
    (HAVING, "SELECT count(*) AS n FROM t", "t", ""),
    # a stronger WHERE below the aggregation: a group q keeps may lose rows
    ("SELECT a, sum(b) AS s FROM t WHERE c < 100 GROUP BY a",
     "SELECT a, sum(b) AS s FROM t WHERE c < 50 GROUP BY a", "t", "where q has"),
    # q's result joined with the sketched table again
    (HAVING, f"SELECT x.a, t.b FROM ({HAVING}) x JOIN t ON x.a = t.id", "t", ""),
    # other aggregates over the same groups
    (HAVING, HAVING.replace("count(*)", "max(c)"), "t", "where q has"),
    (HAVING, HAVING.replace("> 10", "> 5"), "t", "not proven to imply"),
    (HAVING, HAVING.replace("> 10", "< 20"), "t", "not proven to imply"),
    (TOP, TOP.replace("LIMIT 3", "LIMIT 4"), "t", "LIMIT 4 is more than q's 3"),
    (TOP, TOP.replace("s DESC", "s ASC"), "t", "ordered otherwise"),
    # a stronger HAVING below q's top-k: the top 3 of fewer groups reach beyond q's 3
    (TOP.replace("GROUP BY a", "GROUP BY a HAVING sum(b) > 0"),
     TOP.replace("GROUP BY a", "GROUP BY a HAVING sum(b) > 5"), "t", ""),
    # a stronger HAVING on a column q's result drops: its values over the sketch's rows
    # are not known to be the full ones (only those of the groups q keeps are)
    (NARROW, NARROW.replace("> 10", "> 20"), "t", "result does not keep"),
])
def test_refused(p, p2, table, why):
    got = decide(p, p2)
    assert not got.allowed and not got.rules
    assert got.reason.startswith("the sketch of q is for another query; "
                                 f"{table} is read outside q's plan"), got.reason
    assert why in got.reason


def test_refused_when_the_sketch_is_not_proven_safe():
    """A query registered with ``force``: its own plan only (as registered)."""
    assert decide(HAVING, HAVING, safe=False).allowed
    got = decide(HAVING, HAVING.replace("> 10", "> 20"), safe=False)
    assert not got.allowed and "registered with force" in got.reason


def test_find_reusable_prefers_the_same_plan_and_lists_refusals():
    stronger = HAVING.replace("> 10", "> 20")
    candidates = [("a_top", plan(TOP), ["t"], True), ("b_having", plan(HAVING), ["t"], True),
                  ("c_same", plan(stronger), ["t"], True), ("d_u", plan("SELECT * FROM u"),
                                                            ["u"], True)]
    chosen, refused = find_reusable(candidates, plan(stronger))
    assert chosen is not None and chosen.query == "c_same" and chosen.rules == (SAME_PLAN,)
    chosen, refused = find_reusable(candidates[:2] + candidates[3:], plan(stronger))
    assert chosen is not None and chosen.query == "b_having"
    assert [d.query for d in refused] == ["a_top"]
    chosen, refused = find_reusable(candidates, plan("SELECT count(*) AS n FROM t"))
    assert chosen is None  # d_u's sketch filters nothing this query reads: not offered
    assert [d.query for d in refused] == ["a_top", "b_having", "c_same"]


# -- predicate implication -------------------------------------------------------------------

def _predicate(where: str, table: str = "t"):
    p = plan(f"SELECT * FROM {table} WHERE {where}").root
    select = next(n for n in canonical(p).walk() if type(n).__name__ == "Select")
    return select.predicate, select.input.schema


@pytest.mark.parametrize("strong, weak, expected", [
    ("b > 5", "b > 3", True), ("b > 3", "b > 5", False), ("b >= 4", "b > 3", True),
    ("b = 4", "b > 3", True), ("b = 3", "b > 3", False), ("b = 3", "b >= 3", True),
    ("b IN (4, 5)", "b BETWEEN 4 AND 6", True), ("b IN (4, 7)", "b BETWEEN 4 AND 6", False),
    ("b = 4", "b IN (1, 4)", True), ("b IN (1, 4)", "b IN (1, 4, 5)", True),
    ("b BETWEEN 2 AND 3", "b >= 1 AND b < 4", True), ("b < 3", "b <= 3", True),
    ("b > 3 AND c < 2", "c < 5", True), ("b > 3 OR c < 2", "b > 3", False),
    ("c > 5", "b > 3", False), ("b + 1 > 5", "b + 1 > 4", True),
    # a decimal constant against an integer one: they may round differently
    ("b > 4.5", "b > 4", False), ("b >= 4.5", "b >= 4.5", True),
    ("b <> 3", "b <> 3", True), ("b <> 3", "b <> 4", False),
])
def test_implication(strong, weak, expected):
    s, schema = _predicate(strong)
    w, _ = _predicate(weak)
    assert implies(s, w, schema) is expected


def test_implication_needs_exact_constants_for_a_strict_bound():
    """``f >= 0.6`` implies ``f > 0.5`` in exact arithmetic, but Spark compares a double
    column after casting the decimal constants to doubles, which may round two distinct
    constants to one: only a bound of the same strictness is implied then."""
    schema = pa.schema([("f", pa.float64())])
    catalog = {"w": schema}

    def pred(where: str):
        root = canonical(plan_sql(f"SELECT * FROM w WHERE {where}", catalog).root)
        node = next(n for n in root.walk() if type(n).__name__ == "Select")
        return node.predicate, node.input.schema

    strong, fields = pred("f >= 0.6")
    assert not implies(strong, pred("f > 0.5")[0], fields)
    assert implies(strong, pred("f >= 0.5")[0], fields)
    assert implies(pred("f > 0.6")[0], pred("f > 0.5")[0], fields)


# -- random plans, random tables ---------------------------------------------------------------

def _tables(rng: np.random.Generator) -> dict[str, pa.Table]:
    n, m = int(rng.integers(0, 40)), int(rng.integers(0, 8))

    def ints(lo: int, hi: int, size: int, nulls: float = 0.0) -> pa.Array:
        values = rng.integers(lo, hi, size)
        return pa.array(values, I64, mask=rng.random(size) < nulls)

    return {"t": pa.table({"id": pa.array(np.arange(n), I64), "a": ints(0, 6, n),
                           "b": ints(0, 10, n, 0.1), "c": ints(0, 20, n, 0.1)}),
            "u": pa.table({"aa": ints(0, 6, m), "bb": ints(0, 5, m)})}


_OPS = (">", ">=", "<", "<=", "=")
# queries with a WHERE only: (SQL, the expression P's condition is on, another one, the
# columns of the result as a subquery x)
_FILTERS = {
    "spj": ("SELECT id, a, b FROM t WHERE {where}", "b", "a", ("x.id", "x.a", "x.b")),
    "join": ("SELECT t.id, t.a, u.bb FROM t JOIN u ON t.a = u.aa WHERE {where}", "t.b", "u.bb",
             ("x.id", "x.a", "x.bb")),
    "distinct": ("SELECT DISTINCT a, c FROM t WHERE {where}", "b", "c", ("x.a", "x.c")),
}


def _pair(r: random.Random) -> tuple[str, str]:
    """A random query P and a random other query P2 related to it (many accepted)."""
    def cond(expr: str) -> str:  # constants about the expression's range of values
        top = {"sum(b)": 60, "count(*)": 10, "c": 20, "x.s": 60, "x.n": 10, "x.c": 20}
        return f"{expr} {r.choice(_OPS)} {r.randint(0, top.get(expr, 8))}"

    kind = r.choice(("having", "top", *_FILTERS))
    if kind == "having":
        where = f" WHERE {cond('c')}" if r.random() < 0.3 else ""
        wide = r.random() < 0.6  # else the HAVING reads a column the result drops
        outputs = "a, sum(b) AS s, count(*) AS n" if wide else "a, count(*) AS n"

        def template(having: str, w: str = where) -> str:
            return f"SELECT {outputs} FROM t{w} GROUP BY a HAVING {having}"
        p = template(cond("sum(b)"))
        own = [template(cond("sum(b)")), template(f"{cond('sum(b)')} AND {cond('count(*)')}"),
               template(cond("sum(b)"), f" WHERE {cond('c')}")]
        cols = ("x.a", "x.s", "x.n") if wide else ("x.a", "x.n")
    elif kind == "top":
        def template(k: int) -> str:
            return f"SELECT a, sum(b) AS s FROM t GROUP BY a ORDER BY s DESC, a LIMIT {k}"
        p = template(r.randint(1, 5))
        own = [template(r.randint(1, 6))]
        cols = ("x.a", "x.s")
    else:
        sql, first, second, cols = _FILTERS[kind]
        p = sql.format(where=cond(first))
        own = [sql.format(where=cond(first)),
               sql.format(where=f"{cond(first)} AND {cond(second)}")]
    other = r.choice(cols)
    wrapped = [f"SELECT * FROM ({p}) x WHERE {cond(r.choice(cols))}",
               f"SELECT count(*) AS m FROM ({p}) x",
               f"SELECT {other}, u.bb AS ubb FROM ({p}) x JOIN u ON {other} = u.aa",
               f"SELECT {other}, t.c AS tc FROM ({p}) x JOIN t ON {other} = t.id",
               f"SELECT {other}, count(*) AS m FROM ({p}) x GROUP BY {other}",
               f"SELECT * FROM ({p}) x ORDER BY {other} LIMIT {r.randint(1, 4)}",
               "SELECT count(*) AS m FROM t", "SELECT a, sum(c) AS s FROM t GROUP BY a"]
    if r.random() < 0.1:
        return p, p
    return p, r.choice(own if r.random() < 0.5 else wrapped)


def _rows(node: PlanNode, data: dict[str, pa.Table], parts: PartitionSet) -> Counter:
    return reference_capture(node, data, parts).rows()


@SETTINGS
@given(seed=SEEDS, attribute=st.sampled_from(["a", "b", "c", "id"]),
       bounds=st.lists(st.integers(0, 12), unique=True, max_size=6).map(sorted))
def test_accepted_pairs_give_the_full_result_over_the_sketch(seed, attribute, bounds):
    p_sql, p2_sql = _pair(random.Random(seed))
    p, p2 = plan(p_sql), plan(p2_sql)
    if not check_attribute(p, "t", attribute, DOMAINS, COLUMNS).safe:
        return  # no sketch of P on it is ever used
    decision = reuse_decision("q", p, ["t"], p2)
    if not decision.allowed:
        return
    data = _tables(np.random.default_rng(seed))
    parts = PartitionSet((RangePartition.from_bounds("t", attribute, I64, bounds),))
    sketch = reference_capture(p, data, parts).sketch
    full = _rows(p2.root, data, parts)
    cut = restrict_to_sketch(data, sketch)
    assert _rows(p.root, cut, parts) == _rows(p.root, data, parts)  # the premise: safety
    assert _rows(p2.root, cut, parts) == full, (p_sql, p2_sql, decision)
    # a superset of the sketch (as the fitted filter reads) over which P stays exact
    more = Sketch(parts, BitMap(sketch.fragments) | BitMap(
        random.Random(seed).sample(range(parts.size), parts.size // 2)))
    wider = restrict_to_sketch(data, more)
    if _rows(p.root, wider, parts) == _rows(p.root, data, parts):
        assert _rows(p2.root, wider, parts) == full, (p_sql, p2_sql, decision)


def test_the_random_pairs_exercise_every_rule():
    """The property test above is only as good as its accepted pairs: each rule accepts
    some, and many pairs are refused."""
    seen: Counter = Counter()
    for seed in range(800):
        p, p2 = _pair(random.Random(seed))
        decision = reuse_decision("q", plan(p), ["t"], plan(p2))
        seen.update(decision.rules or ("refused",))
    for rule in (SAME_PLAN, SUBQUERY, STRONGER_SELECTION, SMALLER_LIMIT, "refused"):
        assert seen[rule] >= 8, seen


@SETTINGS
@given(seed=SEEDS, lift=st.booleans())
def test_the_canonical_form_is_equivalent(seed, lift):
    r = random.Random(seed)
    data = _tables(np.random.default_rng(seed))
    parts = PartitionSet((RangePartition.from_bounds("t", "a", I64, [2, 4]),))
    for sql in _pair(r):
        root = plan(sql).root
        same = canonical(root, lift)
        assert same.column_names == root.column_names
        assert _rows(same, data, parts) == _rows(root, data, parts), sql
