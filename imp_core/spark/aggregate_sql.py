"""Spark SQL for an aggregation's exact initial state, and its result read back.

``aggregate_sql`` gives one query over an annotated input computing per group CNT, the
non-NULL counts, exact sums, the per-fragment counts F_g and the min/max multisets (the
``buffer`` best distinct values with the number of distinct values, so a cut multiset is
known to be incomplete); ``group_totals`` reads its result as the ``GroupTotals`` that
``AggregateOp.state_from_groups`` turns into the operator's state. Invariant: the totals
equal what the engine accumulates from the same rows as one insert batch (up to group ids).

Exact sums: integers and decimals of at most 18 digits are summed per group and fragment
as unscaled BIGINTs, and those partial sums per group as DECIMAL(38, 0); other decimals,
and every sum of a query whose BIGINT sums overflowed, as DECIMAL(38, s) (ANSI mode: an
overflow is an error, never a wrong sum; ``is_overflow`` tells the caller to retry wide).
A double x is split in Spark into x = (hi·2^44 + lo)·2^(32·b) with integers hi and lo
obtained by power-of-two scalings of x (exact, no rounding); hi and lo are summed per
group and b, and the driver assembles the engine's integer x·2^1100 from them.

Exact sums of squares (VAR_*, STDDEV_*: ``moments == 2``): a value's integer N (the
unscaled integer or decimal, or a double's N above) is split as N = hi·2^h + lo, and
hi², hi·lo and lo² (each well inside DECIMAL(38, 0)) are summed per group (and bucket);
the driver assembles Σ N² = Σhi²·2^2h + 2·Σhi·lo·2^h + Σlo², the engine's Σx² in units
of unit(type)². Decimals wider than 18 digits (unscaled values beyond BIGINT) are
refused: their state is built by the engine.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from imp_core.engine.operators.aggregate import AggregateOp, GroupTotals, MinMaxValues
from imp_core.errors import UnsupportedSqlError
from imp_core.plan.aggregates.exact import FLOAT_SHIFT, exact_values, kind_of
from imp_core.spark.compile import AnnotatedRelation, quote

_HI_SHIFT = 44  # a double's scaled integer N = hi * 2**44 + lo, 0 <= lo < 2**44
_BUCKET = 32  # exponent width of one bucket b: |N| < 2**(55 + 32)
_INT_SHIFT = 32  # an integer's unscaled BIGINT u = hi * 2**32 + lo, 0 <= lo < 2**32


def _square_parts(hi: str, lo: str) -> list[str]:
    """SQL expressions of hi², hi·lo and lo², each computed as DECIMAL(38, 0)."""
    h, low = f"CAST({hi} AS DECIMAL(38,0))", f"CAST({lo} AS DECIMAL(38,0))"
    return [f"{h} * {h}", f"{h} * {low}", f"{low} * {low}"]


def _assemble_squares(hh: int, hl: int, ll: int, shift: int) -> int:
    """Σ N² from Σhi², Σhi·lo and Σlo² of N = hi·2^shift + lo."""
    return (hh << (2 * shift)) + (hl << (shift + 1)) + ll


def more_ctes(rel: AnnotatedRelation) -> str:
    """``rel``'s WITH clause opened for more CTEs."""
    return rel.with_clause.rstrip("\n") + ",\n"


def arrow_array(col: pa.ChunkedArray | pa.Array, dtype: pa.DataType | None = None) -> pa.Array:
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if isinstance(arr, pa.ChunkedArray):  # no chunks at all
        arr = pa.array([], type=dtype or col.type)
    return arr


@dataclass(frozen=True)
class AggPlan:
    keys: int  # group-by columns (__k0..)
    anns: int  # annotation columns (__a0..), each one INT fragment id
    floats: tuple[int, ...]  # aggregates summed as doubles
    exact: tuple[int, ...]  # aggregates summed as DECIMAL (integers, decimals)
    minmax: tuple[int, ...]
    # aggregates over the same argument share its non-NULL count (and sum): aggregate i
    # reads the columns of aggregate source[i]
    source: tuple[int, ...] = ()
    squares: tuple[int, ...] = ()  # sources whose Σx² is computed too


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


def _fits_bigint(t: pa.DataType) -> bool:
    """Whether every value of ``t`` has an unscaled value within BIGINT."""
    return pa.types.is_signed_integer(t) or pa.types.is_boolean(t) or \
        t in (pa.uint8(), pa.uint16(), pa.uint32()) or \
        (pa.types.is_decimal(t) and t.precision <= 18)


def _unscaled(arg: str, scale: int) -> str:
    """SQL of the unscaled BIGINT of ``arg`` (a decimal of ``scale`` digits, or an
    integer): exact, as the scaled value is an integer that fits."""
    return f"CAST({arg} * {10 ** scale} AS BIGINT)" if scale else f"CAST({arg} AS BIGINT)"


def is_overflow(exc: BaseException) -> bool:
    """Whether Spark refused a query for an arithmetic overflow (ANSI mode)."""
    text = str(exc)
    return "ARITHMETIC_OVERFLOW" in text or "long overflow" in text.lower()


def aggregate_sql(op: AggregateOp, rel: AnnotatedRelation,
                  buffer: int | None, wide_sums: bool = False) -> tuple[str, AggPlan]:
    """``op``'s state query over ``rel`` and how to read it. Exact sums of integers and
    decimals of at most 18 digits are added per fine group (group, fragments) as unscaled
    BIGINTs unless ``wide_sums`` (a query that overflowed is run again wide: every sum
    as DECIMAL(38, s))."""
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
    squares: list[int] = []
    source = list(range(len(agg.aggregates)))
    squared = {a.arg for a, fn in zip(agg.aggregates, op.funcs)
               if fn.takes_argument and fn.moments >= 2}
    for i, (a, fn, t) in enumerate(zip(agg.aggregates, op.funcs, op.arg_types)):
        if not fn.takes_argument:
            continue
        if fn.moments > 2 or (fn.moments == 2 and kind_of(t) == "decimal"
                              and t.precision > 18):
            raise UnsupportedSqlError(
                f"{fn.name} over {t} in a Spark bootstrap", detail="only Σx and Σx² of "
                "integers, doubles and decimals of at most 18 digits are computed on "
                "Spark; bootstrap this query locally")
        x = quote(a.arg)
        first = counted.setdefault(a.arg, i)
        source[i] = first
        if first == i:
            inner.append(f"{x} AS __x{i}")
            fine.append(f"COUNT(__x{i}) AS __n{i}")
            outer.append(f"SUM(__n{i}) AS __n{i}")
        if fn.extremes:
            minmax.append(i)
        elif fn.moments:
            if first in summed:
                continue  # sum(x) and avg(x): one exact sum
            summed.add(first)
            j = first  # the shared columns are named after the first aggregate
            kind = kind_of(t)
            square = a.arg in squared
            if square:
                squares.append(j)
            if kind == "float":
                floats.append(j)
                inner += _float_columns(f"CAST({x} AS DOUBLE)", j)
                group_fine.append(f"__b{j}")
                fine += [f"SUM(CAST(__hi{j} AS DECIMAL(38,0))) AS __h{j}",
                         f"SUM(CAST(__lo{j} AS DECIMAL(38,0))) AS __l{j}",
                         f"SUM(__bad{j}) AS __bad{j}"]
                outer.append(f"SUM(__bad{j}) AS __bad{j}")
                fields += [f"'b{j}', __b{j}", f"'h{j}', __h{j}", f"'l{j}', __l{j}"]
                if square:
                    for part, expr in zip(("hh", "hl", "ll"),
                                          _square_parts(f"__hi{j}", f"__lo{j}")):
                        fine.append(f"SUM({expr}) AS __{part}{j}")
                        fields.append(f"'{part}{j}', __{part}{j}")
            else:
                exact.append(j)
                scale = t.scale if kind == "decimal" else 0
                arg = f"CAST(__x{j} AS INT)" if pa.types.is_boolean(t) else f"__x{j}"
                if wide_sums or not _fits_bigint(t):
                    fine.append(f"SUM(CAST({arg} AS DECIMAL(38,{scale}))) AS __s{j}")
                    outer.append(f"SUM(__s{j}) AS __s{j}")
                else:
                    # unscaled BIGINT sums per fine group: Spark adds longs, not
                    # DECIMAL(38) buffers (at SF 10, TPC-H Q1's state took 37 s, not 47);
                    # a sum past BIGINT raises (ANSI), and the caller retries wide
                    fine.append(f"SUM({_unscaled(arg, scale)}) AS __s{j}")
                    outer.append(f"SUM(CAST(__s{j} AS DECIMAL(38,0))) AS __s{j}")
                if square:
                    # the unscaled value as BIGINT, split into hi (arithmetic shift: the
                    # floor) and lo (the low bits, >= 0), so u = hi·2^32 + lo exactly
                    u = f"CAST({arg} * {10 ** scale} AS BIGINT)" if scale else \
                        f"CAST({arg} AS BIGINT)"
                    hi, lo = f"shiftright({u}, {_INT_SHIFT})", f"({u} & {2**_INT_SHIFT - 1})"
                    for part, expr in zip(("hh", "hl", "ll"), _square_parts(hi, lo)):
                        fine.append(f"SUM({expr}) AS __{part}{j}")
                        outer.append(f"SUM(__{part}{j}) AS __{part}{j}")
    scaled = [c for i in floats for c in _scaled_columns(i)]
    parts = len(an) > 0 or bool(floats)
    if parts:
        outer.append(f"collect_list(named_struct({', '.join(fields)})) AS __parts")
    sql = more_ctes(rel)
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
        desc = "DESC" if op.funcs[i].largest_first else "ASC"
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
    return sql, AggPlan(len(kn), len(an), tuple(floats), tuple(exact), tuple(minmax),
                         tuple(source), tuple(squares))


def _ints(col: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Exact integers of a DECIMAL(38, s) column as unscaled values (NULL -> 0)."""
    arr = arrow_array(col)
    return exact_values(arr) if len(arr) else np.zeros(0, dtype=np.int64)


def group_totals(op: AggregateOp, res: pa.Table, plan: AggPlan, buffer: int | None,
                 nfrag: int) -> GroupTotals:
    """The result ``res`` of ``aggregate_sql`` (one row per group) as the operator's exact
    totals; group g is row g."""
    n = res.num_rows
    gid = np.arange(n, dtype=np.int64)
    keys = [arrow_array(res.column(f"__k{j}")) for j in range(plan.keys)]
    cnt = arrow_array(res.column("__cnt")).to_numpy(zero_copy_only=False).astype(np.int64)
    parts = arrow_array(res.column("__parts")) if "__parts" in res.column_names else None
    owner = np.repeat(gid, np.diff(parts.offsets.to_numpy())) if parts is not None else None
    entries = parts.values.slice(parts.offsets[0].as_py(),
                                 len(owner)) if parts is not None else None
    nonnull: dict[int, np.ndarray] = {}
    sums: dict[int, np.ndarray | list[int]] = {}
    higher: dict[int, list[list[int]]] = {}
    for i, fn in enumerate(op.funcs):
        if not fn.takes_argument:
            continue
        src = plan.source[i]
        nn = arrow_array(res.column(f"__n{src}")).fill_null(0).to_numpy(zero_copy_only=False)
        nonnull[i] = nn.astype(np.int64)
        if not fn.moments:
            continue
        if src in plan.exact:
            sums[i] = _ints(res.column(f"__s{src}"))
        elif src in plan.floats:
            if int(pc.sum(arrow_array(res.column(f"__bad{src}"))).as_py() or 0):
                raise ValueError("cannot sum NaN or infinite values exactly")
            sums[i] = _float_sums(entries, owner, n, src)
        if fn.moments >= 2:
            higher[i] = [_square_sums(res, entries, owner, n, src, src in plan.floats)]
    minmax: dict[int, MinMaxValues] = {}
    for i in plan.minmax:
        mm = arrow_array(res.column(f"__mm{i}"))
        nd = arrow_array(res.column(f"__nd{i}")).fill_null(0).to_numpy(zero_copy_only=False)
        lengths = np.diff(mm.offsets.to_numpy()) if len(mm) else np.zeros(0, np.int64)
        lengths = np.where(arrow_array(mm.is_null()).to_numpy(zero_copy_only=False), 0,
                           lengths) if len(mm) else lengths
        values = mm.values.slice(mm.offsets[0].as_py(), int(lengths.sum())) if len(mm) \
            else None
        minmax[i] = MinMaxValues(
            gids=np.repeat(gid, lengths),
            values=values.field("v") if values is not None else pa.array([]),
            counts=values.field("c") if values is not None else pa.array([], pa.int64()),
            complete=np.ones(n, dtype=bool) if buffer is None else nd <= buffer)
    return GroupTotals(keys, cnt, nonnull, sums, _fragments(entries, owner, plan.anns, nfrag),
                       minmax, higher)


def _fragments(entries: pa.StructArray | None, owner: np.ndarray | None, nanns: int,
               nfrag: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """F_g as (group, fragment, weighted tuple count) triples; pairs may repeat."""
    none = np.zeros(0, dtype=np.int64)
    if entries is None or owner is None or nanns == 0 or len(entries) == 0:
        return none, none, none
    c = entries.field("c").to_numpy(zero_copy_only=False).astype(np.int64)
    ids = [entries.field(f"a{i}").to_numpy(zero_copy_only=False).astype(np.int64)
           for i in range(nanns)]
    if nanns == 1:
        return owner, ids[0], c
    # a tuple counts once per fragment of its annotation (a self-join of a partitioned
    # table may carry the same fragment twice)
    P = max(nfrag, 1)
    row = np.tile(np.arange(len(c), dtype=np.int64), nanns)
    per_row = np.unique(row * P + np.concatenate(ids))
    row, frag = np.divmod(per_row, P)
    return owner[row], frag, c[row]


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


def _square_sums(res: pa.Table, entries: pa.StructArray | None, owner: np.ndarray | None,
                 n: int, i: int, floats: bool) -> list[int]:
    """Per group, the exact Σx² of source ``i`` in units of unit(type)²: from the group's
    row for integers and decimals, from its (group, bucket) entries for doubles."""
    if not floats:
        hh, hl, ll = (_ints(res.column(f"__{p}{i}")).tolist() for p in ("hh", "hl", "ll"))
        return [_assemble_squares(int(a), int(b), int(c), _INT_SHIFT)
                for a, b, c in zip(hh, hl, ll)]
    sums = [0] * n
    if entries is None or owner is None:
        return sums
    b = entries.field(f"b{i}").to_numpy(zero_copy_only=False).tolist()
    parts = [_ints(entries.field(f"{p}{i}")).tolist() for p in ("hh", "hl", "ll")]
    for g, bucket, hh, hl, ll in zip(owner.tolist(), b, *parts):
        scaled = _assemble_squares(int(hh), int(hl), int(ll), _HI_SHIFT)  # Σ N² of the entry
        shift = 2 * (_BUCKET * int(bucket) + FLOAT_SHIFT)
        sums[g] += scaled << shift if shift >= 0 else scaled >> -shift
    return sums
