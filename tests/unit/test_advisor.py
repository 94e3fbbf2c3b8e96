"""The attribute advisor (issue 27): candidates from the plan, safety, measured choice,
explanations; and the page layout a sketch's filter meets (``imp_core.storage.row_groups``).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyroaring import BitMap

from imp_core.advice.attributes import Advice, Candidate, candidate_attributes, coverage_line
from imp_core.embedded.api import Engine
from imp_core.errors import PartitionError, UnsafeSketchError
from imp_core.query.prepare import prepare_query
from imp_core.sketch.partition import PartitionSet, RangePartition
from imp_core.sketch.sketch import Sketch
from imp_core.sql import plan_sql
from imp_core.storage.row_groups import blocks, fit_to_blocks


def _engine(seed: int = 1, n: int = 4000) -> Engine:
    rng = np.random.default_rng(seed)
    eng = Engine()
    eng.create_table("orders", pa.table({
        "o_id": np.arange(n), "o_cust": rng.integers(0, 200, n),
        "o_date": rng.integers(0, 1000, n), "o_total": rng.integers(1, 10_000, n)}),
        key="o_id")
    eng.create_table("items", pa.table({
        "l_id": np.arange(3 * n), "l_oid": rng.integers(0, n, 3 * n),
        "l_qty": rng.integers(1, 50, 3 * n)}), key="l_id")
    return eng


JOIN = ("SELECT o.o_id, sum(l.l_qty) AS q FROM orders o JOIN items l ON o.o_id = l.l_oid "
        "WHERE o.o_date < 20 GROUP BY o.o_id")


def test_candidates_carry_their_roles():
    eng = _engine()
    plan = plan_sql(JOIN + " ORDER BY q DESC LIMIT 3", eng.catalog())
    found = {(t, c): roles for t, c, roles in
             candidate_attributes(plan.root, {"items": ("l_id",)})}
    assert "group-by" in found[("orders", "o_id")] and "join key" in found[("orders", "o_id")]
    assert found[("items", "l_oid")] == ("join key",)
    assert found[("orders", "o_date")] == ("filter",)
    assert found[("items", "l_id")] == ("cluster",)
    # a table grouped, joined and filtered by nothing offers the columns read
    plan = plan_sql("SELECT sum(l_qty) AS s FROM items", eng.catalog())
    assert candidate_attributes(plan.root) == [("items", "l_qty", ("read",))]


def test_auto_registration_is_safe_exact_and_explained():
    eng = _engine()
    q = eng.register(JOIN)  # no partitions, no header: the advisor chooses
    e = q.explain()
    assert e["mode"] == "auto" and e["chosen"] == ["orders.o_date"]
    by = {c["attribute"]: c for c in e["candidates"]}
    # the filter column holds the provenance in 2 of 64 ranges; the keys are spread
    assert by["orders.o_date"]["read_share"] < 0.1
    assert by["orders.o_id"]["read_share"] > 0.5 and by["items.l_oid"]["read_share"] > 0.5
    assert all(by[a]["safe"] for a in e["chosen"])
    assert q.sketch == q.reference().sketch
    rng = np.random.default_rng(2)
    for step in range(5):
        new = pa.table({"o_id": np.arange(10) + 10_000 + 10 * step,
                        "o_cust": rng.integers(0, 200, 10), "o_date": rng.integers(0, 40, 10),
                        "o_total": rng.integers(1, 10_000, 10)})
        eng.insert("orders", new)
        assert q.sketch == q.reference().sketch
    assert "orders.o_date (filter)" in e["why"]


def test_why_lines_for_whole_and_empty_sketches():
    eng = _engine()
    q = eng.register("SELECT sum(l_qty) AS s FROM items")
    e = q.explain()
    assert e["why"].startswith("no attribute skips")
    assert "one global aggregate (sum(items.l_qty))" in e["why"]
    assert e["sketch_fragments"] == e["total_fragments"] and "every range" in e["coverage"]
    q = eng.register("SELECT o_cust, sum(o_total) AS s FROM orders GROUP BY o_cust "
                     "HAVING sum(o_total) > 100000000")
    e = q.explain()
    assert e["sketch_fragments"] == 0 and "holds no fragment" in e["coverage"]


def test_named_attributes_are_kept_and_listed():
    eng = _engine()
    q = eng.register(JOIN, partitions={"orders.o_id": 16})
    e = q.explain()
    assert e["mode"] == "given" and e["chosen"] == ["orders.o_id"]
    assert e["candidates"][0]["safe"] and e["candidates"][0]["size"] == 16


def test_no_safe_attribute_names_every_reason():
    eng = Engine()
    eng.create_table("t", pa.table({"k": np.arange(100), "v": np.arange(100) - 50}), key="k")
    with pytest.raises(UnsafeSketchError) as info:
        eng.register("SELECT sum(v) AS s FROM t HAVING sum(v) > 0")
    assert "no safe sketch attribute" in str(info.value) and "t.v" in str(info.value)


def test_auto_needs_a_capture_and_refuses_other_words():
    eng = _engine()
    with pytest.raises(PartitionError, match="name the attribute"):
        prepare_query(JOIN, eng, "auto")
    with pytest.raises(PartitionError, match="give 'auto'"):
        prepare_query(JOIN, eng, "best")


def test_advice_round_trips_through_json():
    eng = _engine()
    advice = eng.register(JOIN).advice
    again = Advice.from_json(advice.to_json())
    assert again.to_json() == advice.to_json()
    assert Candidate.from_json(advice.candidates[0].to_json()).attribute == \
        advice.candidates[0].attribute


def test_coverage_line_is_empty_for_a_partial_sketch():
    eng = _engine()
    q = eng.register(JOIN, partitions={"orders.o_date": 16})
    assert 0 < len(q.sketch.fragments) < 16 and coverage_line(q.plan, q.sketch) == ""


# -- pages ------------------------------------------------------------------------------
def _file(tmp_path, values: np.ndarray, group: int, page: int) -> str:
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"x": values}), path, row_group_size=group,
                   max_rows_per_page=page, write_page_index=True)
    return str(path)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.integers(-50, 500), min_size=1, max_size=400), st.integers(8, 64),
       st.integers(1, 5), st.data())
def test_blocks_never_count_less_than_the_rows_a_filter_keeps(tmp_path, values, group,
                                                              pages, data):
    values = np.array(values, dtype=np.int64)
    page = max(1, group // pages)
    found = blocks([_file(tmp_path, values, group, page)], "x", pa.int64(), page)
    assert found.total_rows == len(values) and found.groups == -(-len(values) // group)
    part = RangePartition.equi_depth("t", "x", pa.array(values), 12)
    frags = sorted(data.draw(st.sets(st.integers(0, part.size - 1))))
    rows, _, hit = found.read(part, frags)
    ids = part.annotate(pa.array(values))
    kept = np.isin(ids, frags)
    assert rows >= int(kept.sum())  # every kept row lies in a block that is read
    # brute force: a block is read iff a fragment between its min's and its max's is kept
    starts = np.concatenate([[0], np.cumsum(found.rows)[:-1]])
    wanted = set(frags)
    expect = [bool(wanted & set(range(int(ids[s:s + n].min()), int(ids[s:s + n].max()) + 1)))
              for s, n in zip(starts, found.rows)]
    assert list(found.hit(part, frags)) == expect and hit == sum(expect)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.integers(0, 1000), min_size=20, max_size=400), st.integers(1, 4),
       st.data())
def test_fitting_to_pages_keeps_a_superset_within_the_range_limit(tmp_path, values,
                                                                  limit, data):
    values = np.sort(np.array(values, dtype=np.int64))  # clustered: pages skip
    found = blocks([_file(tmp_path, values, 32, 8)], "x", pa.int64(), 8)
    part = RangePartition.equi_depth("t", "x", pa.array(values), 24)
    pset = PartitionSet((part,))
    frags = data.draw(st.sets(st.integers(0, part.size - 1)))
    sketch = Sketch(pset, BitMap(frags))
    fitted = fit_to_blocks(sketch, "t", found, limit)
    assert set(sketch.fragments) <= set(fitted.fragments)
    assert len(fitted.ranges("t")) <= limit
    exact = found.read(part, sketch.table_fragments("t"))[0]
    coarse = found.read(part, sketch.coarsened(limit).table_fragments("t"))[0]
    assert exact <= found.read(part, fitted.table_fragments("t"))[0] <= max(coarse, exact)
    if len(sketch.ranges("t")) <= limit:  # free gaps only: reads what the exact filter does
        assert found.read(part, fitted.table_fragments("t"))[0] == exact


@pytest.mark.parametrize("dtype", [pa.date32(), pa.decimal128(12, 2), pa.timestamp("us")])
def test_blocks_of_dates_decimals_and_timestamps(tmp_path, dtype):
    rng = np.random.default_rng(3)
    ints = np.sort(rng.integers(0, 3000, 2000))
    if pa.types.is_decimal(dtype):
        from decimal import Decimal

        values = pa.array([Decimal(int(i)) / 100 for i in ints], dtype)
    else:
        values = pa.array(ints.astype(np.int32)).cast(pa.date32()).cast(dtype)
    path = tmp_path / "d.parquet"
    pq.write_table(pa.table({"x": values}), path, row_group_size=500)
    found = blocks([str(path)], "x", dtype, 100)
    part = RangePartition.equi_depth("t", "x", values, 16)
    kept = [0, 7, 15]
    rows, _, hit = found.read(part, kept)
    in_kept = int(np.isin(part.annotate(values), kept).sum())
    assert in_kept <= rows <= in_kept + 2 * 3 * 100 and 0 < hit < len(found)
    fitted = fit_to_blocks(Sketch(PartitionSet((part,)), BitMap(kept)), "t", found, 1)
    assert len(fitted.ranges("t")) == 1


TEXT = st.text(alphabet="ab\u00e9z\u4e2d", max_size=12)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(st.none(), TEXT), min_size=1, max_size=120), st.integers(1, 16),
       st.lists(TEXT.filter(bool), min_size=1, max_size=5, unique=True), st.data())
def test_blocks_of_strings_read_every_page_holding_a_kept_row(tmp_path, values, page, bounds,
                                                              data):
    """String pages are bounded by prefix codes (``text_codes``, not one-to-one): a
    filter is estimated to read every page that holds a row it keeps, and fitting to
    pages keeps a superset."""
    arr = pa.array(values, pa.string())
    path = tmp_path / "s.parquet"
    pq.write_table(pa.table({"x": arr}), path, row_group_size=max(page, 8))
    found = blocks([str(path)], "x", pa.string(), page)
    part = RangePartition.from_bounds("t", "x", pa.string(), sorted(bounds))
    frags = sorted(data.draw(st.sets(st.integers(0, part.size - 1), min_size=1)))
    hit = found.hit(part, frags)
    ids = part.annotate(arr)
    starts = np.concatenate([[0], np.cumsum(found.rows)[:-1]])
    for b, (s, n) in enumerate(zip(starts, found.rows)):
        if np.isin(ids[s:s + n], frags).any():
            assert hit[b], (values[s:s + n], bounds, frags)
    sketch = Sketch(PartitionSet((part,)), BitMap(frags))
    assert set(sketch.fragments) <= set(fit_to_blocks(sketch, "t", found, 1).fragments)


def test_string_codes_keep_the_order_of_their_strings():
    from imp_core.storage.row_groups import text_codes

    words = sorted(["", "a", "a\u0000", "ab", "abcdefgh", "abcdefgz", "b", "\u00e9", "\u4e2d"])
    codes = text_codes(pa.array(words))
    assert list(codes) == sorted(codes) and codes.dtype == np.int64
