"""The pipeline of a prepared query, wired to the data layer that backs it.

One ``DataLayer`` builds every maintained query's ``IncrementalQuery``, in the embedded
``Maintainer`` and in the service's query actors alike, with two capabilities beyond the
operators' own state:

- **join sides probed in the data layer**: an inner equi-join input listed in the query's
  ``JoinPlacement`` keeps no rows; its lookups go to Spark when a session is at hand
  (``SparkJoinSide``) or to the Delta table's files filtered by the join keys
  (``FileJoinSide``: what an actor without Spark uses). The inputs of semi-, anti- and
  outer joins are always held in memory (their operator, ``KeyedJoinOp``, recomputes
  whole keys from both sides' rows). ``place_join_sides`` decides the
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
from imp_core.engine.pipeline import EngineOptions, IncrementalQuery
from imp_core.engine.probed_side import VersionContext
from imp_core.engine.subtree import evaluate_subtree
from imp_core.engine.zset import DeltaBatch
from imp_core.plan.nodes import Aggregate, Join, OuterJoin, PlanNode, QueryPlan, Scan, SemiJoin
from imp_core.sketch.partition import PartitionSet
from imp_core.storage.file_side import FileJoinSide, RowFilter, TableFiles

# a join side's place: "<operator id>:left" or "<operator id>:right" (operator ids as the
# pipeline numbers its operators: "0" the root, "0.1" its second child, ...)
JoinPlacement = frozenset


def join_sides(root: PlanNode) -> Iterator[tuple[str, Join, str, PlanNode]]:
    """``(side id, join, "left" | "right", input)`` of every inner equi-join in ``root``,
    with ids as ``IncrementalQuery`` numbers its operators: the only join inputs that may
    be probed in the data layer (never a ``SemiJoin``'s or an ``OuterJoin``'s)."""

    def walk(node: PlanNode, op_id: str) -> Iterator[tuple[str, Join, str, PlanNode]]:
        for i, child in enumerate(node.children()):
            yield from walk(child, f"{op_id}.{i}")
        if isinstance(node, Join) and node.equi_keys()[0]:
            yield f"{op_id}:left", node, "left", node.left
            yield f"{op_id}:right", node, "right", node.right

    yield from walk(root, "0")


def keyed_join_inputs(root: PlanNode) -> Iterator[PlanNode]:
    """The inputs of every semi-, anti- and outer join in ``root`` (held in memory)."""
    for node in root.walk():
        if isinstance(node, (SemiJoin, OuterJoin)):
            yield from node.children()


def place_join_sides(root: PlanNode, side_bytes: Callable[[PlanNode], int],
                     budget_bytes: int | None) -> JoinPlacement:
    """The inner equi-join sides to probe in the data layer so that the sides kept in
    memory fit ``budget_bytes``: the largest sides go first, until the rest fits (None:
    keep every side in memory; 0: probe every equi-join side). The inputs of semi-, anti-
    and outer joins count against the budget but are never probed."""
    if budget_bytes is None:
        return frozenset()
    sizes = [(side_bytes(child), sid) for sid, _, _, child in join_sides(root)]
    total = sum(s for s, _ in sizes) + sum(side_bytes(c) for c in keyed_join_inputs(root))
    probed = []
    for size, sid in sorted(sizes, reverse=True):
        if total <= budget_bytes and budget_bytes > 0:
            break
        probed.append(sid)
        total -= size
    return frozenset(probed)


def exact_on_spark(node: PlanNode) -> bool:
    """Whether Spark computes ``node``'s values exactly as the engine does: everything but
    AVG and sums of doubles, which Spark rounds on its own."""
    import pyarrow.types as pat

    for n in node.walk():
        if isinstance(n, Aggregate):
            types = {f.name: f.dtype for f in n.input.schema}
            for a in n.aggregates:
                if a.func == "avg" or (a.func == "sum" and pat.is_floating(types[a.arg])):
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
    """

    def __init__(self, store: Any, spark: Any = None, row_filter: RowFilter | None = None):
        self.store = store
        self._spark = spark
        self.files = TableFiles(store, row_filter)
        self._footer_bytes: dict[tuple[str, int, tuple[str, ...]], int] = {}

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

    def _table_bytes(self, table: str, version: int, columns: tuple[str, ...]) -> int:
        # nested join inputs share tables: each table's footers are read once
        key = (table, version, columns)
        if key not in self._footer_bytes:
            import pyarrow.dataset as ds

            files = self.store.file_uris(table, version)
            rows = ds.dataset(files, format="parquet").count_rows() if files else 0
            self._footer_bytes[key] = max(
                self.store.column_bytes(table, version, list(columns)),
                8 * rows * len(columns))
        return self._footer_bytes[key]

    def place(self, plan: QueryPlan, partitions: PartitionSet, versions: Mapping[str, int],
              budget_bytes: int | None) -> JoinPlacement:
        """``place_join_sides`` with this store's size estimates at ``versions``."""
        return place_join_sides(plan.root,
                                lambda n: self.side_bytes(n, partitions, versions),
                                budget_bytes)

    # -- pipelines -----------------------------------------------------------------------
    def wire(self, plan: QueryPlan, partitions: PartitionSet, options: EngineOptions,
             placement: JoinPlacement = frozenset()) -> Wiring:
        """The query's pipeline (empty state) with its probed sides and refill source."""
        context = VersionContext()
        ids = {id(join): sid.split(":")[0] for sid, join, _, _ in join_sides(plan.root)}

        def choose(node: Join, which: str) -> JoinSide | None:
            op_id = ids.get(id(node))
            if op_id is None or f"{op_id}:{which}" not in placement:
                return None
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
        if self.has_spark and self.files.row_filter is None:
            from imp_core.spark.joins import SparkJoinSide

            return SparkJoinSide(node, keys, partitions, self.store, context, self.spark(),
                                 use_bloom)
        return FileJoinSide(node, keys, partitions, self.files, context, use_bloom)

    def subtree(self, node: PlanNode, partitions: PartitionSet,
                versions: Mapping[str, int]) -> DeltaBatch:
        """``node``'s annotated contents at ``versions``: by Spark where its values are
        exact there, else by the engine over the tables' files."""
        if self.has_spark and self.files.row_filter is None and exact_on_spark(node):
            from imp_core.spark.joins import subtree_batch

            return subtree_batch(self.spark(), self.store, node, partitions, versions)
        tables = self.files.read_for(node, partitions, dict(versions))
        return evaluate_subtree(node, partitions, tables)


def row_bound(node: PlanNode, rows: Mapping[str, int]) -> int:
    """An upper bound of ``node``'s row count from its tables' row counts."""
    if isinstance(node, Scan):
        return rows[node.table]
    if isinstance(node, Join):
        return row_bound(node.left, rows) * row_bound(node.right, rows)
    if isinstance(node, OuterJoin):  # the pairs, plus the rows padded on either side
        left, right = row_bound(node.left, rows), row_bound(node.right, rows)
        return left * right + left + (right if node.kind == "full" else 0)
    # SemiJoin: at most its left input's rows, like every single-input node's bound
    children = node.children()
    bound = row_bound(children[0], rows)
    k = getattr(node, "k", None)
    return min(int(k), bound) if k is not None else bound
