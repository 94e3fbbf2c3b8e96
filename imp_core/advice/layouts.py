"""Which order each table should be laid out in for the registered workload.

Queries disagree: a top-k over orders wants lineitem in ``l_orderkey`` order, a
part-driven query in ``l_partkey`` order. ``advise_layout`` weighs, for one table, every
order its sketches suggest (range order of each sketched column, Z-order of the two
most used, and the current order) by the rows all sketch-filtered queries on the table
would read in it: the table's sketched columns are read at its version, put in each
candidate order and cut into row groups and pages as a rewrite would write them
(``imp_core.storage.layout``, ``imp_core.storage.row_groups.cut_blocks``), and each
query's sketch, fitted to those pages as Spark's filter is, counts the rows it meets.
The order reading least is recommended; ties keep the current order.

Invariants: nothing here writes; every figure is for the table's version given; a
query counts once per table it sketches (its weight is 1: the registered workload, not
its run frequency, which the service does not know).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np
import pyarrow as pa

from imp_core.sketch.sketch import Sketch
from imp_core.spark.compile import MAX_PREDICATE_RANGES
from imp_core.storage.layout import order_kind, ordered, row_group_rows
from imp_core.storage.row_groups import DEFAULT_PAGE_ROWS, cut_blocks, fit_to_blocks


@dataclass(frozen=True)
class LayoutOption:
    """One order of a table and the share of its rows each query's filter reads in it."""

    columns: tuple[str, ...]
    order: str
    rows_read: int
    shares: Mapping[str, float] = field(default_factory=dict)  # query -> read share

    def to_json(self) -> dict[str, Any]:
        return {"columns": list(self.columns), "order": self.order,
                "rows_read": self.rows_read,
                "shares": {q: round(s, 6) for q, s in self.shares.items()}}


@dataclass(frozen=True)
class LayoutAdvice:
    """The orders weighed for ``table`` (rows of all its queries' filters in each), the
    current one and the recommendation, with one line on why."""

    table: str
    rows: int
    current: tuple[str, ...]
    recommended: tuple[str, ...]
    options: tuple[LayoutOption, ...]
    why: str
    queries: tuple[str, ...] = ()

    def option(self, columns: Sequence[str]) -> LayoutOption | None:
        return next((o for o in self.options if o.columns == tuple(columns)), None)

    def to_json(self) -> dict[str, Any]:
        return {"table": self.table, "rows": self.rows, "current": list(self.current),
                "recommended": list(self.recommended), "why": self.why,
                "queries": list(self.queries), "options": [o.to_json() for o in self.options]}


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


def advise_layout(table: str, sketches: Mapping[str, Sketch], data: pa.Table,
                  current: Sequence[str], page_rows: int = DEFAULT_PAGE_ROWS,
                  max_group_rows: int = 65_536) -> LayoutAdvice:
    """The layout advice for ``table`` given the registered queries' ``sketches`` (by
    query name; those without a partition on the table are left out) and ``data``: the
    table's columns that the sketches and the candidate orders use, at its version."""
    sketched = {q: s for q, s in sketches.items() if s.partitions.for_table(table)}
    used = [s.partitions.for_table(table)[0].column for s in sketched.values()]
    rows = data.num_rows
    current = tuple(current)
    if not sketched or not rows:
        return LayoutAdvice(table, rows, current, current, (), "no registered query is "
                            f"sketched on {table}" if not sketched else f"{table} is empty",
                            tuple(sorted(sketched)))
    per_group = row_group_rows(rows, max_group_rows)
    groups = [(min(per_group, rows - s), 0) for s in range(0, rows, per_group)]
    with_pos = data.append_column("__pos", pa.array(np.arange(rows, dtype=np.int64)))
    options = []
    for columns in candidate_orders(used, current):
        if any(c not in data.column_names for c in columns):
            continue
        order = ordered(with_pos, columns).column("__pos")
        total, shares = 0, {}
        for q, sketch in sorted(sketched.items()):
            part = sketch.partitions.for_table(table)[0]
            values = data.column(part.column).take(order)
            found = cut_blocks(values, part.dtype, groups, page_rows)
            if found is None:
                continue
            kept = fit_to_blocks(sketch, table, found, MAX_PREDICATE_RANGES
                                 ).table_fragments(table)
            read = found.read(part, kept)[0]
            shares[q] = read / rows
            total += read
        options.append(LayoutOption(columns, order_kind(columns), total, shares))
    if not options:
        return LayoutAdvice(table, rows, current, current, (), "no candidate order",
                            tuple(sorted(sketched)))
    now = next((o for o in options if o.columns == current), None)
    best = min(options, key=lambda o: (o.rows_read, o.columns != current, len(o.columns)))
    n = len(sketched)
    why = (f"{', '.join(best.columns)} ({best.order}): the {n} sketched quer"
           f"{'y' if n == 1 else 'ies'} on {table} would read "
           f"{100 * best.rows_read / (n * rows):.1f}% of its rows on average")
    if now is not None and now is not best:
        why += (f", against {100 * now.rows_read / (n * rows):.1f}% in the current order "
                f"({', '.join(current)})")
    elif now is best:
        why += " (the current order)"
    return LayoutAdvice(table, rows, current, best.columns, tuple(options), why,
                        tuple(sorted(sketched)))
