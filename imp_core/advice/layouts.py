"""Which order each table should be laid out in for the registered workload.

Queries disagree: a top-k over orders wants lineitem in ``l_orderkey`` order, a
part-driven query in ``l_partkey`` order. ``advise_layout`` weighs, for one table, every
order its sketches suggest (range order of each sketched column, Z-order of the two
most used, the current order, and any order asked for) by the rows all sketch-filtered
queries on the table would read in it: the table's sketched columns are read at its
version, put in each candidate order and cut into row groups and pages as a rewrite
would write them (``imp_core.storage.layout``, ``imp_core.storage.row_groups.cut_blocks``),
and each query's sketch, fitted to those pages as Spark's filter is, counts the rows it
meets.

Each order is charged what the queries would *really* read: a query whose fitted filter
would read more than ``max_read_share`` of the table (IMP_SKETCH_MAX_READ_SHARE) runs
plain there (``imp_core.spark.access``) and reads every row, so an order that pushes a
query past that cut-off pays the whole table for it, not the share its filter would
have read. The order with the fewest charged rows is recommended (ties: fewer filter
rows, then the current order); when no order is charged less than the table as it is
stored now, the current order is kept (none, when the table has none). Every order names
the queries that would read more of the table than they read now (``LayoutWarning``),
above all those that would cross the cut-off and lose their sketch on the table.

Invariants: nothing here writes; every figure is for the table's version given; a
query counts once per table it sketches (its weight is 1: the registered workload, not
its run frequency, which the service does not know); a query over the cut-off counts
the table's rows whole, in every order and now alike.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np
import pyarrow as pa

from imp_core.sketch.sketch import Sketch
from imp_core.spark.access import DEFAULT_MAX_READ_SHARE
from imp_core.spark.compile import MAX_PREDICATE_RANGES
from imp_core.storage.layout import order_kind, ordered, row_group_rows
from imp_core.storage.row_groups import DEFAULT_PAGE_ROWS, cut_blocks, fit_to_blocks

# a share at most this much above the one now is the estimate's noise (the pages as
# stored against as a rewrite would cut them), not a query reading more
READ_NOISE = 0.005


@dataclass(frozen=True)
class LayoutWarning:
    """A registered query that would read more of the table in an order than it reads
    now: ``share_now`` as the table is stored, ``share_after`` in the order.
    ``loses_sketch``: the share crosses the cut-off (``share_now <= max_read_share <
    share_after``), so the query would run plain on the table."""

    query: str
    share_now: float
    share_after: float
    loses_sketch: bool = False

    def line(self, table: str, max_read_share: float) -> str:
        """One line for people.

        >>> LayoutWarning("h03", 0.26, 0.30).line("orders", 0.5)
        'h03 reads 30.0% of orders in this order, up from 26.0%'
        >>> LayoutWarning("h03", 0.26, 0.74, True).line("orders", 0.5).split(": ")[1]
        'past the 50% cut-off it loses its sketch on orders (runs plain there)'
        """
        text = (f"{self.query} reads {100 * self.share_after:.1f}% of {table} in this "
                f"order, up from {100 * self.share_now:.1f}%")
        if self.loses_sketch:
            text += (f": past the {100 * max_read_share:.0f}% cut-off it loses its sketch "
                     f"on {table} (runs plain there)")
        return text

    def to_json(self) -> dict[str, Any]:
        return {"query": self.query, "share_now": round(self.share_now, 6),
                "share_after": round(self.share_after, 6), "loses_sketch": self.loses_sketch}


@dataclass(frozen=True)
class LayoutOption:
    """One order of a table: the share of its rows each query's filter reads in it
    (``shares``), their sum in rows (``rows_read``), what the queries would really read
    (``rows_charged``: a query past the cut-off reads all rows) and the queries that
    would read more than now (``warnings``)."""

    columns: tuple[str, ...]
    order: str
    rows_read: int
    shares: Mapping[str, float] = field(default_factory=dict)  # query -> read share
    rows_charged: int = 0
    warnings: tuple[LayoutWarning, ...] = ()

    @property
    def loses_sketch(self) -> tuple[str, ...]:
        """The queries that would lose their sketch on the table in this order."""
        return tuple(w.query for w in self.warnings if w.loses_sketch)

    def to_json(self) -> dict[str, Any]:
        return {"columns": list(self.columns), "order": self.order,
                "rows_read": self.rows_read, "rows_charged": self.rows_charged,
                "shares": {q: round(s, 6) for q, s in self.shares.items()},
                "warnings": [w.to_json() for w in self.warnings]}


@dataclass(frozen=True)
class LayoutAdvice:
    """The orders weighed for ``table``, the current one and the recommendation, with
    one line on why. ``shares_now``/``rows_charged_now``: what the queries read of the
    table as it is stored now; ``chosen``: the order asked for (else the recommended
    one) and ``warnings`` that order's."""

    table: str
    rows: int
    current: tuple[str, ...]
    recommended: tuple[str, ...]
    options: tuple[LayoutOption, ...]
    why: str
    queries: tuple[str, ...] = ()
    max_read_share: float = DEFAULT_MAX_READ_SHARE
    shares_now: Mapping[str, float] = field(default_factory=dict)
    rows_charged_now: int = 0
    chosen: tuple[str, ...] = ()
    warnings: tuple[LayoutWarning, ...] = ()

    def option(self, columns: Sequence[str]) -> LayoutOption | None:
        return next((o for o in self.options if o.columns == tuple(columns)), None)

    def warning_lines(self) -> list[str]:
        """The chosen order's warnings, one line each."""
        return [w.line(self.table, self.max_read_share) for w in self.warnings]

    def to_json(self) -> dict[str, Any]:
        return {"table": self.table, "rows": self.rows, "current": list(self.current),
                "recommended": list(self.recommended), "why": self.why,
                "queries": list(self.queries), "options": [o.to_json() for o in self.options],
                "max_read_share": self.max_read_share,
                "shares_now": {q: round(s, 6) for q, s in self.shares_now.items()},
                "rows_charged_now": self.rows_charged_now, "chosen": list(self.chosen),
                "warnings": [w.to_json() for w in self.warnings]}


def candidate_orders(columns_used: Sequence[str], current: Sequence[str]
                     ) -> list[tuple[str, ...]]:
    """Range order of each column the sketches use, Z-order of the two most used, and
    the current order; each once."""
    counts = Counter(columns_used)
    out: list[tuple[str, ...]] = [(c,) for c, _ in counts.most_common()]
    if len(counts) >= 2:
        out.append(tuple(c for c, _ in counts.most_common(2)))
    if current:
        out.append(tuple(current))
    return list(dict.fromkeys(out))


def charged(shares: Mapping[str, float], rows: int, max_read_share: float) -> int:
    """The rows queries reading ``shares`` of a ``rows``-row table really read: a share
    over ``max_read_share`` runs plain and reads every row.

    >>> charged({"a": 0.1, "b": 0.74}, 1000, 0.5)
    1100
    """
    return int(round(sum(rows if s > max_read_share else s * rows for s in shares.values())))


def warnings_of(shares: Mapping[str, float], now: Mapping[str, float],
                max_read_share: float) -> tuple[LayoutWarning, ...]:
    """The queries of ``shares`` that would read more than ``now`` (beyond
    ``READ_NOISE``, or across the cut-off at all), those losing their sketch first."""
    out = []
    for q, after in shares.items():
        before = now.get(q)
        if before is None:
            continue
        loses = before <= max_read_share < after
        if loses or after > before + READ_NOISE:
            out.append(LayoutWarning(q, before, after, loses))
    return tuple(sorted(out, key=lambda w: (not w.loses_sketch, w.query)))


def advise_layout(table: str, sketches: Mapping[str, Sketch], data: pa.Table,
                  current: Sequence[str], page_rows: int = DEFAULT_PAGE_ROWS,
                  max_group_rows: int = 65_536,
                  max_read_share: float = DEFAULT_MAX_READ_SHARE,
                  shares_now: Mapping[str, float] | None = None,
                  asked: Sequence[str] = ()) -> LayoutAdvice:
    """The layout advice for ``table`` given the registered queries' ``sketches`` (by
    query name; those without a partition on the table are left out) and ``data``: the
    table's columns that the sketches and the candidate orders use, at its version, in
    the order the table stores them.

    ``shares_now``: per query, the share of the table its filter reads as the table is
    stored now, measured on its pages (``imp_core.storage.row_groups.fit_to_layout``);
    a query without one is measured on ``data`` in its order, cut as a rewrite would.
    ``asked``: an order to weigh as well, whose warnings the advice carries
    (``chosen``); without it, the recommended order's."""
    sketched = {q: s for q, s in sketches.items() if s.partitions.for_table(table)}
    used = [s.partitions.for_table(table)[0].column for s in sketched.values()]
    rows = data.num_rows
    current, asked = tuple(current), tuple(asked)
    names = tuple(sorted(sketched))
    if not sketched or not rows:
        why = f"no registered query is sketched on {table}" if not sketched \
            else f"{table} is empty"
        return LayoutAdvice(table, rows, current, current, (), why, names, max_read_share,
                            chosen=asked or current)
    per_group = row_group_rows(rows, max_group_rows)
    groups = [(min(per_group, rows - s), 0) for s in range(0, rows, per_group)]

    def shares_in(order: pa.Array | None) -> dict[str, float]:
        """Per query, the share its fitted filter reads with the rows in ``order``
        (None: as ``data`` holds them)."""
        out = {}
        for q, sketch in sorted(sketched.items()):
            part = sketch.partitions.for_table(table)[0]
            values = data.column(part.column)
            found = cut_blocks(values if order is None else values.take(order), part.dtype,
                               groups, page_rows)
            if found is None:
                continue
            kept = fit_to_blocks(sketch, table, found, MAX_PREDICATE_RANGES
                                 ).table_fragments(table)
            out[q] = found.read(part, kept)[0] / rows
        return out

    now = {q: s for q, s in (shares_now or {}).items() if q in sketched}
    if set(now) != set(sketched):  # measured as it stands for the queries not measured
        now = {**shares_in(None), **now}
    with_pos = data.append_column("__pos", pa.array(np.arange(rows, dtype=np.int64)))
    options = []
    for columns in dict.fromkeys(candidate_orders(used, current) + ([asked] if asked else [])):
        if any(c not in data.column_names for c in columns):
            continue
        shares = shares_in(ordered(with_pos, columns).column("__pos"))
        options.append(LayoutOption(
            columns, order_kind(columns), int(round(sum(s * rows for s in shares.values()))),
            shares, charged(shares, rows, max_read_share),
            warnings_of(shares, now, max_read_share)))
    charged_now = charged(now, rows, max_read_share)
    if not options:
        return LayoutAdvice(table, rows, current, current, (), "no candidate order", names,
                            max_read_share, now, charged_now, asked or current)
    best = min(options, key=lambda o: (o.rows_charged, o.rows_read, o.columns != current,
                                       len(o.columns)))
    recommended = best.columns
    if best.columns != current and best.rows_charged >= charged_now:
        recommended = current  # nothing is charged less than the table as it stands
    chosen = asked or recommended
    picked = next((o for o in options if o.columns == chosen), None)
    return LayoutAdvice(table, rows, current, recommended, tuple(options),
                        _why(table, best, recommended, current, now, charged_now, rows,
                             max_read_share),
                        names, max_read_share, now, charged_now, chosen,
                        picked.warnings if picked is not None else ())


def _why(table: str, best: LayoutOption, recommended: tuple[str, ...],
         current: tuple[str, ...], now: Mapping[str, float], charged_now: int, rows: int,
         max_read_share: float) -> str:
    """One line: the recommendation (or why none), what the queries would read in it
    against now, and who would lose their sketch."""
    n = len(now) or 1

    def avg(total: int) -> str:
        return f"{100 * total / (n * rows):.1f}%"

    order = f"{', '.join(best.columns)} ({best.order})"
    plain = (f"counting a query past the {100 * max_read_share:.0f}% cut-off, which runs "
             "plain, as reading all rows")
    if recommended != best.columns:
        keep = f"the current order ({', '.join(current)})" if current else "the table as is"
        return (f"no order would be read less than {table} as stored now: the "
                f"{n} sketched quer{'y' if n == 1 else 'ies'} read {avg(charged_now)} of its "
                f"rows on average ({plain}); the best weighed, {order}, {avg(best.rows_charged)}"
                f"; keep {keep}" + _losing(best, table))
    why = (f"{order}: the {n} sketched quer{'y' if n == 1 else 'ies'} on {table} would "
           f"read {avg(best.rows_charged)} of its rows on average ({plain}), against "
           f"{avg(charged_now)} now")
    if best.columns == current:
        why += " (the current order)"
    elif current:
        why += f" in the current order ({', '.join(current)})"
    return why + _losing(best, table)


def _losing(option: LayoutOption, table: str) -> str:
    lost = option.loses_sketch
    if not lost:
        return ""
    return (f"; {', '.join(lost)} would lose {'its' if len(lost) == 1 else 'their'} "
            f"sketch on {table}")
