"""A registered plan's initial operator state computed on Spark, shipped as Arrow.

For the table versions a query is registered at, every stateful operator receives exactly
the state the engine builds by consuming those tables as one insert batch (equal up to
group ids and row order; bounded min/max buffers may keep fewer surplus values), in the
layout its ``restore`` takes; ``bootstrap`` loads it with ``IncrementalQuery.load_state``.

- An aggregation or DISTINCT whose input holds no other stateful operator: one Spark query
  over the annotated input gives per group CNT, non-NULL counts, exact sums, the
  per-fragment counts F_g and the min/max multisets (the ``minmax_buffer`` best distinct
  values, flagged incomplete when there are more).
- A top-k over such an input: its entries, (tuple, annotation) -> multiplicity, cut after
  ``topk_buffer`` entries in the engine's total order.
- An operator above another stateful operator consumes that operator's output rebuilt on
  the driver from its exact state (a row per group) and is stepped by the engine: Spark's
  own AVG and double SUM round differently from the engine's exact arithmetic.
- An operator over a join whose sides are both held in memory is stepped by the engine
  over the joined rows as well: the sides' rows are shipped for the join's own state
  anyway, and joining them on the driver is cheaper than running the joins again in Spark
  (at SF 1, Q3's aggregation on Spark took longer than the whole engine path). With
  ``joins_in_spark=True`` Spark computes such operators too.
- Join sides held in memory get the side's annotated rows: Spark evaluates single-table
  inputs; the output of a join below is joined on the driver from its inputs, which are
  shipped for their own sides anyway. A side served by Spark (``SparkJoinSide``) gets its
  versions and a Bloom filter of the side's distinct keys.
- μ's fragment counts and the kept result come from the root's output.

Exact sums: integers are summed as DECIMAL(38, 0) and decimals as DECIMAL(38, s) (ANSI
mode: an overflow is an error, never a wrong sum). A double x is split in Spark into
x = (hi·2^44 + lo)·2^(32·b) with integers hi and lo obtained by power-of-two scalings of
x (exact, no rounding); hi and lo are summed per group and b, and the driver assembles
the engine's integer x·2^1100 from them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from imp_core.engine.annotation import Annotation
from imp_core.engine.bloom import BloomFilter
from imp_core.engine.exact import FLOAT_SHIFT, exact_values, kind_of
from imp_core.engine.join_index import key_hashes
from imp_core.engine.operators.aggregate import AggregateOp
from imp_core.engine.operators.base import Operator
from imp_core.engine.operators.join import JoinOp
from imp_core.engine.operators.topk import TopKOp
from imp_core.engine.pipeline import IncrementalQuery
from imp_core.engine.zset import DeltaBatch, batch_to_arrow
from imp_core.plan.nodes import Aggregate, Distinct, Join, PlanNode, TopK, arrow_schema
from imp_core.sketch.partition import PartitionSet
from imp_core.spark.compile import (
    FID_COLUMN,
    AnnotatedRelation,
    annotated_relation,
    quote,
    total_order_sql,
)
from imp_core.spark.joins import SparkJoinSide, fragment_views, version_views

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession

ANN = "__imp_ann"
_HI_SHIFT = 44  # a double's scaled integer N = hi * 2**44 + lo, 0 <= lo < 2**44
_BUCKET = 32  # exponent width of one bucket b: |N| < 2**(55 + 32)


@dataclass
class BootstrapRun:
    """What one bootstrap did: time, Spark queries, and where each operator's state came
    from ("spark": computed by a Spark query; "engine": stepped on the driver)."""

    seconds: float = 0.0
    spark_queries: int = 0
    spark_seconds: float = 0.0
    sources: dict[str, str] = field(default_factory=dict)


def bootstrap(spark: SparkSession, store: Any, pipeline: IncrementalQuery,
              versions: Mapping[str, int], joins_in_spark: bool = False) -> BootstrapRun:
    """Compute the state of ``pipeline`` (fresh, of a registered plan) for the tables at
    ``versions`` on Spark and load it; returns what was done."""
    t0 = time.perf_counter()
    tables, run = bootstrap_tables(spark, store, pipeline, versions, joins_in_spark)
    pipeline.load_state(tables, batches=1)
    run.seconds = time.perf_counter() - t0
    return run


def bootstrap_tables(spark: SparkSession, store: Any, pipeline: IncrementalQuery,
                     versions: Mapping[str, int], joins_in_spark: bool = False
                     ) -> tuple[dict[str, pa.Table], BootstrapRun]:
    """The state tables (``IncrementalQuery.state_tables`` layout) without loading them."""
    t0 = time.perf_counter()
    b = _Bootstrap(spark, store, pipeline, versions, joins_in_spark)
    tables = b.run()
    b.stats.seconds = time.perf_counter() - t0
    return tables, b.stats


def has_stateful(node: PlanNode) -> bool:
    """Whether ``node``'s subtree holds an aggregation, DISTINCT or top-k."""
    return any(isinstance(n, (Aggregate, Distinct, TopK)) for n in node.walk())


class _Bootstrap:
    """One bootstrap: a scratch wiring of the plan whose operators are filled bottom-up."""

    def __init__(self, spark: SparkSession, store: Any, pipeline: IncrementalQuery,
                 versions: Mapping[str, int], joins_in_spark: bool = False):
        self.spark = spark
        self.joins_in_spark = joins_in_spark
        self.store = store
        self.partitions: PartitionSet = pipeline.partitions
        self.options = pipeline.options
        self.versions = {t: versions[t] for t in sorted(pipeline.plan.root.tables())}
        # a scratch wiring: the target pipeline stays untouched until load_state
        self.scratch = IncrementalQuery(pipeline.plan, pipeline.partitions, pipeline.options,
                                        None, pipeline.join_sides)
        self.stats = BootstrapRun()
        self.outputs: dict[str, DeltaBatch] = {}
        self.states: dict[str, dict[str, pa.Table]] = {}
        self.views: dict[str, str] = {}
        self.fragment_views: dict[str, str] = {}

    # -- driver ---------------------------------------------------------------------
    def run(self) -> dict[str, pa.Table]:
        self._make_views()
        root = self.output(self.scratch.root)
        pending = [self.scratch.root]
        while pending:
            w = pending.pop()
            pending.extend(w.children)
            if w.op.stateful:
                self.state(w)
        tables: dict[str, pa.Table] = {}
        for op in self.scratch.operators:
            for name, t in self.states.get(op.op_id, {}).items():
                tables[f"{op.op_id}/{name}"] = t
        counts = root.annotation.fragment_counts(root.weights, self.partitions.size)
        tables["merge/counts"] = pa.table({"count": counts})
        if self.options.keep_result:
            tables["result"] = batch_to_arrow(root.consolidate())
        return tables

    def _make_views(self) -> None:
        """Temp views of the tables at the versions, and of partitioned tables with their
        rows' global fragment ids."""
        self.views = version_views(self.spark, self.store, self.versions)
        self.fragment_views = fragment_views(self.spark, self.views, self.partitions)

    def _relation(self, node: PlanNode) -> AnnotatedRelation:
        return annotated_relation(node, self.partitions, "view", self.views, self.fragment_views)

    def _collect(self, sql: str) -> pa.Table:
        t0 = time.perf_counter()
        out = self.spark.sql(sql).toArrow()
        self.stats.spark_queries += 1
        self.stats.spark_seconds += time.perf_counter() - t0
        return out

    # -- outputs ----------------------------------------------------------------------
    def output(self, w) -> DeltaBatch:
        """The full annotated output of wired node ``w`` at the versions."""
        key = w.op.op_id
        if key not in self.outputs:
            self.outputs[key] = self._output(w)
        return self.outputs[key]

    def _output(self, w) -> DeltaBatch:
        op, node = w.op, w.node
        if not has_stateful(node) and not any(isinstance(n, Join) for n in node.walk()):
            return self._rows(node)  # a single-table chain: Spark filters and projects
        if op.stateful and not isinstance(op, JoinOp):
            state = self.state(w)
            if self.stats.sources[op.op_id] == "engine":
                return self.outputs[op.op_id]  # stepped by state()
            return _output_from_state(op, state)
        if isinstance(op, JoinOp):
            if _in_memory(op.left) and _in_memory(op.right):
                out = op.step([self.output(c) for c in w.children])
                self.states[op.op_id] = op.snapshot()
                self.stats.sources[op.op_id] = "engine"
                return out
            return self._rows(node)  # a side served by Spark: Spark joins
        return op.step([self.output(c) for c in w.children])  # selection, projection

    def _rows(self, node: PlanNode) -> DeltaBatch:
        """``node``'s annotated rows evaluated by Spark."""
        rel = self._relation(node)
        cols = ", ".join(quote(c) for c in rel.columns)
        if len(rel.ann) == 1 and not rel.ann[0][1]:
            ann = f"{quote(rel.ann[0][0])} AS {quote(FID_COLUMN)}"
        else:
            ann = f"{rel.annotation_sql} AS {quote(ANN)}"
        out = self._collect(f"{rel.with_clause}SELECT {cols}, {ann}\nFROM {rel.name}")
        return _to_batch(out, arrow_schema(node.schema), np.ones(out.num_rows, np.int64))

    # -- states -----------------------------------------------------------------------
    def state(self, w) -> dict[str, pa.Table]:
        op = w.op
        if op.op_id in self.states:
            return self.states[op.op_id]
        if isinstance(op, JoinOp):
            state = {"left": self._side(op.left, w.children[0]),
                     "right": self._side(op.right, w.children[1])}
            self.stats.sources[op.op_id] = "spark" if not (
                _in_memory(op.left) and _in_memory(op.right)) else "engine"
        elif has_stateful(w.children[0].node) or (
                not self.joins_in_spark and _memory_join_below(w.children[0])):
            # above another stateful operator (or joined rows the driver holds anyway):
            # step the engine's operator over its input, rebuilt from the lower operators'
            # exact state
            self.outputs[op.op_id] = op.step([self.output(w.children[0])])
            state = op.snapshot()
            self.stats.sources[op.op_id] = "engine"
        elif isinstance(op, AggregateOp):
            state = self._aggregate_state(op, w.children[0].node)
            self.stats.sources[op.op_id] = "spark"
        elif isinstance(op, TopKOp):
            state = self._topk_state(op, w.children[0].node)
            self.stats.sources[op.op_id] = "spark"
        else:  # pragma: no cover - every stateful operator is handled above
            raise TypeError(f"no bootstrap for {type(op).__name__}")
        self.states[op.op_id] = state
        return state

    def _side(self, side, child) -> pa.Table:
        if isinstance(side, SparkJoinSide):
            return self._spark_side(side, child.node)
        return batch_to_arrow(self.output(child))

    def _spark_side(self, side: SparkJoinSide, node: PlanNode) -> pa.Table:
        """A Spark-served side holds its versions and a Bloom filter of its keys."""
        side.versions = {t: self.versions[t] for t in side.tables}
        side.bloom = None
        if side.use_bloom:
            rel = self._relation(node)
            keys = ", ".join(quote(k) for k in side.key_columns)
            distinct = self._collect(f"{rel.with_clause}SELECT DISTINCT {keys}\n"
                                     f"FROM {rel.name}")
            hashes, valid, _ = key_hashes(distinct, side.key_columns)
            side.bloom = BloomFilter(2 * int(valid.sum()))
            side.bloom.add(hashes[valid])
        return side.snapshot()

    def _aggregate_state(self, op: AggregateOp, input_node: PlanNode) -> dict[str, pa.Table]:
        rel = self._relation(input_node)
        sql, plan = _aggregate_sql(op, rel, self.options.minmax_buffer)
        return _aggregate_tables(op, self._collect(sql), plan, self.options.minmax_buffer)

    def _topk_state(self, op: TopKOp, input_node: PlanNode) -> dict[str, pa.Table]:
        rel = self._relation(input_node)
        cols = ", ".join(quote(c) for c in rel.columns)
        node = op.node
        assert isinstance(node, TopK)
        sql = (f"{_more(rel)}__imp_r AS (\n  SELECT {cols}, {rel.annotation_sql} AS {quote(ANN)}"
               f" FROM {rel.name}\n)\n"
               f"SELECT {cols}, {quote(ANN)}, COUNT(1) AS __w FROM __imp_r\n"
               f"GROUP BY {cols}, {quote(ANN)}")
        limit = op.buffer
        if limit is not None:
            sql += f"\nORDER BY {total_order_sql(node, quote(ANN))}\nLIMIT {limit + 1}"
        out = self._collect(sql)
        complete = limit is None or out.num_rows <= limit
        if limit is not None:
            out = out.slice(0, limit)
        weights = out.column("__w").to_numpy().astype(np.int64)
        batch = _to_batch(out.drop_columns(["__w"]), op.output_schema, weights)
        return {"entries": batch_to_arrow(batch), "meta": pa.table({"complete": [complete]})}


def _in_memory(side) -> bool:
    return not isinstance(side, SparkJoinSide)


def _memory_join_below(w) -> bool:
    """Whether the wired subtree ``w`` holds a join with both sides in memory (whose
    output the bootstrap computes on the driver)."""
    if isinstance(w.op, JoinOp) and _in_memory(w.op.left) and _in_memory(w.op.right):
        return True
    return any(_memory_join_below(c) for c in w.children)


def _more(rel: AnnotatedRelation) -> str:
    """``rel``'s WITH clause opened for more CTEs."""
    return rel.with_clause.rstrip("\n") + ",\n"


def _array(col: pa.ChunkedArray | pa.Array, dtype: pa.DataType | None = None) -> pa.Array:
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if isinstance(arr, pa.ChunkedArray):  # no chunks at all
        arr = pa.array([], type=dtype or col.type)
    return arr


def _to_batch(out: pa.Table, schema: pa.Schema, weights: np.ndarray) -> DeltaBatch:
    """Spark's rows (``schema``'s columns, then ``__imp_fid`` or ``__imp_ann``) as a batch."""
    names = out.column_names
    data = out.select(names[:len(schema)]).rename_columns(schema.names).cast(schema)
    last = names[len(schema)]
    if last == FID_COLUMN:
        ids = _array(out.column(last)).to_numpy(zero_copy_only=False)
        ann = Annotation.singletons(ids.astype(np.int32))
    else:
        ann = _list_annotation(_array(out.column(last)))
    return DeltaBatch(data, weights, ann)


def _list_annotation(lists: pa.Array) -> Annotation:
    offsets = lists.offsets.to_numpy().astype(np.int64)
    values = lists.values.to_numpy(zero_copy_only=False).astype(np.int32)
    values = values[offsets[0]:offsets[-1]]
    return Annotation(offsets - offsets[0], values)


# -- aggregation ----------------------------------------------------------------------------
@dataclass(frozen=True)
class _AggPlan:
    keys: int  # group-by columns (__k0..)
    anns: int  # annotation columns (__a0..), each one INT fragment id
    floats: tuple[int, ...]  # aggregates summed as doubles
    exact: tuple[int, ...]  # aggregates summed as DECIMAL (integers, decimals)
    minmax: tuple[int, ...]
    # aggregates over the same argument share its non-NULL count (and sum): aggregate i
    # reads the columns of aggregate source[i]
    source: tuple[int, ...] = ()


def _float_columns(x: str, i: int) -> list[str]:
    """SQL columns splitting the double ``x``: its bucket ``__b{i}``, ``__d{i}`` (x, or 0
    for NULL, zero and non-finite values) and ``__bad{i}`` (1 for NaN and infinities,
    which the engine refuses to sum).

    e0 = floor(log2|x|) may be off by one; b = floor((e0 − 53) / 32) keeps 32·b at or
    below the exponent of x's last mantissa bit either way, so N = x·2^(−32·b) is an
    integer with |N| < 2^87 (see ``_scaled_columns``)."""
    finite = f"(NOT isnan({x}) AND abs({x}) != CAST('Infinity' AS DOUBLE))"
    live = f"({x} IS NOT NULL AND {x} != 0D AND {finite})"
    e0 = f"CAST(FLOOR(LOG2(ABS({x}))) AS INT)"
    return [
        f"CASE WHEN {live} THEN CAST(FLOOR(CAST({e0} - 53 AS DOUBLE) / {_BUCKET}D) AS INT)"
        f" ELSE 0 END AS __b{i}",
        f"CASE WHEN {live} THEN {x} ELSE 0D END AS __d{i}",
        f"CASE WHEN {x} IS NOT NULL AND NOT {finite} THEN 1 ELSE 0 END AS __bad{i}",
    ]


def _scaled_columns(i: int) -> list[str]:
    """``__hi{i}``, ``__lo{i}``: N = x·2^(−32·b) = hi·2^44 + lo with 0 <= lo < 2^44. N comes
    from two power-of-two scalings, each within the double range (so exact); dividing N
    by 2^44, flooring, multiplying back and subtracting are exact as well."""
    t = f"(-{_BUCKET} * __b{i})"
    h = f"CAST(FLOOR(CAST({t} AS DOUBLE) / 2D) AS INT)"
    n = f"((__d{i} * POWER(2D, {h})) * POWER(2D, {t} - {h}))"
    unit = f"{float(2 ** _HI_SHIFT)!r}D"
    hi = f"FLOOR({n} / {unit})"
    return [f"CAST({hi} AS BIGINT) AS __hi{i}",
            f"CAST({n} - CAST({hi} AS DOUBLE) * {unit} AS BIGINT) AS __lo{i}"]


def _aggregate_sql(op: AggregateOp, rel: AnnotatedRelation,
                   buffer: int | None) -> tuple[str, _AggPlan]:
    agg = op.agg
    keys = [f"{quote(g)} AS __k{j}" for j, g in enumerate(agg.group_by)]
    kn = [f"__k{j}" for j in range(len(agg.group_by))]
    anns = [name for name, is_set in rel.ann]
    assert not any(is_set for _, is_set in rel.ann), "aggregation input holds no aggregate"
    an = [f"__a{i}" for i in range(len(anns))]
    inner = keys + [f"{quote(a)} AS {n}" for a, n in zip(anns, an)]
    fine = ["COUNT(1) AS __c"]
    outer = ["SUM(__c) AS __cnt"]
    fields = [f"'a{i}', {n}" for i, n in enumerate(an)] + ["'c', __c"]
    group_fine = kn + an
    floats, exact, minmax = [], [], []
    counted: dict[str, int] = {}  # argument -> the aggregate that counts (and sums) it
    summed: set[int] = set()
    source = list(range(len(agg.aggregates)))
    for i, (a, t) in enumerate(zip(agg.aggregates, op.arg_types)):
        if a.func == "count_star":
            continue
        x = quote(a.arg)
        first = counted.setdefault(a.arg, i)
        source[i] = first
        if first == i:
            inner.append(f"{x} AS __x{i}")
            fine.append(f"COUNT(__x{i}) AS __n{i}")
            outer.append(f"SUM(__n{i}) AS __n{i}")
        if a.func in ("min", "max"):
            minmax.append(i)
        elif a.func in ("sum", "avg"):
            if first in summed:
                continue  # sum(x) and avg(x): one exact sum
            summed.add(first)
            j = first  # the shared columns are named after the first aggregate
            kind = kind_of(t)
            if kind == "float":
                floats.append(j)
                inner += _float_columns(f"CAST({x} AS DOUBLE)", j)
                group_fine.append(f"__b{j}")
                fine += [f"SUM(CAST(__hi{j} AS DECIMAL(38,0))) AS __h{j}",
                         f"SUM(CAST(__lo{j} AS DECIMAL(38,0))) AS __l{j}",
                         f"SUM(__bad{j}) AS __bad{j}"]
                outer.append(f"SUM(__bad{j}) AS __bad{j}")
                fields += [f"'b{j}', __b{j}", f"'h{j}', __h{j}", f"'l{j}', __l{j}"]
            else:
                exact.append(j)
                scale = t.scale if kind == "decimal" else 0
                arg = f"CAST(__x{j} AS INT)" if pa.types.is_boolean(t) else f"__x{j}"
                fine.append(f"SUM(CAST({arg} AS DECIMAL(38,{scale}))) AS __s{j}")
                outer.append(f"SUM(__s{j}) AS __s{j}")
    scaled = [c for i in floats for c in _scaled_columns(i)]
    parts = len(an) > 0 or bool(floats)
    if parts:
        outer.append(f"collect_list(named_struct({', '.join(fields)})) AS __parts")
    sql = _more(rel)
    sql += f"__imp_in AS (\n  SELECT {', '.join(inner)}\n  FROM {rel.name}\n),\n"
    sql += ("__imp_sc AS (\n  SELECT *" + "".join(f", {s}" for s in scaled)
            + "\n  FROM __imp_in\n),\n")
    sql += f"__imp_fine AS (\n  SELECT {', '.join(group_fine + fine)}\n  FROM __imp_sc\n"
    sql += f"  GROUP BY {', '.join(group_fine)}\n),\n" if group_fine else \
        "  HAVING COUNT(1) > 0\n),\n"
    sql += f"__imp_g AS (\n  SELECT {', '.join(kn + outer)}\n  FROM __imp_fine\n"
    sql += f"  GROUP BY {', '.join(kn)}\n)" if kn else "  HAVING COUNT(1) > 0\n)"
    select = ["g.*"]
    joins = []
    by = ", ".join(kn)
    part_by = f"PARTITION BY {by} " if kn else ""
    for i in minmax:
        desc = "DESC" if agg.aggregates[i].func == "max" else "ASC"
        x = f"__x{source[i]}"
        sql += (f",\n__imp_mv{i} AS (\n  SELECT {', '.join(kn + [f'{x} AS __v'])}, "
                f"COUNT(1) AS __c\n  FROM __imp_in WHERE {x} IS NOT NULL\n"
                f"  GROUP BY {', '.join(kn + [x])}\n)")
        if buffer is not None:
            sql += (f",\n__imp_mr{i} AS (\n  SELECT *, row_number() OVER ({part_by}ORDER BY "
                    f"__v {desc}) AS __r, COUNT(1) OVER ({part_by.strip()}) AS __nd\n"
                    f"  FROM __imp_mv{i}\n)")
            src, nd, where = f"__imp_mr{i}", "MAX(__nd)", f" WHERE __r <= {int(buffer)}"
        else:
            src, nd, where = f"__imp_mv{i}", "COUNT(1)", ""
        sql += (f",\n__imp_mm{i} AS (\n  SELECT {', '.join(kn)}{', ' if kn else ''}"
                f"collect_list(named_struct('v', __v, 'c', __c)) AS __mm, {nd} AS __nd\n"
                f"  FROM {src}{where}\n" + (f"  GROUP BY {by}\n)" if kn else ")"))
        on = " AND ".join(f"g.{k} <=> m{i}.{k}" for k in kn) or "TRUE"
        joins.append(f"LEFT JOIN __imp_mm{i} m{i} ON {on}")
        select += [f"m{i}.__mm AS __mm{i}", f"m{i}.__nd AS __nd{i}"]
    sql += f"\nSELECT {', '.join(select)}\nFROM __imp_g g" + "".join(f"\n{j}" for j in joins)
    return sql, _AggPlan(len(kn), len(an), tuple(floats), tuple(exact), tuple(minmax),
                         tuple(source))


def _ints(col: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Exact integers of a DECIMAL(38, s) column as unscaled values (NULL -> 0)."""
    arr = _array(col)
    return exact_values(arr) if len(arr) else np.zeros(0, dtype=np.int64)


def _aggregate_tables(op: AggregateOp, res: pa.Table, plan: _AggPlan,
                      buffer: int | None) -> dict[str, pa.Table]:
    agg = op.agg
    n = res.num_rows
    gid = np.arange(n, dtype=np.int64)
    cols: dict[str, Any] = {}
    for j, t in enumerate(op.groups.key_types):
        cols[f"k{j}"] = _array(res.column(f"__k{j}")).cast(t)
    cols["gid"] = pa.array(gid, pa.int64())
    cols["cnt"] = pa.array(_array(res.column("__cnt")).to_numpy(zero_copy_only=False)
                           .astype(np.int64))
    parts = _array(res.column("__parts")) if "__parts" in res.column_names else None
    owner = np.repeat(gid, np.diff(parts.offsets.to_numpy())) if parts is not None else None
    entries = parts.values.slice(parts.offsets[0].as_py(),
                                 len(owner)) if parts is not None else None
    for i, a in enumerate(agg.aggregates):
        if a.func == "count_star":
            cols[f"nonnull{i}"] = pa.array(np.zeros(n, dtype=np.int64))
            continue
        src = plan.source[i]
        nn = _array(res.column(f"__n{src}")).fill_null(0).to_numpy(zero_copy_only=False)
        cols[f"nonnull{i}"] = pa.array(nn.astype(np.int64))
        if a.func not in ("sum", "avg"):
            continue
        if src in plan.exact:
            sums = _ints(res.column(f"__s{src}"))
            cols[f"sum{i}"] = pa.array([str(int(v)) for v in sums], pa.string())
        elif src in plan.floats:
            if int(pc.sum(_array(res.column(f"__bad{src}"))).as_py() or 0):
                raise ValueError("cannot sum NaN or infinite values exactly")
            cols[f"sum{i}"] = pa.array(
                [str(v) for v in _float_sums(entries, owner, n, src)], pa.string())
    out = {"groups": pa.table(cols), "fragments": _fragments(op, entries, owner, plan.anns)}
    for i in plan.minmax:
        mm = _array(res.column(f"__mm{i}"))
        nd = _array(res.column(f"__nd{i}")).fill_null(0).to_numpy(zero_copy_only=False)
        lengths = np.diff(mm.offsets.to_numpy()) if len(mm) else np.zeros(0, np.int64)
        lengths = np.where(_array(mm.is_null()).to_numpy(zero_copy_only=False), 0, lengths) \
            if len(mm) else lengths
        values = mm.values.slice(mm.offsets[0].as_py(), int(lengths.sum())) if len(mm) \
            else None
        has = lengths > 0
        out[f"minmax{i}"] = pa.table({
            "gid": pa.array(np.repeat(gid, lengths), pa.int64()),
            "value": (values.field("v") if values is not None
                      else pa.array([])).cast(op.arg_types[i]),
            "count": (values.field("c") if values is not None
                      else pa.array([], pa.int64())).cast(pa.int64())})
        complete = np.ones(n, dtype=bool) if buffer is None else nd <= buffer
        out[f"complete{i}"] = pa.table({"gid": pa.array(gid[has], pa.int64()),
                                        "complete": pa.array(complete[has], pa.bool_())})
    return out


def _fragments(op: AggregateOp, entries: pa.StructArray | None, owner: np.ndarray | None,
               nanns: int) -> pa.Table:
    """F_g as the engine keeps it: sorted keys g·P + ρ with the weighted tuple counts."""
    empty = pa.table({"key": pa.array([], pa.int64()), "count": pa.array([], pa.int64())})
    if entries is None or nanns == 0 or len(entries) == 0:
        return empty
    P = op.frags.P
    c = entries.field("c").to_numpy(zero_copy_only=False).astype(np.int64)
    ids = [entries.field(f"a{i}").to_numpy(zero_copy_only=False).astype(np.int64)
           for i in range(nanns)]
    if nanns == 1:
        pair, weight = owner * P + ids[0], c
    else:
        # a tuple counts once per fragment of its annotation (a self-join of a partitioned
        # table may carry the same fragment twice)
        row = np.tile(np.arange(len(c), dtype=np.int64), nanns)
        frag = np.concatenate(ids)
        per_row = np.unique(row * P + frag)
        row, frag = np.divmod(per_row, P)
        pair, weight = owner[row] * P + frag, c[row]
    keys, inverse = np.unique(pair, return_inverse=True)
    counts = np.bincount(inverse, weights=weight, minlength=len(keys)).round().astype(np.int64)
    keep = counts != 0
    return pa.table({"key": pa.array(keys[keep], pa.int64()),
                     "count": pa.array(counts[keep], pa.int64())})


def _float_sums(entries: pa.StructArray, owner: np.ndarray, n: int, i: int) -> list[int]:
    """Per group, the exact sum of aggregate ``i``'s doubles times 2**FLOAT_SHIFT."""
    sums = [0] * n
    b = entries.field(f"b{i}").to_numpy(zero_copy_only=False).tolist()
    hi = _ints(entries.field(f"h{i}")).tolist()
    lo = _ints(entries.field(f"l{i}")).tolist()
    for g, bucket, h, low in zip(owner.tolist(), b, hi, lo):
        scaled = (int(h) << _HI_SHIFT) + int(low)  # Σ x·2^(−32·b) of the entry
        shift = _BUCKET * int(bucket) + FLOAT_SHIFT
        if shift >= 0:
            sums[g] += scaled << shift
        else:  # sub-normal doubles: still multiples of 2**-1074, so exact
            sums[g] += scaled >> -shift
    return sums


def _output_from_state(op: Operator, state: Mapping[str, pa.Table]) -> DeltaBatch:
    """The full output of a stateful operator with ``state``: what it emits when its state
    is built from empty in one step (restores ``state`` into ``op``)."""
    op.restore(dict(state))
    if isinstance(op, AggregateOp):
        gids = np.flatnonzero(op.cnt[:len(op.groups)] > 0)
        if len(gids) == 0:
            return op.empty()
        values = op._values(  # the operator's own finalization of its exact state
            gids, op.cnt[gids], [a[gids] for a in op.nonnull],
            [None if s is None else s[gids] for s in op.sums],
            [None if m is None else [m.extreme(g) for g in gids.tolist()] for m in op.minmax])
        data = pa.Table.from_arrays(values, schema=op.output_schema)
        return DeltaBatch.of(data, 1, op.frags.annotation(gids))
    if isinstance(op, TopKOp):
        return op._to_batch([((row, ann), m) for row, ann, m in op._top])
    raise TypeError(f"no output from the state of {type(op).__name__}")

