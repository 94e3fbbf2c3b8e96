"""Uncorrelated EXISTS / NOT EXISTS cost what they are, a yes/no over the subquery: the
memory estimate counts no outer x inner pairs, the incremental operator and the
reference evaluator never form them, and over random updates (the subquery flipping
between empty and not) the maintained sketch and result equal the recapture."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from imp_core.embedded.api import Engine
from imp_core.estimate.memory import estimate_plan
from imp_core.estimate.table_stats import ColumnStats, TableStats
from imp_core.plan.nodes import SemiJoin
from imp_core.sql import plan_sql

CATALOG = {"o": pa.schema([("k", pa.int64()), ("p", pa.int64()), ("s", pa.string())]),
           "l": pa.schema([("lk", pa.int64()), ("q", pa.int64())])}
QUERIES = {
    "exists": "SELECT s, count(*) AS c FROM o WHERE EXISTS (SELECT * FROM l WHERE q > 7) "
              "GROUP BY s",
    "not_exists": "SELECT k, p FROM o WHERE NOT EXISTS (SELECT * FROM l WHERE q > 7)",
    "exists_join": "SELECT o1.s, sum(o1.p) AS sp FROM o o1 JOIN l ON o1.k = l.lk "
                   "WHERE NOT EXISTS (SELECT * FROM o o2 WHERE o2.p > 90) GROUP BY o1.s",
}


def _semi_joins(root) -> list[SemiJoin]:
    return [n for n in root.walk() if isinstance(n, SemiJoin)]


@pytest.mark.parametrize("name", list(QUERIES))
def test_the_estimate_counts_no_pairs(name):
    plan = plan_sql(QUERIES[name], CATALOG)
    semis = _semi_joins(plan.root)
    assert semis and all(s.uncorrelated for s in semis)
    big = 10**7
    stats = {"o": TableStats(big, {"k": ColumnStats(big, 0, big), "p": ColumnStats(100, 0, 99),
                                   "s": ColumnStats(5)}),
             "l": TableStats(4 * big, {"lk": ColumnStats(big, 0, big),
                                       "q": ColumnStats(10, 0, 9)})}
    est = estimate_plan(plan.root, stats, sketched=("o",))
    semi_ops = [op for op in est.operators if isinstance(op.node, SemiJoin)]
    assert semi_ops and all(op.pairs == 0 for op in semi_ops), est
    # what is estimated is a pass over each side, far below outer x inner pairs
    assert all(op.work_bytes < 10**12 for op in semi_ops)


def test_a_correlated_condition_is_not_taken_for_uncorrelated():
    plan = plan_sql("SELECT k FROM o WHERE EXISTS (SELECT * FROM l WHERE l.q > o.p)", CATALOG)
    assert not any(s.uncorrelated for s in _semi_joins(plan.root))


def test_the_reference_forms_no_pairs_over_large_sides():
    """40,000 x 40,000 would be 1.6 billion pairs (tens of GiB); it takes moments."""
    n = 40_000
    rng = np.random.default_rng(1)
    eng = Engine()
    eng.create_table("o", pa.table({"k": np.arange(n), "p": rng.integers(0, 100, n),
                                    "s": [f"s{i % 5}" for i in range(n)]}), key="k")
    eng.create_table("l", pa.table({"lk": np.arange(n), "q": rng.integers(0, 10, n)}))
    q = eng.register(QUERIES["exists"], {"o.p": 8})
    ref = q.reference()
    assert q.sketch == ref.sketch and len(ref.sketch.fragments) == 8
    assert q.result_rows() == {(f"s{i}", n // 5): 1 for i in range(5)}


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10**6), name=st.sampled_from(sorted(QUERIES)))
def test_maintained_equals_recapture_as_the_subquery_flips(seed, name):
    rng = np.random.default_rng(seed)
    eng = Engine()
    n = 30
    eng.create_table("o", pa.table({"k": np.arange(n), "p": rng.integers(0, 100, n),
                                    "s": [f"s{i % 3}" for i in range(n)]}), key="k")
    eng.create_table("l", pa.table({"lk": rng.integers(0, n, 8),
                                    "q": rng.integers(0, 10, 8)}))
    q = eng.register(QUERIES[name], {"o.k": 4}, force=True)
    next_key = n
    for _ in range(6):
        table = "l" if rng.random() < 0.6 else "o"
        data = eng.table(table)
        dels = data.take(pa.array(rng.choice(data.num_rows, size=min(
            int(rng.integers(0, 4)), data.num_rows), replace=False), type=pa.int64()))
        if table == "l":
            m = int(rng.integers(0, 3))
            ins = pa.table({"lk": rng.integers(0, n, m), "q": rng.integers(0, 10, m)})
        else:
            m = int(rng.integers(0, 3))
            ins = pa.table({"k": np.arange(next_key, next_key + m),
                            "p": rng.integers(0, 100, m),
                            "s": [f"s{i % 3}" for i in range(m)]})
            next_key += m
        eng.apply(table, inserts=ins.cast(data.schema), deletes=dels)
        ref = q.reference()
        assert q.sketch == ref.sketch, name
        assert q.pipeline.result().to_counter() == ref.bag.items, name
