"""Rule 10 of the package docstring: set operations (UNION, INTERSECT, EXCEPT [ALL]).

A set operation compares whole rows, column by column in position; the right input's
facts are read under the output's (the left input's) column names. Provenance follows
the engine (``imp_core.engine.operators.set_ops``): a UNION ALL row keeps its own
fragments, every other result row carries the fragments of all input rows equal to it,
of both inputs, or of the left input only for EXCEPT.

- UNION ALL and UNION are monotone in both inputs, like a projection of each followed
  (for UNION) by DISTINCT: a phantom passes through as itself, so tainted columns stay
  tainted and nothing is tested. Every row of either input reaches the output (as itself
  or merged into an equal row that carries its fragments), so losslessness passes down.
  A row may come from either input, so each input's scans may contribute no tuple to a
  row (``optional``), and a column keeps holding the attribute (``attr``) only where
  every row of the other input carries a tuple of R whose attribute that column holds
  too: otherwise a group on it (rule 4) could hold rows of R and rows without R, and
  the sketch instance could keep only the latter, a partial group. The columns every
  row of both inputs holds the attribute in get an entry of their own, under the
  union's path and never optional: each row's tuple of R comes from its own input, and
  a union above (TPC-DS q33, q56: three branches) still sees them held on every row.
- INTERSECT [ALL] is monotone in both inputs, like a semi-join on all columns whose
  partners' fragments join the row's: no column of either input may be tainted (a
  phantom with a partial aggregate value could meet rows its shadow does not meet), and
  the attribute of a scan on either side is the same output columns on every row.
- EXCEPT [ALL] is antitone in its right input, like an anti-join on all columns. Besides
  untainted columns, the right input may read R only if (a) its rows carry no provenance
  of R, or (b) co-location: for each scan of R on the right, the output column that
  holds its attribute also holds the attribute of a scan of R on the left that gives
  every row a tuple. A left row present in D_P then has that fragment in S, every right
  row equal to it has its R tuples in that same fragment and is present in D_P too, so
  the counts l and r of every kept row are those over D. EXCEPT ALL is decided by the
  same counts, so the same rule holds.
"""

from __future__ import annotations

from imp_core.plan.nodes import SetOp
from imp_core.safety.facts import Context, Facts, Path
from imp_core.safety.intervals import Interval
from imp_core.safety.verdict import Unsafe


def set_operation(node: SetOp, path: Path, left: Facts, right: Facts,
                  ctx: Context) -> Facts:
    """The facts of ``node``'s result from its inputs' (rule 10)."""
    names = node.left.column_names
    rename = dict(zip(node.right.column_names, names))
    rattr = {p: frozenset(rename[c] for c in cols if c in rename)
             for p, cols in right.attr.items()}
    rtainted = {rename[c]: t for c, t in right.tainted.items() if c in rename}
    rkeys = tuple(frozenset(rename[c] for c in key) for key in right.keys
                  if all(c in rename for c in key))
    rnot_null = frozenset(rename[c] for c in right.not_null if c in rename)
    everything = (frozenset(names),) if node.distinct else ()
    what = f"the {node.sql_name}"
    if node.kind == "union":
        ivals = {c: _hull(left.ivals.get(c), right.ivals.get(r))
                 for c, r in zip(names, node.right.column_names)}
        # a column holds the attribute on every row only where both inputs' rows each
        # carry a tuple of R whose attribute it holds (else a row of the other input
        # shares a group key with rows of R and no tuple of R: rule 4 would not hold)
        lcols, rcols = _always(left.attr, left.optional), _always(rattr, right.optional)
        attr = {**{p: cols & rcols for p, cols in left.attr.items()},
                **{p: cols & lcols for p, cols in rattr.items()}}
        optional = left.optional | right.optional | frozenset(left.attr) | frozenset(rattr)
        if lcols & rcols:
            # every row, from either input, carries a tuple of R whose attribute these
            # columns hold: an entry for the union itself that no row lacks, so a union
            # over this one still finds them held on every row
            attr[path] = lcols & rcols
        return Facts(left.has_table or right.has_table, {**rtainted, **left.tainted},
                     attr, everything, dict(left.labels),
                     {c: iv for c, iv in ivals.items() if iv is not None}, dict(left.exprs),
                     optional, left.not_null & rnot_null)
    for tainted in (left.tainted, rtainted):
        if tainted:
            col = sorted(tainted)[0]
            taint = tainted[col]
            ctx.inspected.add(taint.origin)
            raise Unsafe(f"{what} compares whole rows, and {taint.label} may be computed "
                         f"over {ctx.partial()} in the sketch instance, so a partial group "
                         f"could match rows of the other input that the complete one does "
                         f"not, or the reverse")
    if node.kind == "intersect":
        return Facts(left.has_table or right.has_table, {}, {**left.attr, **rattr},
                     left.keys + rkeys + everything, dict(left.labels), dict(left.ivals),
                     dict(left.exprs), left.optional | right.optional,
                     left.not_null | rnot_null)
    if rattr:
        anchors = frozenset().union(*(c for q, c in left.attr.items()
                                      if q not in left.optional))
        loose = [p for p, cols in rattr.items() if not cols & anchors]
        if loose:
            raise Unsafe(f"{ctx.table} is read on the right of {what} with no output "
                         f"column holding both its {ctx.column} and the {ctx.attribute} of "
                         f"the left row: a sketch that drops the right rows equal to a left "
                         f"row would keep that row in the result, a row that is not in it")
        ties = ", ".join(sorted({left.show(c) for p, cols in rattr.items()
                                 for c in cols & anchors}))
        ctx.notes.append(f"{what} reads {ctx.table} on its right, but equal rows share "
                         f"{ties}, the {ctx.attribute} of the left row, so a row in the "
                         f"sketch instance keeps every right row equal to it and {what} "
                         f"decides as over the full data")
    return Facts(left.has_table, {}, dict(left.attr), left.keys + everything,
                 dict(left.labels), dict(left.ivals), dict(left.exprs), left.optional,
                 left.not_null)


def _always(attr: dict[Path, frozenset[str]], optional: frozenset[Path]) -> frozenset[str]:
    """The columns that hold the attribute of a tuple of R on every row: those of the
    scans that give every row a tuple."""
    return frozenset().union(*(cols for p, cols in attr.items() if p not in optional))


def _hull(a: Interval | None, b: Interval | None) -> Interval | None:
    if a is None or b is None:
        return None
    return Interval(min(a.lo, b.lo), max(a.hi, b.hi))


__all__ = ["set_operation"]
