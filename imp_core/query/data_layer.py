"""The pipeline of a prepared query, wired to the data layer that backs it.

One ``DataLayer`` builds every maintained query's ``IncrementalQuery``, in the embedded
``Maintainer`` and in the service's query actors alike, with two capabilities beyond the
operators' own state:

- **join sides probed in the data layer**: an equi-join input listed in the query's
  ``JoinPlacement`` keeps no rows; its lookups go to Spark when a session is at hand
  (``SparkJoinSide``) or to the Delta table's files filtered by the join keys
  (``FileJoinSide``: what an actor without Spark uses). That holds for inner joins and
  for semi-, anti- and outer joins (``KeyedJoinOp`` asks each side for the rows of the
  keys a batch touches, which a lookup answers as well as an index in memory); the
  inputs of a NOT IN (its facts about the whole right side) and of a join without equi
  keys stay in memory. ``place_join_sides`` decides the
  placement once, at registration, from the estimated size of each side against a state
  budget, and the decision is recorded with the query so that every later wiring
  (restore, recovery) builds the same operators;
- **refills**: an exhausted bounded min/max or top-k buffer (``EngineOptions``) is
  refilled from the operator's input evaluated at the batch's target versions, by Spark
  where its values are exact there, else by the engine over the tables' files.

Invariants: the batch's versions (``VersionContext``) are set by whoever drives the
pipeline before every ``apply`` (``begin(from, to)``, ``from`` None for the bootstrap
batch from empty state); a probed side and a refill read the tables at exactly those
versions, filtered by ``row_filter`` (a shard's routing) so that they see the rows the
pipeline's own deltas carry.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping

from imp_core.engine.join_index import JoinSide
from imp_core.engine.operators.probed_aggregate import GROUPS
from imp_core.engine.pipeline import EngineOptions, IncrementalQuery
from imp_core.engine.probed_side import VersionContext
from imp_core.engine.subtree import evaluate_subtree
from imp_core.engine.zset import DeltaBatch
from imp_core.plan.expr import ColumnRef
from imp_core.plan.lineage import keys_looked_up_by_value, trace_column
from imp_core.plan.nodes import (
    Aggregate,
    Distinct,
    Join,
    OuterJoin,
    PlanNode,
    Project,
    QueryPlan,
    Scan,
    Select,
    SemiJoin,
    SetOp,
)
from imp_core.plan.paths import OperatorPath, operator_paths
from imp_core.sketch.partition import PartitionSet
from imp_core.storage.file_side import (
    FileJoinSide,
    RowFilter,
    TableFiles,
    filter_columns,
    key_pushdown,
    scan_counts,
)
from imp_core.storage.index_catalog import catalog_for, shared_indexes_enabled
from imp_core.storage.indexed_files import IndexedTableFiles

# the sides probed in the data layer: a join input's path names the join and "left" or
# "right", an aggregation's groups' path the aggregation and "groups" (``OperatorPath``)
JoinPlacement = frozenset[OperatorPath]


AnyJoin = Join | SemiJoin | OuterJoin


def can_probe(node: PlanNode) -> bool:
    """Whether ``node`` is a join whose inputs may be probed in the data layer: an inner,
    semi-, anti- or outer join with equi keys, but not a NOT IN (whose output depends on
    whether the whole right side is empty or holds a NULL key)."""
    if isinstance(node, SemiJoin) and node.null_aware:
        return False
    return isinstance(node, (Join, SemiJoin, OuterJoin)) and bool(node.equi_keys()[0])


def join_sides(root: PlanNode) -> Iterator[tuple[OperatorPath, AnyJoin, str, PlanNode]]:
    """``(side path, join, "left" | "right", input)`` of every join in ``root`` whose
    inputs may be probed in the data layer (``can_probe``), paths by ``operator_paths``."""
    for path, node in operator_paths(root):
        if can_probe(node):
            assert isinstance(node, (Join, SemiJoin, OuterJoin))
            yield path.at("left"), node, "left", node.left
            yield path.at("right"), node, "right", node.right


def groups_to_probe(root: PlanNode) -> Iterator[tuple[OperatorPath, Aggregate]]:
    """``(path, aggregation)`` of every grouped aggregation in ``root`` whose groups may
    be held by the data layer (``ProbedAggregateOp``), paths ``"<operator path>:groups"``."""
    for path, node in operator_paths(root):
        if isinstance(node, Aggregate) and node.group_by:
            yield path.at(GROUPS), node


def placeable(root: PlanNode) -> frozenset[OperatorPath]:
    """Every side of ``root`` a placement may name (``join_sides``, ``groups_to_probe``)."""
    return frozenset([s for s, *_ in join_sides(root)] + [g for g, _ in groups_to_probe(root)])


def groups_lookup(node: Aggregate, cheap: Callable[[str, str], bool],
                  not_null: Callable[[str, str], bool]) -> bool:
    """Whether a lookup of ``node``'s groups reads little (``clustered_lookup`` of its
    input by the group-by columns, with ``cheap``: ``lookup_cost``) and finds every
    group: each group-by column copies a column that never holds NULL (``not_null``: a
    key column or one declared NOT NULL), not through the padding of an outer join."""
    for column in node.group_by:
        found = trace_column(node.input, column)
        if found is None or not not_null(found[0].table, found[1]):
            return False
    return clustered_lookup(node.input, tuple(node.group_by), cheap)


def lookup_cost(clustered: Callable[[str, str], bool],
                indexed: Callable[[str, str], bool] | None) -> Callable[[str, str], bool]:
    """Whether a keyed read of a table by a column reads little: the table is
    ``clustered`` on it (k keys read about k row groups), or a shared index serves it
    (``indexed``: a probe reads the index's pages of its keys)."""
    if indexed is None:
        return clustered
    return lambda table, column: clustered(table, column) or indexed(table, column)


def keyed_join_inputs(root: PlanNode) -> Iterator[PlanNode]:
    """The inputs of every semi-, anti- and outer join in ``root`` that are always held in
    memory (NOT IN, no equi keys)."""
    for node in root.walk():
        if isinstance(node, (SemiJoin, OuterJoin)) and not can_probe(node):
            yield from node.children()


def _trigger_inputs(join: AnyJoin, which: str) -> list[PlanNode]:
    """The inputs of ``join`` whose deltas make its operator look up its ``which`` side."""
    if isinstance(join, Join):
        return [join.right if which == "left" else join.left]
    if which == "left" and not (isinstance(join, OuterJoin) and join.kind == "full"):
        return [join.right]
    return [join.left, join.right]


def probe_triggers(join: AnyJoin, which: str) -> frozenset[str]:
    """The tables whose changes make the operator of ``join`` look up its ``which`` side:
    an inner join probes a side with the other side's deltas; a semi-, anti- or left outer
    join looks up its left rows only for keys its right delta touches (its output is
    linear in the left input), its right rows for keys of either delta; a full outer join
    looks up both sides for keys of either delta."""
    return frozenset().union(*(n.tables() for n in _trigger_inputs(join, which)))


def direct_tables(node: PlanNode) -> frozenset[str]:
    """The tables whose every change may reach ``node``'s output. A change behind an
    aggregation whose values are projected away (``membership_only``: only the group
    keys leave, as in an IN subquery with HAVING) or behind a DISTINCT reaches it only
    when a group appears or disappears, so those tables are left out."""
    if isinstance(node, Scan):
        return frozenset({node.table})
    if isinstance(node, Distinct) or membership_only(node):
        return frozenset()
    out: frozenset[str] = frozenset()
    for child in node.children():
        out |= direct_tables(child)
    return out


def membership_only(node: PlanNode) -> bool:
    """Whether ``node`` projects an aggregation (under selections) to group keys only."""
    if not isinstance(node, Project):
        return False
    inner = node.input
    while isinstance(inner, Select):
        inner = inner.input
    return isinstance(inner, Aggregate) and all(
        isinstance(e.expr, ColumnRef) and e.expr.name in inner.group_by for e in node.exprs)


def direct_triggers(join: AnyJoin, which: str) -> frozenset[str]:
    """The triggers of a side (``probe_triggers``) whose every change may reach it."""
    return frozenset().union(*(direct_tables(n) for n in _trigger_inputs(join, which)))


# busy sides (looked up on every batch of the busiest table) are probed only when the
# state would otherwise pass this many times the budget. The estimates run high (at SF 1,
# TPC-H Q20's state estimated at 447 MiB held 63, Q17's 208 held 20, Q13's 169 held 51):
# at 3, SF 1's Q13, Q17 and Q20 looked their groups up on every batch (47-57 ms against
# 9-18) to save 20-60 MiB, while at 10 SF 10's large states (Q13 332 MiB, Q17 215, Q20 607)
# are still probed
HOT_SIDE_FACTOR = 10.0
# ... and only when the side holds at least this share of the budget: a small side (a
# date dimension beside millions of sales) saves next to nothing and would cost every
# batch of the busiest table a lookup
HOT_SIDE_MIN_SHARE = 0.25

# the share of a table's changes assumed to change a group's membership (a prior: no
# rate is measured at registration)
AGGREGATED_RATE = 0.01


def _trigger_rate(join: AnyJoin, which: str, rates: Mapping[str, float]) -> float:
    """The expected lookups of a side per unit of time: its triggers' rates of change,
    those that reach it only through group membership weighted by ``AGGREGATED_RATE``."""
    direct = direct_triggers(join, which)
    return sum(rates.get(t, 0.0) * (1.0 if t in direct else AGGREGATED_RATE)
               for t in probe_triggers(join, which))


def filterable(node: PlanNode, keys: tuple[str, ...]) -> bool:
    """Whether a lookup of the join input ``node`` by ``keys`` reads its tables filtered,
    not whole: a key filters a read (``key_pushdown``) and no table is scanned twice
    (the files of a self-join's table are read whole)."""
    return bool(key_pushdown(node, keys)) and max(scan_counts(node).values()) == 1


def place_join_sides(root: PlanNode, side_bytes: Callable[[PlanNode], int],
                     budget_bytes: int | None,
                     change_rates: Mapping[str, float] | None = None,
                     clustered: Callable[[str, str], bool] | None = None,
                     not_null: Callable[[str, str], bool] | None = None,
                     indexed: Callable[[str, str], bool] | None = None) -> JoinPlacement:
    """The join sides to probe in the data layer so that the sides kept in memory fit
    ``budget_bytes`` (None: keep every side in memory; 0: probe every side that can be probed). The
    inputs of joins that cannot be probed (``keyed_join_inputs``) count against the
    budget.

    Without ``change_rates`` the largest sides go first, until the rest fits. With them
    (a relative rate of change per table, e.g. its row count as a prior when nothing has
    been measured) only *cold* sides are probed: a lookup reads them filtered
    (``filterable``) and the query's most changing table does not trigger them directly
    (``probe_triggers`` other than through group membership, ``direct_tables``), so that
    the batches of that table never wait for the data layer; they go in order of lookups
    per byte saved (``_trigger_rate`` over the side's size). The state then stays above
    the budget rather than make every batch of the busiest table pay a lookup, unless the
    lookup is cheap and the state left would pass ``HOT_SIDE_FACTOR`` times the budget:
    then sides whose tables are all read filtered by columns they are ``clustered`` on
    (``clustered_lookup``; ``(table, column)``: its row groups hold disjoint ranges, so k
    keys read about k row groups) or whose keyed reads a shared index serves
    (``indexed``, ``lookup_cost``) go after the cold sides, largest first (none smaller
    than ``HOT_SIDE_MIN_SHARE`` of the budget), and so do aggregations whose groups such
    a lookup finds (``groups_lookup``, with ``not_null``; ids ``"<op id>:groups"``, sized
    by ``side_bytes`` of the aggregation), which then hold no state at all.
    """
    if budget_bytes is None:
        return frozenset()
    if budget_bytes == 0:
        return frozenset(sid for sid, *_ in join_sides(root))
    cheap: list[tuple[int, OperatorPath]] = []
    sides = [(side_bytes(child), sid, join, which, child) for sid, join, which, child
             in join_sides(root)]
    total = sum(s[0] for s in sides) + sum(side_bytes(c) for c in keyed_join_inputs(root))
    if change_rates is None:
        order = sorted(sides, key=lambda s: (-s[0], str(s[1])))
    else:
        hottest = max(sorted(root.tables()), key=lambda t: (change_rates.get(t, 0.0), t))

        def per_byte(side: tuple[int, OperatorPath, AnyJoin, str, PlanNode]
                     ) -> tuple[float, str]:
            size, sid, join, which, _ = side
            rate = _trigger_rate(join, which, change_rates)
            return (rate / size if size > 0 else float("inf"), str(sid))

        def keys(side: tuple[int, OperatorPath, AnyJoin, str, PlanNode]) -> tuple[str, ...]:
            return side[2].equi_keys()[0 if side[3] == "left" else 1]

        cold = [s for s in sides if hottest not in direct_triggers(s[2], s[3])
                and filterable(s[4], keys(s))]
        cheap_read = None if clustered is None else lookup_cost(clustered, indexed)
        cheap += [(s[0], s[1]) for s in sides if s not in cold and cheap_read is not None
                  and clustered_lookup(s[4], keys(s), cheap_read)]
        if cheap_read is not None and not_null is not None:
            groups = [(side_bytes(agg), gid) for gid, agg in groups_to_probe(root)
                      if groups_lookup(agg, cheap_read, not_null)]
            cheap += groups
            total += sum(size for size, _ in groups)
        order = [(s[0], s[1]) for s in sorted(cold, key=per_byte)]
    probed: list[OperatorPath] = []
    for size, sid, *_ in order:
        if total <= budget_bytes:
            break
        probed.append(sid)
        total -= size
    if change_rates is not None and total > HOT_SIDE_FACTOR * budget_bytes:
        # a busy side costs every batch of the busiest table a lookup: only when the state
        # would otherwise pass the budget by far (the estimates run high)
        for size, sid in sorted(cheap, key=lambda s: (-s[0], str(s[1]))):
            if total <= budget_bytes or size < budget_bytes * HOT_SIDE_MIN_SHARE:
                break
            probed.append(sid)
            total -= size
    return frozenset(probed)


def clustered_lookup(node: PlanNode, keys: tuple[str, ...],
                     clustered: Callable[[str, str], bool]) -> bool:
    """Whether a lookup of ``node`` by ``keys`` reads every table of ``node`` filtered
    (``filter_columns``: by the keys, or along the side's own joins) by a column on which
    that table is ``clustered``, so k keys read about k row groups of each."""
    if not filterable(node, keys):
        return False
    columns = filter_columns(node, keys)
    return all(any(clustered(table, c) for c in sorted(columns.get(table, ())))
               for table in sorted(node.tables()))


def exact_on_spark(node: PlanNode) -> bool:
    """Whether Spark computes ``node``'s values exactly as the engine does: every aggregate
    function says (``exact_on_spark``; not AVG or sums of doubles, which Spark rounds on
    its own)."""
    for n in node.walk():
        if isinstance(n, Aggregate):
            types = {f.name: f.dtype for f in n.input.schema}
            for a in n.aggregates:
                if not a.function.exact_on_spark(None if a.arg is None else types[a.arg]):
                    return False
    return True


@dataclass
class Wiring:
    """A pipeline and the batch context its probed sides and refills read versions from."""

    pipeline: IncrementalQuery
    context: VersionContext


class DataLayer:
    """Builds pipelines over a versioned table store (``imp_core.storage.DeltaStore``).

    ``spark``: a Spark session, a zero-argument callable returning one (started on first
    use), or None (the files are read directly; no JVM in this process).
    ``row_filter``: what every read of a table keeps (a shard's routing), or None.
    ``shared_indexes``: whether probed sides read the tables through the process's
    shared covering indexes (``imp_core.storage.indexed_files``; default:
    ``IMP_SHARED_INDEXES``, on), else from the files.
    """

    def __init__(self, store: Any, spark: Any = None, row_filter: RowFilter | None = None,
                 shared_indexes: bool | None = None):
        self.store = store
        self._spark = spark
        self.files = IndexedTableFiles(store, catalog_for(store), row_filter) \
            if shared_indexes_enabled(shared_indexes) else TableFiles(store, row_filter)
        self._footer_bytes: dict[tuple[str, int, tuple[str, ...]], int] = {}
        self._row_counts: dict[tuple[str, int], int] = {}

    @property
    def index_served(self) -> bool:
        """Whether probed sides read the tables through shared covering indexes."""
        return isinstance(self.files, IndexedTableFiles)

    # -- Spark, when there is one --------------------------------------------------------
    @property
    def has_spark(self) -> bool:
        return self._spark is not None

    def spark(self) -> Any:
        if callable(self._spark) and not hasattr(self._spark, "sql"):
            self._spark = self._spark()
        return self._spark

    # -- sizes ---------------------------------------------------------------------------
    def side_bytes(self, node: PlanNode, partitions: PartitionSet,
                   versions: Mapping[str, int]) -> int:
        """An estimate of a join input's in-memory size from the Parquet footers of its
        tables: per table, the larger of the uncompressed bytes of the columns its scans
        read and 8 bytes per value of those columns (dictionary-encoded pages understate
        the decoded size); selections are not taken into account."""
        return sum(self._table_bytes(t, versions[t],
                                     tuple(self.files.columns_for(node, partitions, t)))
                   for t in sorted(node.tables()))

    def _rows(self, table: str, version: int) -> int:
        key = (table, version)
        if key not in self._row_counts:
            import pyarrow.dataset as ds

            files = self.store.file_uris(table, version)
            self._row_counts[key] = ds.dataset(files, format="parquet").count_rows() \
                if files else 0
        return self._row_counts[key]

    def _table_bytes(self, table: str, version: int, columns: tuple[str, ...]) -> int:
        # nested join inputs share tables: each table's footers are read once
        key = (table, version, columns)
        if key not in self._footer_bytes:
            self._footer_bytes[key] = max(
                self.store.column_bytes(table, version, list(columns)),
                8 * self._rows(table, version) * len(columns))
        return self._footer_bytes[key]

    def side_rows(self, node: PlanNode, partitions: PartitionSet,
                  versions: Mapping[str, int], limit: int) -> int:
        """A join input's filtered, projected row count as far as ``limit`` needs it: an
        upper bound from its tables' Parquet footers when that is within the limit,
        otherwise the exact count by Spark; without Spark the bound itself (so a side
        that would have fit may be probed, never the other way round)."""
        bound = row_bound(node, {t: self._rows(t, versions[t]) for t in node.tables()})
        if bound <= limit or not self.has_spark:
            return bound
        from imp_core.spark.joins import subtree_rows

        return subtree_rows(self.spark(), self.store, node, partitions, versions)

    def place(self, plan: QueryPlan, partitions: PartitionSet, versions: Mapping[str, int],
              budget_bytes: int | None) -> JoinPlacement:
        """``place_join_sides`` with this store's size estimates at ``versions``, the
        tables' row counts standing for their rates of change."""
        rates = {t: float(self._rows(t, versions[t])) for t in sorted(plan.root.tables())}
        return place_join_sides(plan.root,
                                lambda n: self.side_bytes(n, partitions, versions),
                                budget_bytes, rates,
                                lambda t, c: self.files.clustered(t, versions[t], c),
                                self.files.not_null, self.files.indexed)

    # -- pipelines -----------------------------------------------------------------------
    def wire(self, plan: QueryPlan, partitions: PartitionSet, options: EngineOptions,
             placement: JoinPlacement = frozenset()) -> Wiring:
        """The query's pipeline (empty state) with its probed sides and refill source."""
        context = VersionContext()
        # equal subplans are one operator (``IncrementalQuery``): a side is probed when
        # the placement names it at any of their paths
        paths: dict[PlanNode, set[OperatorPath]] = {}
        for sid, join, _, _ in join_sides(plan.root):
            paths.setdefault(join, set()).add(sid.operator)
        for gid, agg in groups_to_probe(plan.root):
            paths.setdefault(agg, set()).add(gid.operator)

        def choose(node: AnyJoin | Aggregate, which: str) -> JoinSide | None:
            if not any(p.at(which) in placement for p in paths.get(node, ())):
                return None
            if isinstance(node, Aggregate):  # its groups, keyed by the group-by columns
                return self.probed_side(node.input, tuple(node.group_by), partitions,
                                        context, use_bloom=False)
            keys = node.equi_keys()[0 if which == "left" else 1]
            child = node.left if which == "left" else node.right
            return self.probed_side(child, keys, partitions, context, options.use_bloom)

        def refill(node: PlanNode) -> DeltaBatch:
            return self.subtree(node, partitions,
                                {t: context.after[t] for t in sorted(node.tables())})

        pipeline = IncrementalQuery(plan, partitions, options,
                                    source=refill if options.bounded else None,
                                    join_sides=choose if placement else None)
        return Wiring(pipeline, context)

    def probed_side(self, node: PlanNode, keys: tuple[str, ...], partitions: PartitionSet,
                    context: VersionContext, use_bloom: bool = True) -> JoinSide:
        """A side served by Spark where this layer has a session (and reads whole tables),
        else by the files. A side the shared indexes serve is open (no Bloom filter)
        where its lookups read rows by key value (``keys_looked_up_by_value``: keys from
        whole tables, or one table's filtered rows): a lookup of a key without partner
        is then a binary search in an index, cheaper than keeping the filter."""
        if self.has_spark and self.files.row_filter is None:
            from imp_core.spark.joins import SparkJoinSide

            return SparkJoinSide(node, keys, partitions, self.store, context, self.spark(),
                                 use_bloom)
        side = FileJoinSide(node, keys, partitions, self.files, context, use_bloom)
        if use_bloom and self.index_served and keys_looked_up_by_value(node, keys):
            side.make_open()
        return side

    def subtree(self, node: PlanNode, partitions: PartitionSet,
                versions: Mapping[str, int]) -> DeltaBatch:
        """``node``'s annotated contents at ``versions``: by Spark where its values are
        exact there, else by the engine over the tables' files."""
        if self.has_spark and self.files.row_filter is None and exact_on_spark(node):
            from imp_core.spark.joins import subtree_batch

            return subtree_batch(self.spark(), self.store, node, partitions, versions)
        tables = self.files.read_for(node, partitions, dict(versions))
        return evaluate_subtree(node, partitions, tables)


def indexes_used(pipeline: IncrementalQuery) -> list[dict[str, Any]]:
    """The shared indexes the probed sides of ``pipeline`` read, one entry per table and
    key (``IndexedTableFiles.indexes_of``)."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for op in pipeline.operators:
        for side in (getattr(op, "left", None), getattr(op, "right", None),
                     getattr(op, "side", None)):
            for entry in getattr(side, "indexes", list)():
                found[(entry["table"], entry["key"])] = entry
    return [found[k] for k in sorted(found)]


def row_bound(node: PlanNode, rows: Mapping[str, int]) -> int:
    """An upper bound of ``node``'s row count from its tables' row counts."""
    if isinstance(node, Scan):
        return rows[node.table]
    if isinstance(node, Join):
        return row_bound(node.left, rows) * row_bound(node.right, rows)
    if isinstance(node, OuterJoin):  # the pairs, plus the rows padded on either side
        left, right = row_bound(node.left, rows), row_bound(node.right, rows)
        return left * right + left + (right if node.kind == "full" else 0)
    if isinstance(node, SetOp):  # UNION: both inputs'; INTERSECT, EXCEPT: the left's
        left = row_bound(node.left, rows)
        return left + row_bound(node.right, rows) if node.kind == "union" else left
    # SemiJoin: at most its left input's rows, like every single-input node's bound
    children = node.children()
    bound = row_bound(children[0], rows)
    k = getattr(node, "k", None)
    return min(int(k), bound) if k is not None else bound
