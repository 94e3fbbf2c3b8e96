"""Every tpcds99 query the safety check refuses, and the wrong answer its refusal prevents.

Each refused file is planned over the TPC-DS schemas (their keys, NOT NULL columns and
domains, as ``imp bench coverage`` registers them) and checked on every candidate
attribute the advisor would try: none is safe, and the header attribute's reason names
one of the classes below. Each class has a miniature of the same shape over one small
table r(a, b, c), registered with the unsafe attribute forced, and rows on which the
query over the sketch instance (the rows of the sketch's fragments) answers differently
from the query over all rows: the wrong answer a sketch on that attribute would give.
docs/workloads.md lists the refusals by these classes.
"""

from __future__ import annotations

import re

import pyarrow as pa
import pytest

from imp_core.advice.attributes import candidate_attributes
from imp_core.embedded.api import Engine
from imp_core.errors import UnsafeSketchError
from imp_core.oracle.reference import reference_capture, restrict_to_sketch
from imp_core.safety import check_attribute, declared_not_null
from imp_core.sql import plan_sql
from imp_core.sql.session import Session
from imp_core.workloads.queries import load_query
from imp_core.workloads.tpcds_schemas import TPCDS

# class: (a phrase of the reason, miniature SQL, forced attribute, rows (a, b, c), bounds)
CLASSES = {
    # ds14b ds18 ds77: ROLLUP over a nullable key, ORDER BY the keys; a NULL group ties
    # the subtotal and the tie falls to the SUM, which a partial subtotal lowers
    "tie broken by an aggregate": (
        "ties on its order keys are broken by",
        "SELECT b, sum(c) AS s FROM r GROUP BY ROLLUP(b) ORDER BY b NULLS FIRST LIMIT 1",
        "r.a", [(1, None, 0), (2, 1, -3), (10, 2, 10)], [5]),
    # ds22: a top-k on an AVG, which a partial group may lower
    "top-k on an average": (
        "ranks on avg(",
        "SELECT b, avg(c) AS m FROM r GROUP BY b ORDER BY m, b LIMIT 1",
        "r.a", [(0, 0, 1), (1, 3, 2), (2, 1, 4), (3, 3, 3), (4, 0, 7)], [2, 4, 5]),
    # ds14a ds23b: a HAVING against a scalar subquery that not every result row reads
    # (a UNION branch), so over the sketch the scalar is computed from part of its rows
    "HAVING against a scalar over partial rows": (
        "is not monotone: it tests an aggregate of groups",
        "SELECT b AS x, sum(c) AS y FROM r GROUP BY b HAVING sum(c) > (SELECT avg(c) FROM r) "
        "+ 3 UNION ALL SELECT b, c FROM r WHERE c > 7",
        "r.a", [(0, 2, 7), (1, 2, 1), (2, 0, 8)], [1, 7]),
    # ds67: a window ordered on sums of groups the sketch holds in part
    "window over partial aggregates": (
        "partitions or orders on",
        "SELECT b FROM (SELECT b, rank() OVER (ORDER BY sum(c) DESC) AS rk FROM r GROUP BY b) "
        "x WHERE rk <= 1",
        "r.a", [(0, 1, 5), (3, 1, 5), (1, 2, 12), (6, 2, -5)], [3, 6]),
    # ds49: ranks filtered beside another condition, under a top-k that drops rows
    "rank filter not alone": (
        "is a rank within a partition the sketch instance may hold only in part",
        "SELECT b, rk FROM (SELECT b, rank() OVER (ORDER BY s DESC) AS rk FROM (SELECT b, "
        "sum(c) AS s FROM r GROUP BY b) x) y WHERE rk <= 2 OR b = 0 ORDER BY b DESC LIMIT 1",
        "r.b", [(0, 2, 3), (1, 2, 1), (2, 0, 6), (3, 3, 3), (4, 3, 2), (5, 2, 9)], [2, 6]),
    # ds51: the NULL-supplying side of an outer join (FULL there) under a filter: a sketch
    # that drops a row's only partners makes it look NULL-padded
    "outer join side that may lose partners": (
        "NULL-supplying",
        "SELECT x.a, y.a AS ya FROM r x LEFT OUTER JOIN r y ON x.b = y.c WHERE y.a IS NULL",
        "r.a", [(0, 3, 5), (1, 3, 6), (2, 0, 4), (3, 1, 8), (4, 3, 3)], [1, 3, 4]),
}

REFUSED = {
    "ds14a": "HAVING against a scalar over partial rows",
    "ds14b": "tie broken by an aggregate",
    "ds18": "tie broken by an aggregate",
    "ds22": "top-k on an average",
    "ds23b": "HAVING against a scalar over partial rows",
    "ds49": "rank filter not alone",
    "ds51": "outer join side that may lose partners",
    "ds67": "window over partial aggregates",
    "ds77": "tie broken by an aggregate",
}


def _catalog():
    catalog = {t: info.schema for t, info in TPCDS.items()}
    domains = {t: dict(info.domains or {}) for t, info in TPCDS.items()}
    return catalog, domains


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_the_refused_query_is_unsafe_on_every_candidate_for_its_class(name):
    catalog, domains = _catalog()
    query = load_query(f"tpcds99/{name}")
    plan = plan_sql(query.sql, catalog, Session())
    columns = {t: s.names for t, s in catalog.items()}
    not_null = declared_not_null(catalog)
    for table, column, _ in candidate_attributes(plan.root):
        verdict = check_attribute(plan, table, column, domains, columns, not_null)
        assert not verdict.safe, f"{name} is safe on {table}.{column}: {verdict.reason}"
    table, column = query.sketch[0]
    reason = check_attribute(plan, table, column, domains, columns, not_null).reason
    assert CLASSES[REFUSED[name]][0] in reason, reason


@pytest.mark.parametrize("cls", sorted(CLASSES))
def test_each_refusal_class_gives_a_wrong_answer_when_forced(cls):
    phrase, sql, attribute, rows, bounds = CLASSES[cls]
    eng = Engine()
    eng.create_table("r", pa.table({"a": pa.array([r[0] for r in rows], pa.int64()),
                                    "b": pa.array([r[1] for r in rows], pa.int64()),
                                    "c": pa.array([r[2] for r in rows], pa.int64())}), key="a")
    with pytest.raises(UnsafeSketchError, match=re.escape(phrase)):
        eng.register(sql, {attribute: bounds})
    q = eng.register(sql, {attribute: bounds}, force=True)
    tables = eng.tables()
    full = reference_capture(q.plan, tables, q.partitions)
    over_sketch = reference_capture(q.plan, restrict_to_sketch(tables, full.sketch),
                                    q.partitions)
    assert full.rows() != over_sketch.rows(), cls
