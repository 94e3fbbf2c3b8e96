"""``imp bench tpcds`` without Spark: its query list, the batch table of a query (its
sketched fact table, else the largest fact table it reads), fresh keys of inserted
copies, and the Markdown table of a report."""

from __future__ import annotations

from types import SimpleNamespace

import pyarrow as pa
import pytest

from benchmarks import tpcds
from benchmarks.fm_vs_imp import FreshKeys, Registered
from imp_core.workloads.queries import list_queries
from imp_core.workloads.tpcds_schemas import TPCDS


def test_queries_default_to_the_suite_and_names_are_checked():
    suite = [q.name for q in list_queries("tpcds99")]
    assert tpcds.expand_queries(["tpcds99"]) == suite
    assert tpcds.expand_queries(["ds07", "tpcds99"])[:2] == ["ds07", "ds01"]
    assert len(tpcds.expand_queries(["ds07", "tpcds99"])) == len(suite)
    with pytest.raises(KeyError):
        tpcds.expand_queries(["ds03", "nope"])


def test_fresh_columns_are_keys_no_dimension_refers_to():
    for table, column in tpcds.FRESH.items():
        assert table in tpcds.FACTS and column in TPCDS[table].key
        assert column.endswith("_number")
    assert tpcds.table_key("inventory") == tuple(TPCDS["inventory"].key)
    assert "inventory" not in tpcds.FRESH  # its key is all foreign keys


class _Store:
    def __init__(self, tables: dict[str, pa.Table]):
        self.tables = tables

    def read(self, table, columns):
        return self.tables[table].select(columns)


def test_batch_table_is_the_sketched_fact_table_else_the_largest_fact_read(monkeypatch):
    rows = {"store_sales": 30, "store_returns": 3, "web_sales": 7}
    monkeypatch.setattr(tpcds, "count_rows", lambda store, t: rows[t])
    coordinator = SimpleNamespace(info=lambda name: SimpleNamespace(
        tables=("date_dim", "store_returns", "store_sales", "item")))
    store = object()

    def reg(table: str) -> Registered:
        return Registered(None, 0.1, table, "x")

    assert tpcds._batch_table(coordinator, store, "q", reg("store_returns")) == "store_returns"
    assert tpcds._batch_table(coordinator, store, "q", reg("date_dim")) == "store_sales"
    coordinator = SimpleNamespace(info=lambda name: SimpleNamespace(tables=("item",)))
    assert tpcds._batch_table(coordinator, store, "q", reg("item")) == "item"


def test_fresh_keys_are_above_the_stored_and_the_handed_out_ones():
    data = pa.table({"ss_item_sk": pa.array([1, 2, 3], pa.int32()),
                     "ss_ticket_number": pa.array([5, 9, 7], pa.int64())})
    fresh = FreshKeys(_Store({"store_sales": data}), "store_sales", "ss_ticket_number")
    a, b = fresh(data.slice(0, 2)), fresh(data)
    assert a.column("ss_ticket_number").to_pylist() == [10, 11]
    assert b.column("ss_ticket_number").to_pylist() == [12, 13, 14]
    assert a.column("ss_item_sk").to_pylist() == [1, 2] and a.schema == data.schema


def test_markdown_table_rows_for_measured_failed_and_refused_queries():
    report = {"summary": {"delta": 100},
              "queries": [{"query": "ds03", "sketch": "date_dim.d_year", "sketch_via":
                           "advisor", "table": "store_sales", "fm_s": 2.0,
                           "sketch_ok": True, "state_bytes": 123456, "bootstrap_s": 4.0}],
              "results": [{"query": "ds03", "delta": 100, "kind": "mixed", "imp_ms": 2.0,
                           "fm_over_imp": 1000.0, "imp_outside_ms": 8.0,
                           "fm_over_imp_outside": 250.0, "imp_outside_ops_ms": 6.0,
                           "imp_outside_join_ms": 1.5, "imp_outside_pull_ms": 1.0}],
              "failed": [{"query": "ds10", "error": "RuntimeError", "message": "a | b"}],
              "refused": [{"query": "ds06", "error": "UnsafeSketchError",
                           "reason": "header unsafe\nmore"}]}
    lines = tpcds.markdown_table(report).splitlines()
    assert len(lines) == 5
    assert lines[2] == ("| ds03 | `date_dim.d_year` (advisor) | store_sales | 2.00 | 8.00 | "
                        "250.00 | 2.00 | 1,000 | 123,456 | 4.00 | 2.00 | yes | "
                        "6.00 / 1.50 / 1.00 | 0 |")
    assert lines[3].startswith("| ds10 | failed: RuntimeError |") and "a / b" in lines[3]
    assert lines[4].startswith("| ds06 | refused: UnsafeSketchError |")
    assert all(line.count("|") == lines[0].count("|") for line in lines)


def test_merged_reports_list_each_refusal_once_unless_a_run_measured_it(tmp_path):
    import json

    def report(measured, refused):
        return {"parameters": {"sf": 1.0}, "load": {"at_start": 1.0, "at_end": 1.0},
                "total_s": 5, "samples": [], "failed": [],
                "queries": [{"query": q, "sketch": "t.a", "fm_s": 1.0, "sketch_ok": True}
                            for q in measured],
                "refused": [{"query": q, "error": "PlanTooLargeError", "reason": why}
                            for q, why in refused]}

    (tmp_path / "a.json").write_text(json.dumps(report(["ds01"], [("ds05", "old"),
                                                                  ("ds65", "old")])))
    (tmp_path / "b.json").write_text(json.dumps(report(["ds05"], [("ds65", "new")])))
    merged = tpcds.merge_reports([tmp_path / "a.json", tmp_path / "b.json"],
                                 tmp_path / "m.json")
    assert [q["query"] for q in merged["queries"]] == ["ds01", "ds05"]
    assert merged["refused"] == [{"query": "ds65", "error": "PlanTooLargeError",
                                  "reason": "new"}]
    assert json.loads((tmp_path / "m.json").read_text())["refused"] == merged["refused"]


def test_a_rerun_query_keeps_its_last_measurement(tmp_path):
    import json

    def report(fm, queries):
        return {"parameters": {"sf": 1.0}, "load": {"at_start": 1.0, "at_end": 1.0},
                "total_s": 5, "failed": [], "refused": [],
                "queries": [{"query": q, "sketch": "t.a", "fm_s": fm, "sketch_ok": True}
                            for q in queries],
                "samples": [{"query": q, "delta": 100, "kind": "mixed", "mode": "own",
                             "imp_ms": fm, "ops_ms": 0.0, "join_ms": 0.0, "pull_ms": 0.0,
                             "other_ms": 0.0, "commit_s": 0.1, "rows": 100}
                            for q in queries]}

    (tmp_path / "a.json").write_text(json.dumps(report(1.0, ["ds01", "ds02"])))
    (tmp_path / "b.json").write_text(json.dumps(report(2.0, ["ds02"])))
    merged = tpcds.merge_reports([tmp_path / "a.json", tmp_path / "b.json"],
                                 tmp_path / "m.json")
    assert [(q["query"], q["fm_s"]) for q in merged["queries"]] == [("ds01", 1.0),
                                                                    ("ds02", 2.0)]
    assert sorted((s["query"], s["imp_ms"]) for s in merged["samples"]) == \
        [("ds01", 1.0), ("ds02", 2.0)]
    assert {r["query"]: r["imp_ms"] for r in merged["results"]} == {"ds01": 1.0,
                                                                    "ds02": 2.0}
