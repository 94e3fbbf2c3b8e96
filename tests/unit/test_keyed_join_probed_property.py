"""Property tests of semi-, anti- and outer joins whose sides are probed, not held.

Every join side that can be probed of the plan (inner joins included) is a ``ProbedSide`` answered
by the reference evaluator over the tables *at the side's versions* (``MirrorSide``): the
world keeps each table state a batch started from, and the batch context tells the side
which one it stands at, as the Delta versions do for a side read from files. After every
random batch the maintained result and sketch must equal the reference evaluator's over
the current tables (``World.apply`` asserts both), so a probe made at the wrong versions,
a key left out of a lookup or a Bloom filter that misses a key fails the test. NOT IN
keeps its sides in memory (its output depends on the whole right side), which the test
checks too.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from diff_harness import HypChooser, World, col, lit, op, qplan, scan
from hypothesis import given, settings
from hypothesis import strategies as st
from test_operators_property import SCALE, parts_r, parts_rs

from imp_core.engine.pipeline import EngineOptions, IncrementalQuery
from imp_core.engine.probed_side import ProbedSide, VersionContext, is_probed
from imp_core.engine.zset import DeltaBatch
from imp_core.oracle.reference import reference_evaluate
from imp_core.plan.nodes import (
    AggCall,
    Aggregate,
    Join,
    NamedExpr,
    OuterJoin,
    PlanNode,
    Project,
    SemiJoin,
)

SETTINGS = settings(max_examples=int(60 * SCALE), deadline=None)

R = ("a", "b", "c")
S = ("c", "d", "e")


class MirrorSide(ProbedSide):
    """A probed side whose lookups evaluate its subtree over the world's tables at the
    side's versions (a version is the number of batches applied before it)."""

    kind = "mirror"

    def __init__(self, node: PlanNode, keys: tuple[str, ...], context: VersionContext,
                 world: ProbedWorld):
        super().__init__(node, keys, context, use_bloom=True)
        self.world = world

    def _rows(self) -> DeltaBatch:
        assert self.versions is not None
        tables = {t: self.world.at(v)[t] for t, v in self.versions.items()}
        return reference_evaluate(self.node, tables, self.world.partitions).to_batch()

    def lookup(self, probe_keys: pa.Table) -> DeltaBatch:
        rows = self._rows()
        names = list(self.key_columns)
        keyed = rows.data.select(names).append_column(
            "__row", pa.array(np.arange(len(rows), dtype=np.int64)))
        probes = probe_keys.rename_columns(names)
        found = keyed.join(probes, names, join_type="left semi")
        return rows.take(np.sort(found.column("__row").to_numpy()))

    def distinct_keys(self) -> pa.Table:
        names = list(self.key_columns)
        return self._rows().data.select(names).group_by(names).aggregate([])


class ProbedWorld(World):
    """A ``World`` whose pipeline probes, through ``MirrorSide``, every join side that
    can be probed."""

    def __init__(self, plan, partitions, tables):
        self.history: list[dict[str, pa.Table]] = []
        self.context = VersionContext()
        self.sides: list[ProbedSide] = []
        super().__init__(plan, partitions, tables)

    def at(self, version: int) -> dict[str, pa.Table]:
        return self.history[version] if version < len(self.history) else self.tables()

    PROBED = ("left", "right")  # the join sides it probes

    def new_pipeline(self, options: EngineOptions = EngineOptions()) -> IncrementalQuery:
        def choose(node: PlanNode, which: str) -> ProbedSide | None:
            if which not in self.PROBED:  # aggregations keep their groups (NULL keys drawn)
                return None
            keys = node.equi_keys()[0 if which == "left" else 1]
            side = MirrorSide(node.left if which == "left" else node.right, keys,
                              self.context, self)
            self.sides.append(side)
            return side

        return IncrementalQuery(self.plan, self.partitions, options, join_sides=choose)

    def apply(self, changes, pipelines=None) -> None:
        n = len(self.history)
        self.history.append(self.tables())  # the tables batch n starts from
        names = sorted(self.rows)
        self.context.begin(None if n == 0 else {t: n for t in names},
                           {t: n + 1 for t in names})
        super().apply(changes, pipelines)


class OpenProbedWorld(ProbedWorld):
    """A ``ProbedWorld`` whose probed sides are all open: no Bloom filter, every key is
    looked up (what a registration makes of sides whose keys come from whole tables)."""

    def new_pipeline(self, options: EngineOptions = EngineOptions()) -> IncrementalQuery:
        pipeline = super().new_pipeline(options)
        for side in self.sides:
            side.make_open()
        return pipeline


def _run(data, root, partitions_fn=parts_rs, tables=("r", "s"), steps=7,
         world_type: type[ProbedWorld] = ProbedWorld) -> ProbedWorld:
    ch = HypChooser(data)
    world = world_type(qplan(root), partitions_fn(ch), tables)
    world.run(ch, steps=steps)
    return world


def _probed_keyed(world: ProbedWorld) -> list[bool]:
    return [is_probed(s) for o in world.pipelines[0].operators
            if o.kind in ("semi_join", "anti_join", "outer_join") for s in (o.left, o.right)]


@SETTINGS
@given(st.data())
def test_probed_semi_join_with_residual(data):
    cond = op("and", op("=", col("r.b"), col("s.d")), op("<>", col("s.e"), col("r.c")))
    world = _run(data, SemiJoin(scan("r", R), scan("s", S), cond))
    assert _probed_keyed(world) == [True, True]


@SETTINGS
@given(st.data())
def test_probed_anti_join(data):
    cond = op("and", op("=", col("r.b"), col("s.d")), op("<", col("s.c"), col("r.a")))
    world = _run(data, SemiJoin(scan("r", R), scan("s", S), cond, anti=True))
    assert _probed_keyed(world) == [True, True]


@SETTINGS
@given(st.data())
def test_not_in_keeps_its_sides_in_memory(data):
    root = SemiJoin(scan("r", R), scan("s", S), op("=", col("r.b"), col("s.e")), anti=True,
                    null_aware=True)
    world = _run(data, root)
    assert _probed_keyed(world) == [False, False]


@SETTINGS
@given(st.data())
def test_probed_self_semi_and_anti_join(data):
    r1, r2, r3 = scan("r", R, alias="r1"), scan("r", R, alias="r2"), scan("r", R, alias="r3")
    exists = SemiJoin(r1, r2, op("and", op("=", col("r1.b"), col("r2.b")),
                                  op("<>", col("r2.c"), col("r1.c"))))
    root = SemiJoin(exists, r3, op("and", op("=", col("r1.b"), col("r3.b")),
                                   op(">", col("r3.a"), col("r1.a"))), anti=True)
    world = _run(data, root, parts_r, ("r",))
    assert _probed_keyed(world) == [True] * 4


@SETTINGS
@given(st.data())
def test_probed_semi_join_over_an_inner_join_under_an_aggregate(data):
    inner = Join(scan("r", R), scan("s", S), op("=", col("r.c"), col("s.c")))
    semi = SemiJoin(inner, scan("s", S, alias="s2"), op("=", col("r.b"), col("s2.d")))
    agg = Aggregate(semi, ("r.b",), (AggCall("sum", "r.a", "sa"),))
    world = _run(data, agg)
    assert _probed_keyed(world) == [True, True]
    assert len(world.sides) == 4


@SETTINGS
@given(st.data())
def test_probed_left_outer_join_under_count(data):
    join = OuterJoin(scan("r", R), scan("s", S), op("and", op("=", col("r.b"), col("s.d")),
                                                     op(">", col("s.e"), lit(1))), "left")
    pre = Project(join, (NamedExpr("a", col("r.a")), NamedExpr("sc", col("s.c"))))
    agg = Aggregate(pre, ("a",), (AggCall("count", "sc", "n"),))
    world = _run(data, Aggregate(agg, ("n",), (AggCall("count_star", None, "k"),)))
    assert _probed_keyed(world) == [True, True]


@SETTINGS
@given(st.data())
def test_probed_full_outer_join(data):
    world = _run(data, OuterJoin(scan("r", R), scan("s", S),
                                 op("=", col("r.c"), col("s.d")), "full"))
    assert _probed_keyed(world) == [True, True]



@SETTINGS
@given(st.data())
def test_open_sides_look_up_every_key_and_stay_exact(data):
    inner = Join(scan("r", R), scan("s", S), op("=", col("r.c"), col("s.c")))
    semi = SemiJoin(inner, scan("s", S, alias="s2"), op("=", col("r.b"), col("s2.d")))
    world = _run(data, Aggregate(semi, ("r.b",), (AggCall("sum", "r.a", "sa"),)),
                 world_type=OpenProbedWorld)
    assert len(world.sides) == 4
    assert all(s.open and s.bloom is None and s.probes_skipped == 0 for s in world.sides)
