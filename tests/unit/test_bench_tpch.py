"""``imp bench tpch`` without Spark: query lists (``all22``), each query's sketch attribute
and batch table from its workload header, and the cycle's bookkeeping when a query
fails (the rows its batches deleted are put back), against a stand-in coordinator."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

import numpy as np
import pytest
from workload_data import tpch_tables

from benchmarks import tpch
from imp_core.workloads.queries import list_queries, load_query
from imp_core.workloads.schemas import TABLES


def test_all22_expands_to_the_tpch22_suite_and_mixes_with_names():
    assert tpch.expand_queries(["all22"]) == [q.name for q in list_queries("tpch22")]
    assert tpch.expand_queries(["h04", "all22", "q06"])[:2] == ["h04", "h01"]
    assert tpch.expand_queries(["h04", "all22", "q06"])[-1] == "q06"
    assert len(tpch.expand_queries(["h04", "all22", "q06"])) == 23
    assert tpch.expand_queries(list(tpch.QUERIES)) == list(tpch.QUERIES)
    with pytest.raises(KeyError):
        tpch.expand_queries(["h04", "nope"])


def test_sketch_attribute_and_key_come_from_the_header_and_schema():
    for q in list_queries("tpch22") + list_queries("tpch"):
        table, column = tpch.sketch_attribute(q.name)
        assert (table, column) == load_query(q.name).sketch[0]
        assert tpch.table_key(table) == tuple(TABLES[table].key)
    for q in tpch.QUERIES:  # the paper's queries keep their lineitem batches
        assert tpch.sketch_attribute(q) == ("lineitem", "l_orderkey")
    assert tpch.table_key("lineitem") == tpch.LINEITEM_KEY


class _Coordinator:
    """Just enough of ``Coordinator`` for ``measure_query``: commits move keys in and
    out of a model of the table; ``get_sketch`` fails at its ``fail_at``-th call."""

    def __init__(self, keys: Counter, key: tuple[str, ...], fail_at: int | None):
        self.keys, self.key, self.fail_at, self.calls = keys, key, fail_at, 0
        self.ctx = SimpleNamespace(feed=SimpleNamespace(
            forget=lambda t: None, stats=SimpleNamespace(pull_seconds=0.0)))
        self.diagnostics = SimpleNamespace(operator_stats=lambda name: [])
        self.tables: set[str] = set()

    def _rows(self, data):
        return list(zip(*(data.column(k).to_pylist() for k in self.key)))

    def register(self, spec):
        return SimpleNamespace(total_fragments=8, sketch_fragments=4)

    def scan_specs(self, name):
        return {}

    def recapture(self, name, versions=None, partitions=None):
        return SimpleNamespace(fragments=[1, 2]), 0.5

    def apply_update(self, table, inserts=None, deletes=None):
        self.tables.add(table)
        for k in self._rows(deletes) if deletes is not None else []:
            assert self.keys[k] == 1, f"deleting {k}, not stored"
            self.keys[k] -= 1
        for k in self._rows(inserts) if inserts is not None else []:
            assert self.keys[k] == 0, f"inserting {k}, already stored"
            self.keys[k] += 1

    def get_sketch(self, name):
        self.calls += 1
        if self.calls == self.fail_at:
            raise RuntimeError("maintenance failed")
        return SimpleNamespace(versions={}, sketch=SimpleNamespace(fragments=[1, 2],
                                                                   partitions=None))

    def info(self, name):
        return SimpleNamespace(state_bytes=1, probed_join_sides=())

    def drop(self, name):
        pass


@pytest.fixture(scope="module")
def customer_store(tmp_path_factory):
    from imp_core.storage import DeltaStore

    store = DeltaStore(tmp_path_factory.mktemp("store"))
    info = TABLES["customer"]
    store.create_table("customer", tpch_tables()["customer"], key=info.key,
                       domains=info.domains)
    return store


@pytest.mark.parametrize("fail_at", [None, 1, 2, 3, 4, 5, 6, 7])
def test_batches_change_the_sketched_table_and_a_failure_puts_rows_back(customer_store,
                                                                        fail_at):
    assert tpch.sketch_attribute("h22") == ("customer", "c_custkey")
    key = tpch.table_key("customer")
    data = customer_store.read("customer", columns=list(key))
    stored = Counter(zip(*(data.column(k).to_pylist() for k in key)))
    coordinator = _Coordinator(stored.copy(), key, fail_at)
    args = (coordinator, customer_store, "h22", [6], 8, 1, 1, np.random.default_rng(0),
            False)
    if fail_at is None:
        summary, samples = tpch.measure_query(*args)
        assert summary["sketch"] == "customer.c_custkey" and summary["sketch_ok"] is True
        assert [(s["mode"], s["kind"]) for s in samples] == [
            (m, k) for m in ("own", "feed") for k in ("delete", "mixed", "insert")]
    else:
        with pytest.raises(RuntimeError, match="maintenance failed"):
            tpch.measure_query(*args)
    assert coordinator.tables == {"customer"}
    assert +coordinator.keys == stored  # every deleted row is back, nothing twice


def test_markdown_table_has_a_row_per_query_and_per_failure():
    report = {"summary": {"delta": 100},
              "queries": [{"query": "h13", "sketch": "orders.o_orderkey", "forced": True,
                           "fm_s": 2.5, "sketch_ok": True, "state_bytes": 2**20,
                           "bootstrap_s": 1.0}],
              "results": [{"query": "h13", "delta": 100, "kind": k, "imp_ms": 2.0,
                           "imp_feed_ms": 9.0, "fm_over_imp": 1250.0,
                           "fm_over_imp_feed": 277.8, "imp_outside_ms": 12.5,
                           "fm_over_imp_outside": 200.0} for k in tpch.KINDS],
              "failed": [{"query": "h21", "error": "UnsupportedSqlError",
                          "message": "unsupported SQL construct x | y\nmore"}]}
    lines = tpch.markdown_table(report).splitlines()
    assert len(lines) == 4
    assert lines[2].startswith("| h13 | `orders.o_orderkey` | yes | 2.50 | 2.00 |")
    assert lines[2].endswith("| 9.00 | 12.50 | 1,250 | 277.80 | 200.00 | yes | 1.00 | 1.00 |")
    assert lines[3].startswith("| h21 | failed: UnsupportedSqlError |")
    assert lines[3].count("|") == lines[0].count("|") and "x / y" in lines[3]
