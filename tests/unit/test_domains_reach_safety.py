"""Domains users give (issue 32 part 5) reach the safety check: ``imp data load --domain``
and the CHECK constraints of a Delta table are stored with the table
(``TableEntry.domains``) and prove a sketch safe that is unsafe without them; a nullable
column's domain is written as ``col IS NULL OR (...)`` and read back as the same domain."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from imp_core.errors import UnsafeSketchError
from imp_core.query.prepare import StoreTables, prepare_query
from imp_core.storage import DeltaStore
from imp_core.storage.declared import constraint_domains
from imp_core.storage.writes import domain_constraints
from services.cli.main import main

# unsafe on sales.id unless amount is known >= 0: a partial group's sum could exceed the
# complete group's and pass the HAVING wrongly
SQL = ("-- sketch: sales.id\n"
       "SELECT g, sum(amount) AS s FROM sales GROUP BY g HAVING sum(amount) > 10")
ROWS = pa.table({"id": [1, 2, 3, 4, 5], "g": [1, 1, 2, 2, 2],
                 "amount": pa.array([5.0, 10.5, 99.0, None, 0.0]),
                 "day": pa.array([dt.date(2020, 1, d) for d in (1, 2, 3, 4, 5)])})


def _load(tmp_path: Path, source: str, *flags: str) -> DeltaStore:
    root = tmp_path / "store"
    assert main(["data", "load", "sales", source, "--key", "id", "--root", str(root),
                 "--quiet", *flags]) == 0
    return DeltaStore(root)


def _verdict(store: DeltaStore):
    return prepare_query(SQL, StoreTables(store), fragments=2).verdicts[0]


def test_without_a_domain_the_sum_is_not_provably_monotone(tmp_path):
    pq.write_table(ROWS, tmp_path / "s.parquet")
    store = _load(tmp_path, str(tmp_path / "s.parquet"))
    with pytest.raises(UnsafeSketchError, match="not provably >= 0"):
        _verdict(store)


@pytest.mark.parametrize("flag", ["amount=0..", "amount=0..1000", "amount=0.0..99"])
def test_a_domain_flag_is_stored_and_proves_the_sketch_safe(tmp_path, flag):
    pq.write_table(ROWS, tmp_path / "s.parquet")
    store = _load(tmp_path, str(tmp_path / "s.parquet"), "--domain", flag,
                  "--domain", "day=2020-01-01..2020-12-31")
    assert store.entry("sales").domains["amount"][0] == 0.0
    assert store.entry("sales").domains["day"] == (dt.date(2020, 1, 1), dt.date(2020, 12, 31))
    verdict = _verdict(store)
    assert verdict.safe and "monotone" in verdict.reason


@pytest.mark.parametrize("constraint", [
    "amount >= 0", "amount BETWEEN 0 AND 1000", "amount IS NULL OR amount >= 0",
    "amount IS NULL OR (amount >= 0 AND amount <= 1000)", "0 <= amount AND g > 0",
])
def test_a_delta_check_constraint_becomes_a_domain_that_proves_the_sketch_safe(
        tmp_path, constraint):
    source = str(tmp_path / "source")
    write_deltalake(source, ROWS.filter(pa.compute.is_valid(ROWS["amount"]))
                    if "NULL" not in constraint else ROWS)
    DeltaTable(source).alter.add_constraint({"amount_ok": constraint})
    store = _load(tmp_path, source)
    assert store.entry("sales").domains["amount"][0] == 0
    assert _verdict(store).safe


def test_a_check_constraint_that_does_not_bound_the_column_alone_proves_nothing(tmp_path):
    source = str(tmp_path / "source")
    write_deltalake(source, ROWS)
    DeltaTable(source).alter.add_constraint({"either": "amount IS NULL OR amount >= 0 OR "
                                                       "g > 1"})
    store = _load(tmp_path, source)
    assert "amount" not in store.entry("sales").domains
    with pytest.raises(UnsafeSketchError):
        _verdict(store)


def test_a_nullable_columns_domain_is_written_null_tolerant_and_read_back(tmp_path):
    schema = pa.schema([pa.field("k", pa.int64(), nullable=False),
                        pa.field("q", pa.int32()), pa.field("d", pa.date32())])
    domains = {"k": (1, None), "q": (1, 100), "d": (dt.date(2000, 1, 1), None)}
    written = domain_constraints(domains, {"q", "d"})
    assert written == {"imp_domain_k": "k >= 1",
                       "imp_domain_q": "q IS NULL OR (q >= 1 AND q <= 100)",
                       "imp_domain_d": "d IS NULL OR (d >= DATE '2000-01-01')"}
    configuration = {f"delta.constraints.{name}": sql for name, sql in written.items()}
    assert constraint_domains(configuration, schema) == domains
    # delta-rs stores them without the parentheses; the precedence is the same
    configuration["delta.constraints.imp_domain_q"] = "q IS NULL OR q >= 1 AND q <= 100"
    assert constraint_domains(configuration, schema) == domains


def test_a_table_with_nulls_under_a_domain_loads_and_copies_with_its_domain(tmp_path):
    data = pa.table({"k": [1, 2, 3], "q": pa.array([5, None, 7], pa.int32())})
    first = DeltaStore(tmp_path / "a")
    first.create_table("t", data, key=("k",), domains={"q": (1, 100)})
    copy = DeltaStore(tmp_path / "b")
    assert main(["data", "load", "t", first.entry("t").location, "--key", "k", "--root",
                 str(tmp_path / "b"), "--quiet"]) == 0
    assert copy.entry("t").domains == {"q": (1, 100)}
    assert copy.read("t").column("q").null_count == 1
