"""Semi-, anti- (also NOT IN) and outer joins in every layer that walks plans, without Spark.

- lineage: ``trace_column`` passes a semi/anti-join's left input and a LEFT join's
  preserved input, and an outer join's NULL-padded side only when asked to;
- data layer: only inner equi-join inputs are ever probed (keyed-join inputs stay in
  memory and count against the budget), row bounds, and join sides probed from the files
  above and below keyed joins (key filters through a padded side) stay exact through
  random updates;
- sharding: queries whose routed table is on the left of semi/anti/LEFT joins are split,
  a group key from a padded side is refused with the reason, and the re-split state of
  each shard equals the state that shard builds from its routed input;
- the Spark SQL text of each node (no Spark started) and the pipeline's stats.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pyarrow as pa
import pytest
from diff_harness import RandChooser, col, gen_row, lit, op, qplan, scan, to_arrow
from probed_runs import FACTS, random_change, store_of, tables_for
from state_canon import canonical_state

from imp_actors.resharding import reshard
from imp_actors.sharding import ShardKey, route_rows, shard_key, shard_of
from imp_core.engine.operators.base import TableDelta
from imp_core.engine.pipeline import EngineOptions, IncrementalQuery
from imp_core.engine.probed_side import is_probed
from imp_core.errors import SparkCompileError, UnshardableQueryError
from imp_core.oracle.reference import reference_capture
from imp_core.plan.expr import BinaryOp
from imp_core.plan.lineage import trace_column
from imp_core.plan.nodes import (
    AggCall,
    Aggregate,
    Field,
    Join,
    NamedExpr,
    OuterJoin,
    PlanNode,
    Project,
    QueryPlan,
    Scan,
    Select,
    SemiJoin,
)
from imp_core.plan.paths import OperatorPath, parse_paths
from imp_core.query.data_layer import (
    DataLayer,
    direct_triggers,
    filterable,
    join_sides,
    place_join_sides,
    probe_triggers,
    row_bound,
)
from imp_core.sketch.partition import PartitionSet, RangePartition
from imp_core.spark.bootstrap import has_stateful
from imp_core.spark.compile import annotated_sql, plain_sql
from imp_core.storage import ChangeReader

R = ("a", "b", "c", "f", "m")
S = ("c", "d", "e")


def _eq(a: str, b: str) -> BinaryOp:
    return op("=", col(a), col(b))


# -- lineage ---------------------------------------------------------------------------------
def test_trace_column_through_semi_and_outer_joins():
    r, s = scan("r", R), scan("s", S)
    for anti in (False, True):
        semi = SemiJoin(r, s, _eq("r.b", "s.d"), anti=anti)
        assert trace_column(semi, "r.b") == (r, "b")
        assert trace_column(semi, "s.d") is None  # not an output column
    left = OuterJoin(r, s, _eq("r.b", "s.d"), "left")
    assert trace_column(left, "r.a") == (r, "a")
    assert trace_column(left, "s.c") is None  # NULL on padded rows
    assert trace_column(left, "s.c", through_padding=True) == (s, "c")
    full = OuterJoin(r, s, _eq("r.b", "s.d"), "full")
    assert trace_column(full, "r.a") is None and trace_column(full, "s.c") is None
    assert trace_column(full, "r.a", through_padding=True) == (r, "a")
    nested = Join(left, scan("s", S, alias="s2"), _eq("s.d", "s2.d"))
    assert trace_column(nested, "s.d") is None
    assert trace_column(nested, "s.d", through_padding=True) == (s, "d")


# -- data layer ------------------------------------------------------------------------------
def _facts(alias: str = "facts") -> Scan:
    return Scan("facts", ("id", "k", "v"),
                tuple(Field(f"{alias}.{c}", FACTS.field(c).type) for c in ("id", "k", "v")))


def _dims() -> Scan:
    return Scan("dims", ("dk", "w"), (Field("dims.dk", pa.int64()), Field("dims.w", pa.int64())))


def _tags() -> Scan:
    return Scan("tags", ("tk", "z"), (Field("tags.tk", pa.int64()), Field("tags.z", pa.int64())))


def test_keyed_join_inputs_are_probable_but_not_those_of_not_in():
    inner = Join(_facts(), _dims(), _eq("facts.k", "dims.dk"))
    root = SemiJoin(inner, _tags(), _eq("dims.w", "tags.tk"), anti=True)
    sides = list(join_sides(root))
    assert [(str(sid), which) for sid, _, which, _ in sides] == [
        ("0.0:left", "left"), ("0.0:right", "right"), ("0:left", "left"),
        ("0:right", "right")]
    sizes = {"facts": 50, "dims": 10, "tags": 100}

    def size(node: PlanNode) -> int:
        return sum(sizes[t] for t in node.tables())

    # in memory: the inner join's sides (50 + 10), the anti-join's inputs (60 + 100)
    assert place_join_sides(root, size, 220) == frozenset()
    assert place_join_sides(root, size, 200) == parse_paths(["0:right"])  # 120 left
    assert place_join_sides(root, size, 100) == parse_paths(["0:right", "0:left"])

    nai = SemiJoin(inner, _tags(), _eq("dims.w", "tags.tk"), anti=True, null_aware=True)
    assert [str(sid) for sid, *_ in join_sides(nai)] == ["0.0:left", "0.0:right"]
    # NOT IN's inputs count against the budget but are never probed
    assert place_join_sides(nai, size, 150) == parse_paths(["0.0:left", "0.0:right"])


def test_placement_by_change_rate_probes_the_sides_few_changes_ask_for():
    """With rates of change, a side goes first when few lookups per byte follow: an inner
    join's side is looked up on the other side's changes, a semi-join's left side only on
    its right input's, its right side on either's."""
    inner = Join(_facts(), _dims(), _eq("facts.k", "dims.dk"))
    root = SemiJoin(inner, _tags(), _eq("dims.w", "tags.tk"))
    sizes = {"facts": 100, "dims": 40, "tags": 30}

    def size(node: PlanNode) -> int:
        return sum(sizes[t] for t in node.tables())

    assert probe_triggers(inner, "left") == {"dims"}
    assert probe_triggers(root, "left") == {"tags"}
    assert probe_triggers(root, "right") == {"facts", "dims", "tags"}
    # facts changes most: its own side (asked when dims change) goes before the larger
    # semi-join input (asked when tags change), and dims' side (asked on every facts
    # change) stays in memory as long as anything else can go
    rates = {"facts": 1000.0, "dims": 1.0, "tags": 10.0}
    total = 100 + 40 + 140 + 30
    assert place_join_sides(root, size, total - 100, rates) == parse_paths(["0.0:left"])
    assert place_join_sides(root, size, total - 200, rates) == \
        parse_paths(["0.0:left", "0:left"])
    # dims' side, which every facts change asks for, and the semi-join's right input,
    # which every change asks for, stay in memory however small the budget
    assert place_join_sides(root, size, 20, rates) == parse_paths(["0.0:left", "0:left"])
    assert place_join_sides(root, size, 1, rates) == parse_paths(["0.0:left", "0:left"])
    # behind an aggregation the busiest table's changes rarely reach a side: an IN
    # subquery grouped over facts leaves the semi-join's left input cold
    grouped = Aggregate(_facts("f2"), ("f2.k",), (AggCall("count_star", None, "n"),))
    having = Select(grouped, op(">", col("n"), lit(3)))
    keys_only = Project(having, (NamedExpr("f2.k", col("f2.k")),))
    over_groups = SemiJoin(_dims(), keys_only, _eq("dims.dk", "f2.k"))
    assert direct_triggers(over_groups, "left") == frozenset()
    assert probe_triggers(over_groups, "left") == {"facts"}
    assert place_join_sides(over_groups, size, 1, rates) == parse_paths(["0:left"])
    # the aggregate's values themselves change with every facts change: not cold
    over_values = Join(_dims(), grouped, _eq("dims.dk", "f2.k"))
    assert direct_triggers(over_values, "left") == {"facts"}
    assert place_join_sides(over_values, size, 1, rates) == frozenset()
    # without rates the largest side goes first
    assert place_join_sides(root, size, total - 100) == parse_paths(["0:left"])
    assert place_join_sides(root, size, 0, rates) == frozenset(s for s, *_ in join_sides(root))


def test_a_side_read_whole_by_every_lookup_is_not_probed():
    """A side scanning a table twice (a self-join) is read whole by a file lookup: with
    rates it stays in memory whatever the budget but 0 (every side)."""
    self_join = Join(_facts(), _facts("f2"), _eq("facts.k", "f2.k"))
    root = SemiJoin(self_join, _tags(), _eq("facts.v", "tags.tk"))
    assert not filterable(self_join, ("facts.v",))
    assert filterable(_tags(), ("tags.tk",))

    def size(node: PlanNode) -> int:
        return 100 * len(node.tables()) + (100 if node is self_join else 0)

    rates = {"facts": 1000.0, "tags": 1.0}
    placed = place_join_sides(root, size, 1, rates)
    # the left input (tags' changes ask for it) would be cold, were it not read whole
    assert OperatorPath.parse("0:left") not in placed
    assert OperatorPath.parse("0:left") in place_join_sides(root, size, 0, rates)
    full = OuterJoin(_facts(), _dims(), _eq("facts.k", "dims.dk"), "full")
    assert probe_triggers(full, "left") == {"facts", "dims"}


def test_row_bounds_of_semi_and_outer_joins():
    r, s = scan("r", R), scan("s", S)
    rows = {"r": 7, "s": 5}
    assert row_bound(SemiJoin(r, s, _eq("r.b", "s.d")), rows) == 7
    assert row_bound(OuterJoin(r, s, _eq("r.b", "s.d"), "left"), rows) == 7 * 5 + 7
    assert row_bound(OuterJoin(r, s, _eq("r.b", "s.d"), "full"), rows) == 7 * 5 + 7 + 5


class _PlanRun:
    """A hand-built plan maintained through the data layer, every inner join side probed
    from the files (with ``probe_keyed`` every side that can be probed of semi-, anti- and outer
    joins too), from the store's change feed."""

    def __init__(self, store, root: PlanNode, probe_keyed: bool = False):
        self.store = store
        self.plan = QueryPlan("-- built by hand", root)
        data = store.read("facts")
        self.partitions = PartitionSet((RangePartition.equi_depth("facts", "k",
                                                                  data.column("k"), 4),))
        placement = frozenset(sid for sid, join, *_ in join_sides(root)
                              if probe_keyed or isinstance(join, Join))
        self.wiring = DataLayer(store).wire(self.plan, self.partitions, EngineOptions(),
                                            placement)
        self.versions = {t: store.version(t) for t in sorted(root.tables())}
        self.reader = ChangeReader(store)
        self.wiring.context.begin(None, self.versions)
        self.wiring.pipeline.apply({t: TableDelta.inserts(store.read(t, v))
                                    for t, v in self.versions.items()})

    def maintain(self) -> None:
        target = {t: self.store.version(t) for t in self.versions}
        changes = {t: self.reader.changes(t, self.versions[t], v)
                   for t, v in target.items() if v > self.versions[t]}
        self.wiring.context.begin(self.versions, target)
        self.wiring.pipeline.apply(changes)
        self.versions = target

    def check(self) -> None:
        tables = {t: self.store.read(t, v) for t, v in self.versions.items()}
        ref = reference_capture(self.plan, tables, self.partitions)
        assert self.wiring.pipeline.sketch() == ref.sketch
        assert self.wiring.pipeline.result().to_counter() == ref.bag.items


def _semi_over_probed_join() -> PlanNode:
    inner = Join(_facts(), _dims(), _eq("facts.k", "dims.dk"))
    semi = SemiJoin(inner, _tags(), op("and", _eq("dims.w", "tags.tk"),
                                       op(">", col("tags.z"), lit(10))))
    return Aggregate(semi, ("facts.k",), (AggCall("sum", "facts.v", "sv"),))


def _probed_outer_join_preserved_key() -> PlanNode:
    outer = OuterJoin(_dims(), _tags(), _eq("dims.w", "tags.tk"), "left")
    return Join(_facts(), outer, _eq("facts.k", "dims.dk"))


def _probed_outer_join_padded_key() -> PlanNode:
    outer = OuterJoin(_tags(), _dims(), _eq("tags.tk", "dims.w"), "left")
    return Join(_facts(), outer, _eq("facts.k", "dims.dk"))


def _anti_over_probed_join() -> PlanNode:
    inner = Join(_facts(), _dims(), _eq("facts.k", "dims.dk"))
    anti = SemiJoin(inner, _tags(), op("and", _eq("dims.w", "tags.tk"),
                                       op(">", col("tags.z"), col("facts.v"))), anti=True)
    return Aggregate(anti, ("dims.w",), (AggCall("count_star", None, "n"),))


def _not_in_over_probed_join() -> PlanNode:
    inner = Join(_facts(), _dims(), _eq("facts.k", "dims.dk"))
    return SemiJoin(inner, _tags(), _eq("dims.w", "tags.tk"), anti=True, null_aware=True)


def _full_outer_join() -> PlanNode:
    outer = OuterJoin(_dims(), _tags(), _eq("dims.w", "tags.tk"), "full")
    return Join(_facts(), outer, _eq("facts.k", "dims.dk"))


KEYED_BUILDS = [_semi_over_probed_join, _probed_outer_join_preserved_key,
                _probed_outer_join_padded_key, _anti_over_probed_join,
                _not_in_over_probed_join, _full_outer_join]


@pytest.mark.parametrize("probe_keyed", [False, True], ids=["keyed-in-memory", "keyed-probed"])
@pytest.mark.parametrize("build", KEYED_BUILDS)
def test_probed_sides_around_keyed_joins_stay_exact(tmp_path, build, probe_keyed):
    """Inner join sides probed from the files, the sides of the semi-, anti- and outer
    joins held in memory or probed as well (but never a NOT IN's): after every change the
    sketch and the annotated result equal a recapture."""
    rng = np.random.default_rng(17)
    store = store_of(tmp_path, tables_for(rng))
    run = _PlanRun(store, build(), probe_keyed)
    joins = [op for op in run.wiring.pipeline.operators if op.kind == "join"]
    keyed = [op for op in run.wiring.pipeline.operators
             if op.kind in ("semi_join", "anti_join", "outer_join")]
    assert joins and keyed
    assert all(is_probed(s) for op in joins for s in (op.left, op.right))
    not_in = build is _not_in_over_probed_join
    assert all(is_probed(s) == (probe_keyed and not not_in)
               for op in keyed for s in (op.left, op.right))
    if build is _probed_outer_join_padded_key:  # dims.dk on the padded side filters reads
        assert joins[0].right._pushdown == {"dims.dk": ("dims", "dk")}
    run.check()
    for step in range(4):
        random_change(store, rng, 40_000 + 100 * step)
        run.maintain()
        run.check()
    stats = {row["kind"]: row for row in run.wiring.pipeline.stats()}
    keyed_row = stats.get("semi_join") or stats.get("anti_join") or stats["outer_join"]
    kind = "files" if probe_keyed and not not_in else "memory"
    assert keyed_row["sides"] == [kind, kind]
    assert keyed_row["join_type"] in ("semi", "anti", "nai", "left", "full")


def test_a_semi_join_passes_key_filters_to_its_right_input_one_way():
    """A probed side over a semi-join reads the right input only for the keys the left
    rows read hold; a NOT IN's right input is read whole."""
    from imp_core.engine.probed_side import VersionContext
    from imp_core.storage.file_side import FileJoinSide, TableFiles

    semi = SemiJoin(_dims(), _tags(), _eq("dims.w", "tags.tk"))
    pset = PartitionSet(())
    side = FileJoinSide(semi, ("dims.dk",), pset, TableFiles(None), VersionContext())
    assert side._links == [(("dims", "w"), ("tags", "tk"))]
    nai = SemiJoin(_dims(), _tags(), _eq("dims.w", "tags.tk"), anti=True, null_aware=True)
    assert FileJoinSide(nai, ("dims.dk",), pset, TableFiles(None), VersionContext())._links \
        == []
    right_outer_as_left = OuterJoin(_tags(), _dims(), _eq("tags.tk", "dims.w"), "full")
    assert FileJoinSide(right_outer_as_left, ("dims.dk",), pset, TableFiles(None),
                        VersionContext())._links == []


# -- sharding --------------------------------------------------------------------------------
def _agg(node: PlanNode, by: str) -> QueryPlan:
    return qplan(Aggregate(node, (by,), (AggCall("count_star", None, "n"),
                                         AggCall("sum", "r.a", "sa"))))


SPLITTABLE = {
    "semi": lambda r, s: SemiJoin(r, s, _eq("r.b", "s.d")),
    "anti": lambda r, s: SemiJoin(r, s, op("and", _eq("r.b", "s.d"),
                                           op("<", col("s.c"), col("r.a"))), anti=True),
    "not_in": lambda r, s: SemiJoin(r, s, _eq("r.c", "s.e"), anti=True, null_aware=True),
    "left": lambda r, s: OuterJoin(r, s, _eq("r.b", "s.d"), "left"),
    # a FULL join that does not hold the routed table is computed whole by every shard
    "full_beside": lambda r, s: Join(r, OuterJoin(s, scan("s", S, alias="s2"),
                                                  _eq("s.d", "s2.e"), "full"),
                                     _eq("r.c", "s.d")),
}


@pytest.mark.parametrize("name", list(SPLITTABLE))
def test_shard_key_passes_the_left_of_keyed_joins(name):
    plan = _agg(SPLITTABLE[name](scan("r", R), scan("s", S)), "r.b")
    assert shard_key(plan) == ShardKey("r", "b")


def test_shard_key_refuses_a_group_key_from_a_padded_side():
    r, s = scan("r", R), scan("s", S)
    with pytest.raises(UnshardableQueryError, match="NULL-padded side of an outer join"):
        shard_key(_agg(OuterJoin(r, s, _eq("r.b", "s.d"), "left"), "s.d"))
    with pytest.raises(UnshardableQueryError, match="NULL-padded side of an outer join"):
        shard_key(_agg(OuterJoin(r, s, _eq("r.b", "s.d"), "full"), "r.b"))


def test_a_routing_value_goes_to_one_shard_whatever_its_neighbours():
    """NULLs among the values (a nullable routing column, as NOT IN and outer joins have)
    change no other value's shard: numpy would otherwise see integers as floats."""
    for values in ([2, 3, 5, 7, 11], [True, False], ["x", "y"]):
        alone = shard_of(pa.array(values), 3).tolist()
        assert shard_of(pa.array(values + [None]), 3).tolist() == alone + [0]
        assert shard_of(pa.array([None] + values), 3).tolist() == [0] + alone
    assert shard_of(pa.array([None, None], pa.int64()), 3).tolist() == [0, 0]


def _rows(table: str, n: int, seed: int) -> pa.Table:
    ch = RandChooser(seed)
    return to_arrow(table, [gen_row(table, ch) for _ in range(n)])


@pytest.mark.parametrize("name", list(SPLITTABLE))
def test_resharded_keyed_join_state_equals_the_state_built_per_shard(name):
    """Re-splitting 1 -> 3 -> 2 shards gives each shard the state it builds from its routed
    input, and the shards' results and sketches add up to the unsharded ones."""
    plan = _agg(SPLITTABLE[name](scan("r", R), scan("s", S)), "r.b")
    data = {"r": _rows("r", 40, 1), "s": _rows("s", 25, 2)}
    pset = PartitionSet((RangePartition.from_bounds("r", "a", pa.int64(), [3, 6]),
                         RangePartition.from_bounds("s", "c", pa.int64(), [4])))
    key = shard_key(plan)
    options = EngineOptions()

    def built(shards: int, k: int) -> IncrementalQuery:
        p = IncrementalQuery(plan, pset, options)
        p.apply({t: route_rows(t, TableDelta.inserts(data[t]), key, shards)[k]
                 for t in plan.root.tables()})
        return p

    whole = built(1, 0)
    states = [whole.state_tables()]
    for shards in (3, 2):
        states = reshard(states, plan, pset, options, key, shards)
        results: Counter = Counter()
        sketch = set()
        for k, tables in enumerate(states):
            p = IncrementalQuery(plan, pset, options)
            p.load_state(tables)
            assert canonical_state(p) == canonical_state(built(shards, k)), (shards, k)
            results += p.result().to_counter()
            sketch |= set(p.sketch().fragments)
        assert results == whole.result().to_counter()
        assert sketch == set(whole.sketch().fragments)


# -- Spark SQL text, bootstrap routing, stats ------------------------------------------------
def test_spark_sql_of_each_node():
    r, s = scan("r", R), scan("s", S)
    both = PartitionSet((RangePartition.from_bounds("r", "a", pa.int64(), [5]),
                         RangePartition.from_bounds("s", "c", pa.int64(), [5])))
    semi = SemiJoin(r, s, _eq("r.b", "s.d"))
    assert "LEFT SEMI JOIN" in plain_sql(semi)
    annotated = annotated_sql(semi, both)  # the partners' fragments join the row's
    assert "monotonically_increasing_id()" in annotated and "GROUP BY `__imp_rid`" in annotated
    assert "LEFT ANTI JOIN" in plain_sql(SemiJoin(r, s, _eq("r.b", "s.d"), anti=True))
    not_in = plain_sql(SemiJoin(r, s, _eq("r.b", "s.e"), anti=True, null_aware=True))
    assert "ON (`r.b` = `s.e`) OR ((`r.b` = `s.e`) IS NULL)" in not_in  # Spark's NAAJ form
    two = plain_sql(SemiJoin(r, s, op("and", _eq("r.b", "s.d"), _eq("r.c", "s.e")),
                             anti=True, null_aware=True))
    assert "(`r.b` IS NULL)" in two and "(`s.e` IS NULL)" in two
    assert "LEFT OUTER JOIN" in plain_sql(OuterJoin(r, s, _eq("r.b", "s.d"), "left"))
    full = annotated_sql(OuterJoin(r, s, None, "full"), both)
    assert "FULL OUTER JOIN" in full and "ON TRUE" in full
    assert full.count("IS NULL, CAST(array() AS ARRAY<INT>)") == 2  # both sides padded
    with pytest.raises(SparkCompileError, match="share column names"):
        plain_sql(SemiJoin(r, scan("r", R), _eq("r.b", "r.c")))
    assert has_stateful(OuterJoin(r, s, None, "left")) and has_stateful(semi)
    assert not has_stateful(Join(r, s, _eq("r.b", "s.d")))
