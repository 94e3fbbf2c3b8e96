"""Keys and domains as users declare them (issue 28, part 5): ``--key``/``--domain`` flags
checked against the input's schema, simple bounds read from Delta CHECK constraints, and
the declarations carried in an Arrow schema's metadata (what ListTables sends)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pytest

from imp_core.storage import DeltaStore
from imp_core.storage.declared import (
    constraint_domains,
    declared_of,
    describe_domains,
    describe_key,
    parse_domain,
    parse_domains,
    parse_key,
    with_declared,
)

SCHEMA = pa.schema([("id", pa.int64()), ("qty", pa.int32()), ("price", pa.float64()),
                    ("cost", pa.decimal128(15, 2)), ("day", pa.date32()),
                    ("at", pa.timestamp("us")), ("name", pa.string()), ("Mixed", pa.int64())])


@pytest.mark.parametrize("spec,expected", [
    ("qty=0..50", ("qty", (0, 50))),
    ("qty=-5..5", ("qty", (-5, 5))),
    ("qty=0..", ("qty", (0, None))),
    ("qty=..9", ("qty", (None, 9))),
    ("price=0.5..1.5", ("price", (0.5, 1.5))),
    ("cost=0..100.25", ("cost", (Decimal("0"), Decimal("100.25")))),
    ("day=1992-01-01..1998-12-31", ("day", (dt.date(1992, 1, 1), dt.date(1998, 12, 31)))),
    ("at=2020-01-01..2020-01-02 12:00:00",
     ("at", (dt.datetime(2020, 1, 1), dt.datetime(2020, 1, 2, 12)))),
    ("mixed=1..2", ("Mixed", (1, 2))),  # the schema's spelling, found case-insensitively
    (" qty = 1 .. 2 ", ("qty", (1, 2))),
])
def test_domain_flags_take_the_columns_type(spec, expected):
    column, (low, high) = parse_domain(spec, SCHEMA)
    assert (column, (low, high)) == expected
    for bound, want in zip((low, high), expected[1]):
        assert type(bound) is type(want)


@pytest.mark.parametrize("spec,message", [
    ("qty", "expected COL=LO..HI"),
    ("qty=5", "expected COL=LO..HI"),
    ("=1..2", "expected COL=LO..HI"),
    ("qty=..", "give a low bound, a high bound or both"),
    ("nope=1..2", "no column 'nope'"),
    ("qty=9..1", "the low bound 9 is above the high bound 1"),
    ("qty=1.5..3", "'1.5' is not an integer"),
    ("price=a..b", "'a' is not a number"),
    ("day=1992-13-01..1998-01-01", "is not a date (YYYY-MM-DD)"),
    ("day=1998-01-01..1992-01-01", "above the high bound"),
    ("name=a..z", "domains are declared for numbers, dates and timestamps"),
    ("price=nan..1", "NaN"),
])
def test_malformed_domain_flags_say_what_is_wrong(spec, message):
    with pytest.raises(ValueError, match="--domain") as info:
        parse_domain(spec, SCHEMA)
    assert message in str(info.value)


def test_a_column_is_declared_once_and_keys_are_columns():
    assert parse_domains(["qty=0..1", "price=0..1"], SCHEMA) == {"qty": (0, 1),
                                                                  "price": (0.0, 1.0)}
    with pytest.raises(ValueError, match="given twice"):
        parse_domains(["qty=0..1", "QTY=0..2"], SCHEMA)
    assert parse_key(["id", "day"], SCHEMA) == ("id", "day")
    with pytest.raises(ValueError, match="no column 'nope'"):
        parse_key(["id", "nope"], SCHEMA)
    with pytest.raises(ValueError, match="named twice"):
        parse_key(["id", "ID"], SCHEMA)
    with pytest.raises(ValueError, match="expected COL"):
        parse_key(["id", ""], SCHEMA)


def _constraints(**sql: str) -> dict[str, str]:
    return {f"delta.constraints.{name}": text for name, text in sql.items()}


@pytest.mark.parametrize("sql,expected", [
    ("qty >= 0 AND qty <= 100", {"qty": (0, 100)}),
    ("qty BETWEEN 1 AND 50", {"qty": (1, 50)}),
    ("qty > 0 AND qty < 10", {"qty": (1, 9)}),  # strict on integers: the next value
    ("0 <= qty", {"qty": (0, None)}),  # constant on the left
    ("10 > qty", {"qty": (None, 9)}),
    ("qty = 7", {"qty": (7, 7)}),
    ("(qty >= -3) AND qty IS NOT NULL", {"qty": (-3, None)}),  # the simple conjunct only
    ("price > 0.5", {"price": (0.5, None)}),  # strict on floats: kept (still true)
    ("cost >= 0", {"cost": (Decimal("0"), None)}),
    ("day >= DATE '1992-01-01' AND day < '1999-01-01'",
     {"day": (dt.date(1992, 1, 1), dt.date(1998, 12, 31))}),
    ("day >= '1990-01-01'::date AND day <= '2010-12-31'::date",  # as delta-rs stores it
     {"day": (dt.date(1990, 1, 1), dt.date(2010, 12, 31))}),
    ("`qty` >= 0", {"qty": (0, None)}),
    # not simple bounds: ignored
    ("qty > 0 OR qty < -3", {}),
    ("NOT qty > 0", {}),
    ("qty >= id", {}),
    ("abs(qty) <= 5", {}),
    ("qty >= 0.5", {}),
    ("name >= 'a'", {}),
    ("t.qty >= 0", {}),
    ("nope >= 0", {}),
    ("this is not sql at all (", {}),
])
def test_simple_check_constraints_become_domains(sql, expected):
    assert constraint_domains(_constraints(c=sql), SCHEMA) == expected


def test_several_constraints_intersect_and_other_properties_are_ignored():
    conf = {**_constraints(a="qty >= 0", b="qty <= 100 AND qty >= 5", c="price <= 3"),
            "delta.enableChangeDataFeed": "true", "delta.constraintsx": "qty >= 50"}
    assert constraint_domains(conf, SCHEMA) == {"qty": (5, 100), "price": (None, 3.0)}
    # contradictory constraints bound nothing usable (no row passes them anyway)
    assert constraint_domains(_constraints(a="qty >= 10", b="qty <= 5"), SCHEMA) == {}


def test_declarations_travel_in_schema_metadata():
    domains = {"qty": (0, None), "day": (dt.date(1992, 1, 1), dt.date(1998, 12, 31)),
               "cost": (Decimal("0.10"), Decimal("9.90"))}
    schema = with_declared(SCHEMA, ("id",), domains)
    back = pa.ipc.read_schema(pa.py_buffer(schema.serialize().to_pybytes()))
    assert declared_of(back) == (("id",), domains)
    assert declared_of(with_declared(SCHEMA, None, {})) == (None, {})
    assert declared_of(SCHEMA) is None  # a server that sends none
    assert back.equals(SCHEMA)  # the columns are unchanged


def test_descriptions():
    assert describe_key(("a", "b")) == "(a, b)"
    assert describe_key(None) == "none (row ids)"
    assert describe_domains({}) == "-"
    assert describe_domains({"b": (None, 3), "a": (1.5, 2.5)}) == "a [1.5, 2.5], b (-inf, 3]"


def test_the_store_declares_its_tables_in_their_schema(tmp_path):
    store = DeltaStore(tmp_path)
    store.create_table("t", pa.table({"id": [1, 2], "qty": [3, 4]}), key=("id",),
                       domains={"qty": (0, 10)})
    store.create_table("bag", pa.table({"x": [1.0]}))
    assert declared_of(store.declared_schema("t")) == (("id",), {"qty": (0, 10)})
    assert declared_of(store.declared_schema("bag")) == (None, {})
    assert store.declared_schema("t").names == store.schema("t").names
