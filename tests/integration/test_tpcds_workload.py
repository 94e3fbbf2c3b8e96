"""TPC-DS as a workload: tpcgen-cli's 24 tables against their declared schemas, keys and
domains (SF 0.01), the ``tpcds99`` query suite, ``imp data tpcds`` and
``imp bench coverage`` over TPC-DS."""

from __future__ import annotations

import json
import re
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import sqlglot
from sqlglot import exp
from workload_data import tpcds_tables

from benchmarks.coverage import UNSAFE, run_coverage, suite_folder
from imp_core.storage import DeltaStore
from imp_core.workloads import tpcds
from imp_core.workloads.queries import SUITE_DESCRIPTIONS, SUITES, list_queries, load_query
from imp_core.workloads.tpcds_schemas import FACT_TABLES, TPCDS, TPCDS_TABLES
from services.cli.main import main

pytestmark = pytest.mark.tpcds

SPLIT = ("ds14", "ds23", "ds24", "ds39")  # the files of two statements


# -- data ----------------------------------------------------------------------------------


def test_24_tables_with_the_generators_columns_and_types():
    tables = tpcds_tables()
    assert sorted(tables) == sorted(TPCDS_TABLES) and len(TPCDS_TABLES) == 24
    for name, data in tables.items():
        assert data.schema == TPCDS[name].schema, name
        assert data.num_rows > 0, name


@pytest.mark.parametrize("name", TPCDS_TABLES)
def test_generated_rows_meet_keys_and_declared_domains(name):
    data = tpcds_tables()[name]
    info = TPCDS[name]
    key = list(info.key)
    assert all(data.column(c).null_count == 0 for c in key)
    assert data.group_by(key).aggregate([]).num_rows == data.num_rows, "key not unique"
    for column, (low, high) in info.domains.items():
        least_most = pc.min_max(data.column(column)).as_py()
        if least_most["min"] is None:  # all NULL at this scale (cc_closed_date_sk)
            continue
        assert low is None or least_most["min"] >= low, (column, least_most, low)
        assert high is None or least_most["max"] <= high, (column, least_most, high)


def test_money_of_the_fact_tables_is_declared_non_negative_except_profit():
    # from zero up, except two amounts dbgen draws from a narrower range (by the column's
    # name without the table's prefix)
    narrower = {"wholesale_cost": (Decimal("1.00"), Decimal("100.00")),
                "fee": (Decimal("0.50"), Decimal("100.00"))}
    checked = 0
    for name in FACT_TABLES:
        info = TPCDS[name]
        money = [f.name for f in info.schema if pa.types.is_decimal(f.type)]
        for column in money:
            if column.endswith("net_profit"):
                assert column not in info.domains
                continue
            want = narrower.get(column.split("_", 1)[1], (Decimal("0.00"), None))
            assert info.domains[column] == want, column
            checked += 1
    assert checked > 50  # every fact table's amounts, not a few


def test_an_unknown_table_or_scale_is_refused_before_running_the_generator(tmp_path):
    with pytest.raises(ValueError, match="unknown TPC-DS tables"):
        tpcds.generate_tpcds(0.01, tmp_path, progress=False, tables=["lineitem"])
    with pytest.raises(ValueError, match="must be > 0"):
        tpcds.generate_tpcds(0, tmp_path, progress=False)
    assert Path(tpcds.tpcgen_executable()).name == "tpcgen-cli"


# -- the tpcds99 suite -----------------------------------------------------------------------


def _expected_names() -> list[str]:
    names = []
    for i in range(1, 100):
        q = f"ds{i:02d}"
        names += [f"{q}a", f"{q}b"] if q in SPLIT else [q]
    return names


def _tables_read(sql: str) -> set[str]:
    tree = sqlglot.parse_one(sql, read="spark")
    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    return {t.name.lower() for t in tree.find_all(exp.Table)} - ctes


def test_the_suite_holds_the_99_queries_with_a_and_b_for_the_four_split_files():
    assert "tpcds99" in SUITES and "tpcds99" in SUITE_DESCRIPTIONS
    queries = list_queries("tpcds99")
    assert [q.name for q in queries] == _expected_names() and len(queries) == 103
    assert load_query("tpcds99/ds14b").name == "ds14b" == load_query("ds14b").name
    assert (suite_folder("tpcds99") / "README.md").is_file()


# the grand total of their ROLLUP reaches the result, so a sketch on the item key holds
# every fragment; the sold date keeps only those of the dates read (README.md)
SOLD_DATE = {"ds36": "ss_sold_date_sk", "ds70": "ss_sold_date_sk", "ds86": "ws_sold_date_sk"}


@pytest.mark.parametrize("query", list_queries("tpcds99"), ids=lambda q: q.name)
def test_each_query_is_one_statement_whose_header_is_its_largest_tables_first_key(query):
    assert query.sql.count(";") == 1 and query.sql.rstrip().endswith(";")
    read = _tables_read(query.sql)
    assert read <= set(TPCDS), read - set(TPCDS)
    [(table, column)] = query.sketch
    assert table in read and column == SOLD_DATE.get(query.name, TPCDS[table].key[0])
    facts = [t for t in FACT_TABLES if t in read]
    if facts:
        assert table == facts[0]


def test_the_query_texts_are_datafusion_benchmarks_copies():
    for query in list_queries("tpcds99"):
        number = int(re.match(r"ds(\d+)", query.name).group(1))
        assert query.sql.startswith(f"-- SQLBench-DS query {number} derived from TPC-DS "
                                    f"query {number}")


# -- imp data tpcds ----------------------------------------------------------------------------


def test_imp_data_tpcds_loads_tables_with_keys_domains_and_nulls(tmp_path, capsys):
    root = tmp_path / "store"
    assert main(["data", "tpcds", "--sf", "0.01", "--tables", "store_sales,date_dim,store",
                 "--root", str(root), "--work-dir", str(tmp_path / "work"), "--quiet",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [t["table"] for t in out["tables"]] == ["store_sales", "date_dim", "store"]
    store = DeltaStore(root)
    assert (tmp_path / "work" / "tpcds-sf0.01" / "store_sales.parquet").is_file()
    sales = store.read("store_sales")
    assert sales.num_rows == tpcds_tables()["store_sales"].num_rows
    assert sales.column("ss_quantity").null_count > 0  # NULLs pass the domain constraints
    entry = store.entry("store_sales")
    assert entry.key == ("ss_item_sk", "ss_ticket_number")
    assert entry.domains["ss_quantity"] == (1, 100)
    assert entry.sketch_columns == ("ss_item_sk",)  # clustered on the suite's attribute
    items = sales.column("ss_item_sk").to_pylist()
    assert items == sorted(items)


def test_imp_data_tpcds_refuses_a_store_holding_tpch(tmp_path, capsys):
    root = tmp_path / "store"
    pq.write_table(pa.table({"c_custkey": [1, 2]}), tmp_path / "c.parquet")
    assert main(["data", "load", "customer", str(tmp_path / "c.parquet"), "--root", str(root),
                 "--quiet"]) == 0
    capsys.readouterr()
    code = main(["data", "tpcds", "--sf", "0.01", "--tables", "customer", "--root",
                 str(root), "--work-dir", str(tmp_path / "work"), "--quiet"])
    err = capsys.readouterr().err
    assert code != 0 and "TPC-H" in err and "--root" in err
    assert not (tmp_path / "work").exists()  # refused before generating anything


def test_imp_workloads_names_the_tpcds_data_command(capsys):
    assert main(["workloads", "tpcds99", "--json"]) == 0
    [suite] = json.loads(capsys.readouterr().out)["suites"]
    assert suite["data"].startswith("imp data tpcds") and len(suite["queries"]) == 103


# -- imp bench coverage over TPC-DS ---------------------------------------------------------------

# ds96 registers on its header attribute; ds03 only on the advisor's (its header's
# store_sales.ss_item_sk is unsafe: it ranks a SUM DESC and the items are partial groups of
# brand and year); ds24a on the advisor's string attributes (its groups are names); ds23a
# (a scalar subquery written SELECT *) on the advisor's; ds22 is unsafe on every attribute
# (a top-k on an AVG over ROLLUP levels that span every fragment)
COVERAGE = ("ds03", "ds22", "ds23a", "ds24a", "ds96")


def test_coverage_over_tpcds_tries_the_advisor_after_an_unsafe_header(tmp_path):
    for name in COVERAGE:
        (tmp_path / f"{name}.sql").write_text(
            (suite_folder("tpcds99") / f"{name}.sql").read_text())
    report = run_coverage(folder=tmp_path, benchmark="tpcds", advisor=True,
                          tables=tpcds_tables(), progress=False)
    rows = {r["name"]: r for r in report["results"]}
    assert rows["ds96"]["status"] == "registered" and rows["ds96"]["sketch_via"] == "header"
    assert rows["ds03"]["status"] == "registered" and rows["ds03"]["sketch_via"] == "advisor"
    assert rows["ds03"]["header_reason"] and rows["ds03"]["sketch"] != ["store_sales.ss_item_sk"]
    assert rows["ds23a"]["status"] == "registered"
    assert rows["ds24a"]["status"] == "registered" and any(
        a.startswith(("customer.c_", "store.s_store_name")) for a in rows["ds24a"]["sketch"])
    assert rows["ds22"]["construct"] == UNSAFE and "no safe sketch attribute" in \
        rows["ds22"]["advisor_reason"]
    summary = report["summary"]
    assert summary["registered_via"] == {"header": 1, "advisor": 3}
    assert summary["queries_by_construct"] == {UNSAFE: ["ds22"]}
    assert report["parameters"]["benchmark"] == "tpcds"
