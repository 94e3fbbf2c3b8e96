"""The read-only check on client SQL: SELECTs pass, anything that writes, changes the
session, calls into the JVM or reads files by path is refused with its position."""

from __future__ import annotations

import pytest

from imp_core.errors import NotReadOnlyError, SqlSyntaxError
from imp_core.sql.readonly import check_read_only_select

ACCEPTED = [
    "SELECT a FROM t",
    "select a, count(*) AS n FROM t WHERE b > 1 GROUP BY a HAVING count(*) > 2",
    "WITH x AS (SELECT a FROM t) SELECT * FROM x",
    "(SELECT a FROM t) UNION ALL (SELECT a FROM u)",
    "SELECT * FROM t WHERE a IN (SELECT b FROM u)",
    "-- sketch: t.a\nSELECT a FROM t;",
]

REFUSED = [
    ("INSERT INTO t VALUES (1)", "an INSERT statement", 1, 1),
    ("  DELETE FROM t WHERE a = 1", "a DELETE statement", 1, 3),
    ("UPDATE t SET a = 1", "an UPDATE statement", 1, 1),
    ("-- note\nMERGE INTO t USING s ON t.a = s.a WHEN MATCHED THEN DELETE",
     "a MERGE statement", 2, 1),
    ("CREATE TABLE x AS SELECT 1", "a CREATE statement", 1, 1),
    ("DROP TABLE t", "a DROP statement", 1, 1),
    ("SET spark.sql.shuffle.partitions = 1", "a SET statement", 1, 1),
    ("CACHE TABLE t", "a CACHE statement", 1, 1),
    ("ADD JAR /tmp/x.jar", "an ADD JAR statement", 1, 1),
    ("WITH a AS (INSERT INTO t SELECT 1) SELECT 1", "an INSERT statement", 1, 12),
    ("SELECT * INTO t2 FROM t", "SELECT ... INTO", 1, None),
    ("SELECT 1; DROP TABLE t", "more than one statement", 1, None),
    ("SELECT reflect('java.lang.Runtime', 'getRuntime')", "the function reflect()", 1, 8),
    ("SELECT java_method('java.lang.System', 'exit', 1)", "the function java_method()", 1, 8),
    ("SELECT * FROM parquet.`/etc/secrets`", "a file read by path", 1, None),
    ("VALUES (1)", "a VALUES statement", 1, 1),
]


@pytest.mark.parametrize("sql", ACCEPTED)
def test_select_is_accepted(sql):
    query = check_read_only_select(sql)
    assert query.key in ("select", "union")


@pytest.mark.parametrize("sql,what,line,column", REFUSED, ids=[r[1] for r in REFUSED])
def test_non_select_is_refused_with_position(sql, what, line, column):
    with pytest.raises(NotReadOnlyError) as info:
        check_read_only_select(sql)
    err = info.value
    assert err.code == "INVALID_ARGUMENT"
    assert err.what.startswith(what)
    assert "only read-only SELECT statements are accepted" in str(err)
    assert err.line == line
    if column is not None:
        assert err.column == column


@pytest.mark.parametrize("sql", ["SELEC a FROM t", "SELEC a", "", "SELECT a FROM"])
def test_malformed_sql_is_a_syntax_error(sql):
    with pytest.raises(SqlSyntaxError) as info:
        check_read_only_select(sql)
    assert info.value.code == "INVALID_ARGUMENT"
    assert info.value.line == 1 and info.value.column is not None
