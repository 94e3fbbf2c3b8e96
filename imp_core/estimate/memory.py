"""Size estimates of a plan before it is built, and the memory guard of registration.

``estimate_plan`` walks a plan bottom-up from each scanned table's row count (and, where
the caller has them cheaply, per-column distinct counts and min/max: Delta log or
Parquet statistics, declared value domains) and estimates, per operator, its output rows
and the memory the incremental engine (``imp_core.engine``) would use for it:

- ``state_bytes``: what the operator keeps between batches. A ``Join``, ``SemiJoin`` or
  ``OuterJoin`` keeps both inputs' rows (a ``SideIndex`` each: the rows, weight,
  annotation, key index and Bloom filter), except a side probed in the data layer
  (``probed``: side ids as ``imp_core.query.data_layer.join_sides`` names them);
  ``Aggregate`` / ``Distinct`` one entry per group plus its fragment counts and
  min/max multisets; ``TopK`` its buffer (every input row when unbounded); a ``SetOp``
  other than UNION ALL one entry per distinct row of both inputs (at most their rows)
  with its fragment counts; ``Window`` every input row and its output row. Scans,
  selections, projections and UNION ALL keep nothing.
- ``work_bytes``: the largest batch a join materializes at once, which is all of its
  pairs when the whole input arrives in one batch (the bootstrap batch, the reference
  evaluator): the key-matched pairs of an equi-join, *every* pair of a join without
  equi-join keys (a cross product; its residual condition is evaluated on the pairs).

An operator's footprint is its state plus its largest batch (the root's also the kept
query result). ``check_memory`` refuses a plan one operator of which exceeds a budget,
naming the operator with the largest footprint; ``PlanEstimate.peak_bytes`` (every
operator's state, the result and the largest batch) is reported with it, not checked:
an honest plan's total at a large scale may exceed the budget that a cross product
exceeds by orders of magnitude, and a query's large equi-join sides may be probed in
the data layer instead of held.

Rules (textbook defaults; the point is to catch orders of magnitude, e.g. a cross
product of two large inputs, not precision):

- selectivity (``imp_core.estimate.selectivity``): ``col = literal`` 1/distinct(col), else 0.1;
  ``<>`` the complement; ranges over a column with a known min/max interpolate (all
  range conjuncts on one column together), else 1/3 each; ``IN`` n·(equality); ``LIKE``
  0.1; ``IS NULL`` 0.05; ``col = col`` 1/max(distinct), else 0.1; AND multiplies, OR
  adds (s1 + s2 - s1·s2), NOT complements; anything else 1/3. Interpolated ranges are
  never below 1%.
- distinct counts: from statistics, else ``max - min + 1`` for integer-like columns with
  a known min/max, capped by the rows; through operators, never above the output rows.
  Each column also has a domain: its distinct count at the scan, or, when unknown, the
  scanned table's rows (as if it were that table's key).
- equi-join output: |L|·|R| / max(distinct(left keys), distinct(right keys)), where the
  distinct count of several key columns is the product of theirs, capped by the rows. A
  key pair shares the smaller of the two columns' domains (the referenced key's, for a
  foreign key) and a column of unknown distinct count takes that whole domain: without
  statistics a foreign-key join yields about the referencing (larger) side, times the
  share of the referenced side its filters keep. A residual condition multiplies by its
  selectivity; a join without equi keys yields |L|·|R|·selectivity.
- semi-join: |L|·min(1, distinct(R keys) / distinct(L keys)) (0.5 when unknown);
  anti-join: the rest of |L|; left outer join: max(inner, |L|); full: max(inner, |L|+|R|).
- groups: min(input rows, product of the group columns' distinct counts), an unknown
  column counting ``UNKNOWN_GROUPS`` or its domain, if smaller (a dimension's name
  column of a small table); no group-by column: one group. An aggregate's
  output lies within its argument's bounds (MIN, MAX, AVG) or those times the average
  group's rows (SUM), so a HAVING on a sum interpolates against an average group.
- row bytes: the Arrow widths of the schema (``VAR_WIDTH`` bytes for a string value),
  plus the weight (8), the annotation offset (8) and 4 per fragment id a row carries.

Invariants: estimating reads nothing but the statistics it is given; it never raises
for a plan of the supported node types, and every estimate is finite and >= 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Collection, Mapping

import pyarrow as pa

from imp_core.errors import PlanTooLargeError, human_bytes
from imp_core.estimate.budget import (  # noqa: F401 - re-exported
    AUTO,
    ENV_BUDGET,
    available_memory_bytes,
    default_memory_budget,
    memory_budget,
    parse_budget,
)
from imp_core.estimate.expand import expand_estimate
from imp_core.estimate.selectivity import (  # noqa: F401 - the rule constants are re-exported
    EQ_SEL,
    LIKE_SEL,
    MIN_RANGE_SEL,
    NULL_SEL,
    RANGE_SEL,
    selectivity,
)
from imp_core.estimate.selectivity import ColumnEstimate as _Col
from imp_core.estimate.selectivity import RelationEstimate as _Rel
from imp_core.estimate.selectivity import number as _number
from imp_core.estimate.table_stats import (  # noqa: F401 - ColumnStats etc. are re-exported
    ColumnStats,
    TableStats,
    column_stats,
    int_like,
)
from imp_core.plan.aggregates import registry
from imp_core.plan.aggregates.base import ValueRange
from imp_core.plan.expand import Expand
from imp_core.plan.expr import (
    Cast,
    ColumnRef,
    Expr,
    Literal,
    Strict,
)
from imp_core.plan.nodes import (
    Aggregate,
    Distinct,
    Join,
    OuterJoin,
    PlanNode,
    Project,
    Scan,
    Select,
    SemiJoin,
    SetOp,
    TopK,
    Window,
    scalar_filter_parts,
)
from imp_core.plan.paths import OperatorPath

# -- the rules' constants ---------------------------------------------------------------
SEMI_SEL = 0.5
UNKNOWN_GROUPS = 200  # distinct values of a group column without statistics
VAR_WIDTH = 24  # bytes of one string / binary value: 4-byte offset + 20 bytes of text
ROW_OVERHEAD = 16  # weight (int64) and annotation offset (int64) per row of a batch
FRAGMENT_BYTES = 4  # one fragment id of an annotation
SIDE_INDEX_BYTES = 18  # per stored join row: sorted key, permutation, Bloom filter bits
PAIR_BYTES = 16  # per join pair: the two int64 row indices
GROUP_BYTES = 256  # per group: dict entry, key tuple, sketch bitmap, counters
GROUP_VALUE_BYTES = 64  # per group and key column or aggregate: a Python value and arrays
FRAGMENT_COUNT_BYTES = 16  # per (group, fragment) count
SORTED_ENTRY_BYTES = 128  # per entry of a sorted multiset (min/max values, top-k map)


@dataclass(frozen=True)
class OperatorEstimate:
    """One operator's estimate; ``op_id`` is the text of its ``OperatorPath`` ("0" the
    root, "0.1" its second child, ...), as ``IncrementalQuery`` names its operators."""

    op_id: str
    node: PlanNode
    rows: float  # output rows
    row_bytes: int  # bytes of one output row in a batch
    state_bytes: float = 0.0  # kept between batches
    work_bytes: float = 0.0  # the largest batch materialized at once (joins: all pairs)
    pairs: float = 0.0  # joins: the pairs materialized before the residual condition

    @property
    def footprint(self) -> float:
        return self.state_bytes + self.work_bytes

    @property
    def description(self) -> str:
        return self.node._describe()


@dataclass(frozen=True)
class PlanEstimate:
    """Every operator's estimate, children before parents (the root last)."""

    operators: tuple[OperatorEstimate, ...]
    result_bytes: float = 0.0  # the kept query result (``EngineOptions.keep_result``)
    # the sides this estimate leaves to the data layer (``imp_core.query.data_layer.JoinPlacement``)
    probed: frozenset[OperatorPath] = frozenset()

    @property
    def root(self) -> OperatorEstimate:
        return self.operators[-1]

    def footprint(self, op: OperatorEstimate) -> float:
        """What ``op`` needs at once: its state and largest batch (the root: plus the
        kept result)."""
        return op.footprint + (self.result_bytes if op is self.root else 0.0)

    @property
    def state_bytes(self) -> float:
        """Everything the pipeline keeps between batches (every operator, the result)."""
        return sum(o.state_bytes for o in self.operators) + self.result_bytes

    @property
    def peak_bytes(self) -> float:
        """All state, plus the largest batch any operator materializes at once."""
        return self.state_bytes + max((o.work_bytes for o in self.operators), default=0.0)

    def largest(self) -> OperatorEstimate:
        """The operator with the largest footprint (the first of equals, bottom-up)."""
        return max(self.operators, key=self.footprint)

    def by_id(self, op_id: str) -> OperatorEstimate:
        for o in self.operators:
            if o.op_id == op_id:
                return o
        raise KeyError(op_id)

    def explain(self) -> str:
        """One line per operator, indented as ``PlanNode.explain``."""
        lines = []
        for o in sorted(self.operators, key=lambda o: OperatorPath.parse(o.op_id).steps):
            pad = "  " * OperatorPath.parse(o.op_id).depth
            lines.append(f"{pad}{o.description}  [rows ~{_count(o.rows)}, state "
                         f"~{human_bytes(o.state_bytes)}, batch ~{human_bytes(o.work_bytes)}]")
        return "\n".join(lines)


# -- estimating -------------------------------------------------------------------------
def estimate_plan(root: PlanNode, stats: Mapping[str, TableStats],
                  sketched: Collection[str] = (), probed: Collection[OperatorPath] = (),
                  fragments: int = 64, minmax_buffer: int | None = None,
                  topk_buffer: int | None = None, keep_result: bool = True) -> PlanEstimate:
    """Estimate ``root`` from ``stats`` (every scanned table's, by table name).

    ``sketched``: the partitioned tables (their rows carry a fragment id each);
    ``probed``: equi-join sides kept in the data layer (paths ``"<op>:left"``/``":right"``)
    and aggregations whose groups it holds (``"<op>:groups"``);
    ``fragments``: fragments per sketched table; the buffers as in ``EngineOptions``.
    """
    out: list[OperatorEstimate] = []
    # joins of a scalar filter (π σ (L × S), S one row): one operator compares each row
    # of L with S's row and the output rows share S's annotation (stored once)
    shared = frozenset(id(n.input.input) for n in root.walk()
                       if scalar_filter_parts(n) is not None)
    ctx = _Context(stats, frozenset(sketched), frozenset(probed), max(fragments, 1),
                   minmax_buffer, topk_buffer, out, shared)
    rel = ctx.visit(root, OperatorPath.ROOT)
    result = rel.rows * out[-1].row_bytes if keep_result else 0.0
    return PlanEstimate(tuple(out), result, frozenset(probed))


@dataclass
class _Context:
    stats: Mapping[str, TableStats]
    sketched: frozenset[str]
    probed: frozenset[OperatorPath]
    fragments: int
    minmax_buffer: int | None
    topk_buffer: int | None
    out: list[OperatorEstimate]
    scalar_joins: frozenset[int] = frozenset()  # ids of the joins of scalar filters
    # equal subplans are one operator in the engine (``IncrementalQuery``): a repeat holds
    # no state and does no work of its own
    seen: dict[PlanNode, _Rel] = field(default_factory=dict)

    def visit(self, node: PlanNode, path: OperatorPath) -> _Rel:
        rel = self.seen.get(node)
        if rel is not None:
            self.out.append(OperatorEstimate(str(path), node, _finite(rel.rows),
                                             row_bytes(node.schema, rel.ids)))
            return rel
        kids = [self.visit(c, path.child(i)) for i, c in enumerate(node.children())]
        rel, state, work, pairs = self._estimate(node, path, kids)
        self.out.append(OperatorEstimate(str(path), node, _finite(rel.rows),
                                         row_bytes(node.schema, rel.ids),
                                         _finite(state), _finite(work), _finite(pairs)))
        self.seen[node] = rel
        return rel

    def _estimate(self, node: PlanNode, path: OperatorPath,
                  kids: list[_Rel]) -> tuple[_Rel, float, float, float]:
        if isinstance(node, Scan):
            return self._scan(node), 0.0, 0.0, 0.0
        if isinstance(node, Select):
            child = kids[0]
            rows = child.rows * selectivity(node.predicate, child)
            return _shrink(child, rows), 0.0, 0.0, 0.0
        if isinstance(node, Project):
            child = kids[0]
            cols = {e.name: _project_col(e.expr, child) for e in node.exprs}
            return _Rel(child.rows, cols, child.ids), 0.0, 0.0, 0.0
        if isinstance(node, (Join, SemiJoin, OuterJoin)):
            return self._join(node, path, kids[0], kids[1])
        if isinstance(node, (Aggregate, Distinct)):
            rel, state, work, pairs = self._group(node, kids[0])
            if path.at("groups") in self.probed:  # the data layer holds the groups
                state = 0.0
            return rel, state, work, pairs
        if isinstance(node, TopK):
            child = kids[0]
            kept = child.rows if self.topk_buffer is None else \
                min(child.rows, max(self.topk_buffer, node.k))
            entry = row_bytes(node.input.schema, child.ids) + SORTED_ENTRY_BYTES
            return _shrink(child, min(child.rows, node.k)), kept * entry, 0.0, 0.0
        if isinstance(node, SetOp):
            return self._set_op(node, kids[0], kids[1])
        if isinstance(node, Expand):
            return expand_estimate(node, kids[0]), 0.0, 0.0, 0.0
        if isinstance(node, Window):  # every input row and its output, per partition key
            child = kids[0]
            entry = row_bytes(node.input.schema, child.ids) + SORTED_ENTRY_BYTES + \
                row_bytes(node.schema, child.ids)
            cols = dict(child.cols)
            return _Rel(child.rows, cols, child.ids), child.rows * entry, 0.0, 0.0
        # an unknown node type: its input's size, no state
        child = kids[0] if kids else _Rel(0.0, {}, 0)
        return _Rel(child.rows, {}, child.ids), 0.0, 0.0, 0.0

    def _set_op(self, node: SetOp, left: _Rel, right: _Rel
                ) -> tuple[_Rel, float, float, float]:
        """UNION ALL: both inputs' rows, no state. The others: one entry per distinct row
        of both inputs (at most their rows) with its fragment counts; output at most
        the rows of both inputs (UNION), of the smaller (INTERSECT), of the left
        (EXCEPT)."""
        both = left.rows + right.rows
        cols = {}
        for name, rname in zip(node.left.column_names, node.right.column_names):
            lc, rc = left.cols.get(name), right.cols.get(rname)
            cols[name] = _Col(domain=(lc.domain if lc else left.rows)
                              + (rc.domain if rc else right.rows))
        ids = max(left.ids, right.ids)
        if node.linear:
            return _Rel(both, cols, ids), 0.0, 0.0, 0.0
        entries = both
        ids_in = left.rows * left.ids + right.rows * right.ids
        frag_pairs = min(ids_in, entries * self.fragments * max(ids, 1))
        state = (entries * (GROUP_BYTES + GROUP_VALUE_BYTES * len(node.column_names))
                 + frag_pairs * FRAGMENT_COUNT_BYTES)
        rows = {"union": both, "intersect": min(left.rows, right.rows),
                "except": left.rows}[node.kind]
        return _shrink(_Rel(rows, cols, ids), rows), state, 0.0, 0.0

    def _scan(self, node: Scan) -> _Rel:
        table = self.stats.get(node.table)
        rows = float(table.rows) if table is not None else 0.0
        cols: dict[str, _Col] = {}
        for src, f in zip(node.source_columns, node.fields):
            cs = table.columns.get(src) if table is not None else None
            distinct = _distinct(cs, f.dtype, rows)
            cols[f.name] = _Col(distinct, distinct if distinct is not None else rows,
                                cs.low if cs else None, cs.high if cs else None)
        return _Rel(rows, cols, 1 if node.table in self.sketched else 0)

    def _join(self, node: Join | SemiJoin | OuterJoin, path: OperatorPath, left: _Rel,
              right: _Rel) -> tuple[_Rel, float, float, float]:
        lk, rk, residual = node.equi_keys()
        both = _Rel(0.0, {**left.cols, **right.cols}, left.ids + right.ids)
        dl, dr, domains = _key_distinct(left, lk, right, rk)
        uncorrelated = isinstance(node, SemiJoin) and node.uncorrelated
        if lk:
            denom = max(dl, dr)
            pairs = left.rows * right.rows / denom if denom > 0 else 0.0
        else:
            pairs = 0.0 if uncorrelated else left.rows * right.rows
        inner = pairs * (selectivity(residual, both) if residual is not None else 1.0)
        lbytes = row_bytes(node.left.schema, left.ids)
        rbytes = row_bytes(node.right.schema, right.ids)
        work = pairs * (lbytes + rbytes + PAIR_BYTES)
        if uncorrelated:  # one yes/no over the right side: a pass over each side
            work = left.rows * lbytes + right.rows * rbytes
        if id(node) in self.scalar_joins:  # S's row and its annotation: once, not per pair
            work = pairs * (lbytes + row_bytes(node.right.schema, 0) + PAIR_BYTES) + rbytes
            both.ids = left.ids
        state = 0.0
        for side, rel, nbytes in (("left", left, lbytes), ("right", right, rbytes)):
            if path.at(side) not in self.probed:  # only sides that can be probed are ever listed
                state += rel.rows * (nbytes + SIDE_INDEX_BYTES)
        if isinstance(node, SemiJoin):
            if lk:
                frac = min(1.0, dr / dl) if dl > 0 else SEMI_SEL
            else:
                frac = min(1.0, right.rows * (selectivity(residual, both)
                                             if residual is not None else 1.0))
            rows = left.rows * ((1.0 - frac) if node.anti else frac)
            kept = _shrink(left, rows)
            if not node.anti:
                kept.ids = left.ids + right.ids
            return kept, state, work, pairs
        if isinstance(node, OuterJoin):
            rows = max(inner, left.rows) if node.kind == "left" else \
                max(inner, left.rows + right.rows)
        else:
            rows = inner
        out = _shrink(both, rows)
        for a, b, domain in zip(lk, rk, domains):  # equal keys share what is known
            ca, cb = out.cols[a], out.cols[b]
            known = [c.distinct for c in (ca, cb) if c.distinct is not None]
            ca.distinct = cb.distinct = min(known) if known else None
            ca.domain = cb.domain = domain
        return out, state, work, pairs

    def _group(self, node: Aggregate | Distinct,
               child: _Rel) -> tuple[_Rel, float, float, float]:
        keys = node.group_by if isinstance(node, Aggregate) else node.input.column_names
        aggs = node.aggregates if isinstance(node, Aggregate) else ()
        if not keys:
            groups = min(child.rows, 1.0)
        else:
            product = 1.0
            for k in keys:
                c = child.cols.get(k)
                if c is None:
                    product *= UNKNOWN_GROUPS
                else:  # a column has no more values than the table it came from has rows
                    product *= c.distinct if c.distinct is not None else \
                        min(UNKNOWN_GROUPS, c.domain)
            groups = min(child.rows, product)
        ids_in = child.rows * child.ids
        frag_pairs = min(ids_in, groups * self.fragments * max(child.ids, 1))
        state = (groups * (GROUP_BYTES + GROUP_VALUE_BYTES * (len(keys) + len(aggs)))
                 + frag_pairs * FRAGMENT_COUNT_BYTES)
        for a in aggs:
            fn = registry.get(a.func)
            # power sums beyond Σx (variance: Σx²) take a value per group each
            state += groups * GROUP_VALUE_BYTES * max(0, fn.moments - 1)
            if fn.extremes:
                kept = child.rows if self.minmax_buffer is None else \
                    min(child.rows, groups * self.minmax_buffer)
                state += kept * SORTED_ENTRY_BYTES
        ids = min(self.fragments * max(child.ids, 1),
                  math.ceil(ids_in / groups) if groups else 0)
        cols = {k: child.cols.get(k, _Col(domain=child.rows)).bounded(groups) for k in keys}
        for a in aggs:
            cols[a.name] = _aggregate_col(a, child, groups)
        return _Rel(groups, cols, int(ids)), state, 0.0, 0.0


def _aggregate_col(call: Any, child: _Rel, groups: float) -> _Col:
    """An aggregate's output column, by the function's ``value_range``: MIN, MAX and AVG
    within their argument's bounds, SUM within those times the average group's rows (a
    HAVING on a sum is judged against an average group); other aggregates unbounded."""
    arg = child.cols.get(call.arg) if call.arg is not None else None
    lo = _number(arg.low) if arg is not None else None
    hi = _number(arg.high) if arg is not None else None
    if lo is None or hi is None:
        return _Col(domain=groups)
    rule = registry.get(call.func).value_range
    if rule is ValueRange.ARGUMENT:
        return _Col(domain=groups, low=lo, high=hi)
    if rule is ValueRange.SUM and groups > 0:
        rows = child.rows / groups
        return _Col(domain=groups, low=min(lo, lo * rows), high=max(hi, hi * rows))
    return _Col(domain=groups)


def _finite(x: float) -> float:
    if x != x or x < 0:  # NaN or negative
        return 0.0
    return min(float(x), 1e300)


def _shrink(rel: _Rel, rows: float) -> _Rel:
    return _Rel(rows, {n: c.bounded(rows) for n, c in rel.cols.items()}, rel.ids)


def _project_col(expr: Expr, child: _Rel) -> _Col:
    while isinstance(expr, (Cast, Strict)):
        expr = expr.operand if isinstance(expr, Cast) else expr.inner
    if isinstance(expr, ColumnRef):
        return child.cols.get(expr.name, _Col(domain=child.rows)).bounded(child.rows)
    if isinstance(expr, Literal):
        return _Col(1.0, 1.0, expr.value, expr.value)
    return _Col(domain=child.rows)


def _distinct(cs: ColumnStats | None, dtype: pa.DataType, rows: float) -> float | None:
    if cs is None:
        return None
    if cs.distinct is not None:
        return float(min(cs.distinct, rows))
    if pa.types.is_boolean(dtype):
        return min(2.0, rows)
    if int_like(dtype):
        lo, hi = _number(cs.low), _number(cs.high)
        if lo is not None and hi is not None and hi >= lo:
            return min(hi - lo + 1, rows)
    return None


def _key_distinct(left: _Rel, lk: tuple[str, ...], right: _Rel, rk: tuple[str, ...]
                  ) -> tuple[float, float, list[float]]:
    """Distinct values of each side's key columns together, and each key pair's shared
    domain: the smaller of the two sides' domains (the referenced key's, for a foreign
    key). A column's unknown distinct count is taken as the shared domain (a column
    without statistics guesses its relation's rows as its domain, so the referenced
    side's smaller domain wins: a foreign-key join yields about the referencing side)."""
    domains: list[float] = []
    lv: dict[str, float] = {}
    rv: dict[str, float] = {}
    for a, b in zip(lk, rk):
        ca = left.cols.get(a, _Col(domain=left.rows))
        cb = right.cols.get(b, _Col(domain=right.rows))
        domain = min(ca.domain, cb.domain)
        domains.append(domain)
        lv[a] = min(lv.get(a, math.inf), ca.guess(left.rows, domain))
        rv[b] = min(rv.get(b, math.inf), cb.guess(right.rows, domain))
    return (min(math.prod(max(v, 1.0) for v in lv.values()), left.rows),
            min(math.prod(max(v, 1.0) for v in rv.values()), right.rows), domains)


# -- row widths -------------------------------------------------------------------------
def value_bytes(dtype: pa.DataType) -> int:
    """Bytes of one value of ``dtype`` in an Arrow array (strings: ``VAR_WIDTH``)."""
    if pa.types.is_boolean(dtype):
        return 1
    if (pa.types.is_string(dtype) or pa.types.is_binary(dtype)
            or pa.types.is_large_string(dtype) or pa.types.is_large_binary(dtype)):
        return VAR_WIDTH
    if pa.types.is_string_view(dtype) or pa.types.is_binary_view(dtype):
        return 16 + VAR_WIDTH // 2
    try:
        width = dtype.bit_width
    except ValueError:
        return 32  # nested and other variable-width types
    return max(1, width // 8)


def row_bytes(schema: Any, fragment_ids: int = 1) -> int:
    """Bytes of one row of a batch of ``schema`` (plan ``Field``s or an Arrow schema):
    its values, weight, annotation offset and ``fragment_ids`` fragment ids."""
    types = [f.dtype if hasattr(f, "dtype") else f.type for f in schema]
    return sum(value_bytes(t) for t in types) + ROW_OVERHEAD + FRAGMENT_BYTES * fragment_ids


# -- the guard --------------------------------------------------------------------------
def check_memory(estimate: PlanEstimate, budget_bytes: int | None) -> None:
    """Raise ``PlanTooLargeError`` if an operator's footprint (its state and largest
    batch; the root's also the kept result) exceeds ``budget_bytes`` (None: no limit),
    naming the operator with the largest footprint."""
    if budget_bytes is None:
        return
    op = estimate.largest()
    need = estimate.footprint(op)
    if need <= budget_bytes:
        return
    raise PlanTooLargeError(op.description, op.op_id, need, estimate.peak_bytes,
                            budget_bytes, _what(op), _hint(op.node))


def _what(op: OperatorEstimate) -> str:
    if op.pairs and op.work_bytes >= op.state_bytes:
        return f"materialize ~{_count(op.pairs)} joined row pairs"
    if op.state_bytes >= op.work_bytes:
        return f"keep state for ~{_count(op.rows)} output rows"
    return f"produce ~{_count(op.rows)} rows"


def _hint(node: PlanNode) -> str:
    raise_it = f"raise the budget ({ENV_BUDGET} or memory_budget_bytes)"
    if isinstance(node, (Join, SemiJoin, OuterJoin)) and not node.equi_keys()[0]:
        return ("a join without an equi-join condition pairs every row of one side with "
                "every row of the other: add a condition equating a column of each side "
                "(a key equated inside every OR branch can be factored out of the OR), "
                f"or {raise_it}")
    return f"filter the inputs further, or {raise_it}"


def check_cross_product(node: PlanNode, left_rows: int, right_rows: int,
                        left_bytes: int, right_bytes: int,
                        budget_bytes: int | None | str = AUTO) -> None:
    """Raise ``PlanTooLargeError`` before materializing every pair of a cross product
    whose pairs (two indices each, then both sides' rows taken) exceed the budget
    (``AUTO``: ``memory_budget()``). ``*_bytes``: each side's total bytes."""
    pairs = left_rows * right_rows
    need = pairs * PAIR_BYTES + right_rows * left_bytes + left_rows * right_bytes
    if need <= 64 << 20:  # never worth a look at the machine
        return
    budget = memory_budget(budget_bytes)
    if budget is None or need <= budget:
        return
    raise PlanTooLargeError(node._describe(), "", float(need), float(need), budget,
                            f"materialize {_count(pairs)} joined row pairs", _hint(node))


# -- formatting -------------------------------------------------------------------------
def _count(n: float) -> str:
    return f"{n:,.0f}" if n < 1e15 else f"{n:.2e}"
