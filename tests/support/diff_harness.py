"""Shared harness for the differential engine tests (not a test module itself).

A ``World`` holds the current contents of a few small base tables as Python bags, feeds
random batches of changes to one or more ``IncrementalQuery`` pipelines, and after every
batch compares each pipeline's sketch and annotated result with the non-incremental
oracle ``reference_capture`` over the current tables.

Random choices go through a ``Chooser`` so that the same batch generator serves both
hypothesis (``HypChooser``: shrinkable draws) and seeded deterministic runs
(``RandChooser``).
"""

from __future__ import annotations

import random
from collections import Counter
from contextlib import contextmanager
from decimal import Decimal
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import pyarrow as pa
from hypothesis import strategies as st
from strategies import indices

from imp_core.engine.operators.base import TableDelta
from imp_core.engine.pipeline import EngineOptions, IncrementalQuery
from imp_core.oracle.reference import reference_capture, reference_evaluate
from imp_core.plan.expr import BinaryOp, ColumnRef, Expr, Literal
from imp_core.plan.nodes import Field, PlanNode, QueryPlan, Scan
from imp_core.sketch.partition import PartitionSet, RangePartition

# -- tables -------------------------------------------------------------------------------

DEC = pa.decimal128(10, 2)

SCHEMAS: dict[str, pa.Schema] = {
    # a: partition column (never NULL); b, c: small nullable ints (group / join keys);
    # f: doubles chosen so that naive summation drifts; m: decimals.
    "r": pa.schema([("a", pa.int64()), ("b", pa.int64()), ("c", pa.int64()),
                    ("f", pa.float64()), ("m", DEC)]),
    # c: partition column (never NULL); d: join key; e: nullable int.
    "s": pa.schema([("c", pa.int64()), ("d", pa.int64()), ("e", pa.int64())]),
}

FLOATS = (0.1, 0.2, 0.3, 1e16, -1e16, 2.5, -0.7, 1e-3, 3.0, 1 / 3, -2.0**-30)
DECIMALS = tuple(Decimal(x) for x in ("0.01", "12.34", "-5.50", "99999999.99", "0.00",
                                      "-0.07", "3.33"))

# the column used to pick "delete a whole group"
GROUP_COLUMN = {"r": 1, "s": 1}


class Chooser:
    def int(self, lo: int, hi: int) -> int:  # pragma: no cover - interface
        raise NotImplementedError

    def bool(self) -> bool:
        return self.int(0, 1) == 1

    def one_in(self, n: int) -> bool:
        return self.int(0, n - 1) == 0

    def choice(self, seq: Sequence[Any]) -> Any:
        return seq[self.int(0, len(seq) - 1)]

    def subset(self, n: int, max_size: int | None = None) -> list[int]:
        """Distinct indices into a sequence of length ``n``."""
        raise NotImplementedError  # pragma: no cover


class HypChooser(Chooser):
    """Choices drawn by Hypothesis (so a failure shrinks and replays). The many small
    integers go through one ``st.randoms`` whose calls Hypothesis draws and shrinks:
    about 25 us a choice, against about 150 us for a ``data.draw`` of its own (which also
    checks the global random state and records the value for the report)."""

    def __init__(self, data: st.DataObject):
        self.data = data
        self.rng = data.draw(st.randoms(use_true_random=False, note_method_calls=False))

    def int(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)

    def subset(self, n: int, max_size: int | None = None) -> list[int]:
        if n == 0:
            return []
        return self.data.draw(indices(n, max_size=max_size, unique=True))


class RandChooser(Chooser):
    def __init__(self, seed: int):
        self.rng = random.Random(seed)

    def int(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)

    def subset(self, n: int, max_size: int | None = None) -> list[int]:
        k = self.rng.randint(0, n if max_size is None else min(n, max_size))
        return self.rng.sample(range(n), k)


def _maybe_null(ch: Chooser, value_fn: Callable[[], Any], odds: int = 6) -> Any:
    return None if ch.one_in(odds) else value_fn()


def gen_row(table: str, ch: Chooser) -> tuple:
    if table == "r":
        return (ch.int(0, 9),
                _maybe_null(ch, lambda: ch.int(0, 3)),
                _maybe_null(ch, lambda: ch.int(0, 4)),
                _maybe_null(ch, lambda: ch.choice(FLOATS)),
                _maybe_null(ch, lambda: ch.choice(DECIMALS)))
    if table == "s":
        return (ch.int(0, 9),
                _maybe_null(ch, lambda: ch.int(0, 4), odds=10),
                _maybe_null(ch, lambda: ch.int(0, 4)))
    raise KeyError(table)


def to_arrow(table: str, rows: Sequence[tuple]) -> pa.Table:
    schema = SCHEMAS[table]
    cols = [pa.array([r[i] for r in rows], type=f.type) for i, f in enumerate(schema)]
    return pa.Table.from_arrays(cols, schema=schema)


# -- plan building ------------------------------------------------------------------------

def scan(table: str, cols: Sequence[str], alias: str | None = None) -> Scan:
    alias = alias or table
    schema = SCHEMAS[table]
    return Scan(table, tuple(cols),
                tuple(Field(f"{alias}.{c}", schema.field(c).type) for c in cols))


def col(name: str) -> ColumnRef:
    return ColumnRef(name)


def lit(value: Any, dtype: pa.DataType = pa.int64()) -> Literal:
    return Literal(value, dtype)


def op(o: str, left: Expr, right: Expr) -> BinaryOp:
    return BinaryOp(o, left, right)


def qplan(root: PlanNode) -> QueryPlan:
    return QueryPlan("-- built by hand", root)


def random_partition(ch: Chooser, table: str, column: str = "a", lo: int = -1,
                     hi: int = 11, max_bounds: int = 4) -> RangePartition:
    """A range partition on ``table.column`` with random split points in [lo, hi]."""
    idx = ch.subset(hi - lo + 1, max_size=max_bounds)
    bounds = sorted(lo + i for i in idx)
    return RangePartition.from_bounds(table, column, SCHEMAS[table].field(column).type, bounds)


# -- the world ----------------------------------------------------------------------------

BATCH_KINDS = ("insert", "delete", "mixed", "empty", "delete_group", "clear", "churn",
               "weighted")


class World:
    """Base tables + pipelines under test; ``step`` applies one random batch and checks."""

    def __init__(self, plan: QueryPlan, partitions: PartitionSet, tables: Sequence[str],
                 options: Sequence[EngineOptions] = (EngineOptions(),), with_source: bool = False,
                 check_result: bool = True):
        self.plan = plan
        self.partitions = partitions
        self.rows: dict[str, list[tuple]] = {t: [] for t in tables}
        self._arrow: dict[str, pa.Table] = {t: to_arrow(t, []) for t in tables}
        self.check_result = check_result
        self.with_source = with_source
        self.options = list(options)
        self.pipelines = [self.new_pipeline(o) for o in self.options]
        self.batches = 0

    # -- pipelines ------------------------------------------------------------------------
    def source(self, node: PlanNode):
        return reference_evaluate(node, self.tables(), self.partitions).to_batch()

    def new_pipeline(self, options: EngineOptions = EngineOptions()) -> IncrementalQuery:
        return IncrementalQuery(self.plan, self.partitions, options,
                                source=self.source if self.with_source else None)

    def tables(self) -> dict[str, pa.Table]:
        return dict(self._arrow)

    # -- batches --------------------------------------------------------------------------
    def random_changes(self, ch: Chooser, table: str, kind: str | None = None
                       ) -> tuple[list[tuple], list[int]]:
        """(rows, weights) of one random batch for ``table`` given its current contents."""
        cur = self.rows[table]
        kind = kind or ch.choice(BATCH_KINDS)
        rows: list[tuple] = []
        weights: list[int] = []

        def inserts(max_n: int) -> None:
            for _ in range(ch.int(0, max_n)):
                if cur and ch.one_in(4):
                    row = ch.choice(cur)  # a duplicate of an existing tuple
                else:
                    row = gen_row(table, ch)
                for _ in range(ch.int(1, 2)):  # sometimes twice in one batch
                    rows.append(row), weights.append(1)

        def deletes(max_n: int | None) -> None:
            for i in ch.subset(len(cur), max_size=max_n):
                rows.append(cur[i]), weights.append(-1)

        if kind == "insert":
            inserts(5)
        elif kind == "delete":
            deletes(4)
        elif kind == "mixed":
            if ch.bool():
                deletes(3)
                inserts(3)
            else:
                inserts(3)
                deletes(3)
        elif kind == "delete_group" and cur:
            g = GROUP_COLUMN[table]
            value = ch.choice(cur)[g]
            for r in cur:
                if r[g] == value:
                    rows.append(r), weights.append(-1)
            if ch.bool():
                inserts(2)
        elif kind == "clear":
            for r in cur:
                rows.append(r), weights.append(-1)
        elif kind == "churn":
            # a tuple inserted and deleted in the same batch, next to real changes
            row = gen_row(table, ch)
            deletes(2)
            rows.extend([row, row]), weights.extend([1, -1])
            inserts(1)
        elif kind == "weighted":
            # a multiplicity other than one in a single delta row
            row = gen_row(table, ch) if not cur or ch.bool() else ch.choice(cur)
            rows.append(row), weights.append(ch.int(2, 3))
            if cur:
                victim = ch.choice(cur)
                n = sum(1 for r in cur if r == victim)
                rows.append(victim), weights.append(-n)
        return rows, weights

    def apply(self, changes: dict[str, tuple[list[tuple], list[int]]],
              pipelines: Sequence[IncrementalQuery] | None = None) -> None:
        """Apply explicit changes to the tables and to the pipelines, then check."""
        deltas = {}
        for table, (rows, weights) in changes.items():
            bag = Counter(self.rows[table])
            for r, w in zip(rows, weights):
                bag[r] += w
                assert bag[r] >= 0, f"test bug: deleting {r} which {table} does not hold"
            self.rows[table] = [r for r, m in bag.items() for _ in range(m)]
            self._arrow[table] = to_arrow(table, self.rows[table])
            deltas[table] = TableDelta(to_arrow(table, rows), np.array(weights, dtype=np.int64))
        self.batches += 1
        for q in (self.pipelines if pipelines is None else pipelines):
            before = q.sketch().fragments
            delta = q.apply(deltas)
            after = q.sketch().fragments
            assert (before | delta.added) - delta.removed == after, "sketch delta inconsistent"
            assert not (delta.added & delta.removed)
        self.check(pipelines)

    def step(self, ch: Chooser, kind: str | None = None) -> None:
        changes = {}
        for table in self.rows:
            if len(self.rows) > 1 and ch.one_in(3):
                continue  # leave this table alone in this batch
            changes[table] = self.random_changes(ch, table, kind)
        self.apply(changes)

    def bootstrap(self, ch: Chooser, max_rows: int = 8) -> None:
        changes = {}
        for table in self.rows:
            rows = [gen_row(table, ch) for _ in range(ch.int(0, max_rows))]
            changes[table] = (rows, [1] * len(rows))
        self.apply(changes)

    def run(self, ch: Chooser, steps: int = 6, max_rows: int = 8) -> None:
        self.bootstrap(ch, max_rows)
        for _ in range(ch.int(1, steps)):
            self.step(ch)

    # -- checking -------------------------------------------------------------------------
    def check(self, pipelines: Sequence[IncrementalQuery] | None = None) -> None:
        ref = reference_capture(self.plan, self.tables(), self.partitions)
        for i, q in enumerate(self.pipelines if pipelines is None else pipelines):
            assert q.sketch() == ref.sketch, (
                f"pipeline {i}: sketch {q.sketch()} != reference {ref.sketch} after batch "
                f"{self.batches}; tables {self.rows}")
            if self.check_result:
                got = q.result().to_counter()
                want = Counter(ref.bag.items)
                assert got == want, (
                    f"pipeline {i}: annotated result differs after batch {self.batches}:\n"
                    f"  missing {want - got}\n  extra   {got - want}\n  tables {self.rows}")


def operators_of(q: IncrementalQuery, cls: type) -> list:
    return [o for o in q.operators if isinstance(o, cls)]


@contextmanager
def setting(owner: Any, name: str, value: Any) -> Iterator[None]:
    """``owner.name`` set to ``value`` for the block, then restored: a module fixture's
    tuning (hypothesis runs many examples per test, and monkeypatch is per function)."""
    before = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, before)
