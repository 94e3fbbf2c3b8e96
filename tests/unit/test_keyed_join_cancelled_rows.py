"""A keyed join's right delta that cancels (a subquery's group whose value changed but
whose projected row did not, as TPC-DS q70's ``s_state IN (SELECT s_state ... GROUP BY
s_state)``) touches no key: the stored left rows of its key are not looked up, and the
maintained result and sketch still equal the reference's."""

from __future__ import annotations

import pyarrow as pa

from imp_core.embedded.api import Engine
from imp_core.engine.operators.keyed_join import KeyedJoinOp
from imp_core.oracle.reference import reference_capture

SQL = "SELECT a, b FROM r WHERE b IN (SELECT b FROM s GROUP BY b HAVING sum(c) > 0)"


def _engine() -> Engine:
    eng = Engine()
    eng.create_table("r", pa.table({"a": pa.array(range(40), pa.int64()),
                                    "b": pa.array([i % 2 for i in range(40)], pa.int64())}),
                     key="a")
    eng.create_table("s", pa.table({"k": pa.array([1, 2, 3], pa.int64()),
                                    "b": pa.array([0, 0, 1], pa.int64()),
                                    "c": pa.array([5, 6, 7], pa.int64())}), key="k")
    return eng


def test_a_cancelled_right_row_looks_up_no_left_rows(monkeypatch):
    eng = _engine()
    q = eng.register(SQL, {"r.a": [10, 20, 30]})
    looked_up: list[int] = []
    rows_of = KeyedJoinOp._rows_of

    def spy(self, lkeys, rkeys):
        looked_up.append(len(lkeys))
        return rows_of(self, lkeys, rkeys)

    monkeypatch.setattr(KeyedJoinOp, "_rows_of", spy)
    s = eng.tables()["s"]
    changed = s.set_column(2, "c", pa.array([5, 60, 7], pa.int64()))
    eng.update("s", s.slice(1, 1), changed.slice(1, 1))  # b = 0 keeps sum(c) > 0
    assert looked_up and max(looked_up) == 0
    full = reference_capture(q.plan, eng.tables(), q.partitions)
    assert q.result_rows() == full.rows() and q.sketch == full.sketch
    # a change that does flip membership still reaches the left rows
    eng.update("s", changed.slice(2, 1), changed.slice(2, 1).set_column(
        2, "c", pa.array([-7], pa.int64())))
    assert max(looked_up) > 0
    full = reference_capture(q.plan, eng.tables(), q.partitions)
    assert q.result_rows() == full.rows() and q.sketch == full.sketch
    assert {b for _, b in q.result_rows()} == {0}
