"""Constant folding of a parsed query: literal arithmetic, date literals and intervals.

Part of the normalizing front end (``imp_core.sql.normalize``). Invariants after
``fold_constants(root, text)``:

- every ``DATE '...'`` (a ``Cast`` of a string literal to DATE) in Spark's lenient
  ``yyyy[-m[-d]]`` spelling is spelled ``yyyy-mm-dd``; a spelling of an impossible date
  (``'1995-13-01'``) raised ``SqlSyntaxError`` at the literal;
- every maximal subtree built only from numeric or date literals, intervals of days,
  weeks, months, quarters or years, ``+``, ``-``, ``*`` and ``date_add``/``date_sub``/
  ``add_months`` that holds at least one operation is replaced by its value: a numeric
  literal (exact decimal arithmetic, since sqlglot's simplifier computes with
  ``Decimal``) or a DATE literal (month and year steps clamp to the month's end, as in
  Spark and standard SQL);
- no ``Interval`` node is left: one that could not be folded (``l_shipdate + INTERVAL
  '3' MONTH``) raised ``UnsupportedSqlError`` at its INTERVAL keyword;
- nothing else changes: columns, divisions, functions, predicates and every node's
  position metadata are kept, so later errors still point at the text.

The arithmetic itself is sqlglot's ``simplify`` run on each constant subtree alone (not
on the whole query, which it would also reorder and rewrite).
"""

from __future__ import annotations

import datetime as dt
import re

from sqlglot import exp
from sqlglot.optimizer.simplify import simplify

from imp_core.errors import SqlSyntaxError
from imp_core.sql.text import SqlText

# Spark's DATE literal syntax without a time part: yyyy, yyyy-[m]m, yyyy-[m]m-[d]d
_DATE_TEXT = re.compile(r"^\s*(\d{4})(?:-(\d{1,2})(?:-(\d{1,2}))?)?\s*$")
# interval units whose date arithmetic stays a date (hours etc. would make a timestamp)
_DATE_UNITS = {"DAY": "DAY", "WEEK": "WEEK", "MONTH": "MONTH", "QUARTER": "QUARTER",
               "YEAR": "YEAR"}
_UNITS = {**_DATE_UNITS, **{f"{unit}S": unit for unit in _DATE_UNITS}}
_ARITHMETIC = (exp.Add, exp.Sub, exp.Mul)
# date_add / date_sub (sqlglot: TsOrDsAdd, DateAdd, DateSub) and add_months
_DATE_SHIFTS = (exp.TsOrDsAdd, exp.DateAdd, exp.DateSub, exp.AddMonths)


def fold_constants(root: exp.Expression, text: SqlText) -> None:
    """Fold ``root``'s constant subtrees in place (see the module docstring)."""
    for interval in list(root.find_all(exp.Interval)):
        _locate_interval(interval, text)
        _normalize_unit(interval)
    for cast in list(root.find_all(exp.Cast)):
        if _is_date_type(cast):
            _normalize_date_literal(cast.this, text)
    for shift in list(root.find_all(*_DATE_SHIFTS)):
        _shift_as_interval(shift)
    for subtree in _foldable_subtrees(root):
        folded = _fold(subtree)
        if folded is not None:
            folded.meta.update(_first_position(subtree))  # errors still point at the text
            subtree.replace(folded)
    leftover = next(root.find_all(exp.Interval), None)
    if leftover is not None:
        context = leftover.parent or leftover
        raise text.unsupported(
            "INTERVAL literal", leftover,
            detail="only constant DATE ± INTERVAL expressions (days to years) are "
                   f"supported; {context.sql(dialect='spark')[:80]} is not")


# -- date literals -------------------------------------------------------------------------


def _is_date_type(cast: exp.Cast) -> bool:
    # sqlglot reads Spark's CAST as a TryCast without "safe"; TRY_CAST has "safe" set
    safe = isinstance(cast, exp.TryCast) and cast.args.get("safe")
    return not safe and cast.to.is_type(exp.DataType.Type.DATE)


def _normalize_date_literal(literal: exp.Expression, text: SqlText) -> None:
    """``'1995-9-1'`` -> ``'1995-09-01'``; an impossible date is a syntax error."""
    if not (isinstance(literal, exp.Literal) and literal.is_string):
        return
    match = _DATE_TEXT.match(literal.this)
    if match is None:
        return  # not a date-only spelling: the binder judges it (and names its type)
    year, month, day = (int(part) if part else 1 for part in match.groups())
    try:
        value = dt.date(year, month, day)
    except ValueError as error:
        line, column = text.locate(literal)
        raise SqlSyntaxError(f"invalid DATE literal {literal.this!r}: {error}",
                             line, column) from None
    literal.set("this", value.isoformat())


def _date_literal(node: exp.Expression) -> bool:
    """A DATE literal (``DATE '...'``), or a date string where Spark takes one."""
    if isinstance(node, exp.Cast) and _is_date_type(node):
        return isinstance(node.this, exp.Literal) and node.this.is_string
    return (isinstance(node, exp.Literal) and node.is_string
            and _DATE_TEXT.match(node.this) is not None)


# -- intervals -----------------------------------------------------------------------------


def _normalize_unit(interval: exp.Interval) -> None:
    """``INTERVAL '90 days'`` parses with unit DAYS: sqlglot's arithmetic wants DAY."""
    unit = interval.args.get("unit")
    if isinstance(unit, exp.Var) and unit.name.upper() in _UNITS:
        unit.set("this", _UNITS[unit.name.upper()])


def _locate_interval(interval: exp.Interval, text: SqlText) -> None:
    """Record where the INTERVAL keyword of ``interval`` is (its ``start`` metadata).

    sqlglot keeps no position for an interval node, and one for its literal only when
    it is quoted (``INTERVAL '3' DAY``): the keyword is then the last INTERVAL token
    before that literal, else the first INTERVAL token after the last positioned node
    that precedes the interval in the tree.
    """
    intervals = [t.start for t in text.tokens if t.token_type.name == "INTERVAL"]
    inside = text.start_of(interval)
    if inside is not None:
        offsets = [o for o in intervals if o < inside][-1:]
    else:
        after = _end_before(interval)
        offsets = [o for o in intervals if after is None or o > after][:1]
    if offsets:
        interval.meta["start"] = offsets[0]


def _end_before(node: exp.Expression) -> int | None:
    child, parent = node, node.parent
    while parent is not None:
        ends: list[int] = []
        for sibling in parent.iter_expressions():
            if sibling is child:
                break
            ends += [n.meta["end"] for n in sibling.walk() if "end" in n.meta]
        if ends:
            return max(ends)
        child, parent = parent, parent.parent
    return None


def _shift_as_interval(shift: exp.Expression) -> None:
    """``date_add(DATE 'd', n)`` -> ``DATE 'd' + INTERVAL n DAY`` when both are constant,
    so the same folding computes it (``add_months``: ``INTERVAL n MONTH``)."""
    if shift.this is None or shift.expression is None:
        return  # a malformed call: the binder names it
    start, amount = shift.this, _integer(shift.expression)
    if not _date_literal(start) or amount is None:
        return
    if isinstance(shift, exp.AddMonths):
        unit = "MONTH"
    else:
        unit = _UNITS.get(shift.text("unit").upper() or "DAY")
        if unit is None:
            return
    if not isinstance(start, exp.Cast):  # a date string: date_add('1995-01-01', 1)
        start = exp.cast(start.copy(), exp.DataType.Type.DATE)
    interval = exp.Interval(this=exp.Literal.string(str(amount)), unit=exp.var(unit))
    interval.meta.update(_first_position(shift))  # for the error if it cannot be folded
    operation = exp.Sub if isinstance(shift, exp.DateSub) else exp.Add
    shift.replace(exp.Paren(this=operation(this=start.copy(), expression=interval)))


def _integer(node: exp.Expression) -> int | None:
    """The value of a constant integer expression (date_sub's ``n * -1``), else None."""
    if not _constant(node):
        return None
    value = node if node.is_int else _fold(node)
    return value.to_py() if value is not None and value.is_int else None


# -- folding -------------------------------------------------------------------------------


def _constant(node: exp.Expression) -> bool:
    """Built only from literals, date-unit intervals, + - * and parentheses."""
    return all(_constant_node(n) for n in node.walk())


def _constant_node(node: exp.Expression) -> bool:
    if isinstance(node, exp.Literal):
        # a literal with an exponent is a DOUBLE in Spark: exact folding would change it
        return node.is_string or "e" not in node.this.lower()
    if isinstance(node, exp.Interval):
        return node.text("unit").upper() in _DATE_UNITS
    if isinstance(node, exp.Cast):
        return _is_date_type(node)
    return isinstance(node, (*_ARITHMETIC, exp.Neg, exp.Paren, exp.Var, exp.DataType))


def _foldable_subtrees(root: exp.Expression) -> list[exp.Expression]:
    """The maximal constant subtrees that hold an operation to compute, outermost first."""
    constant: dict[int, bool] = {}
    operation: dict[int, bool] = {}
    order = list(root.walk(bfs=False))
    for node in reversed(order):  # a node's descendants come after it in pre-order
        children = list(node.iter_expressions())
        constant[id(node)] = _constant_node(node) and all(constant[id(c)] for c in children)
        operation[id(node)] = (isinstance(node, _ARITHMETIC)
                               or any(operation[id(c)] for c in children))
    return [node for node in order
            if constant[id(node)] and operation[id(node)]
            and not (node.parent is not None and constant.get(id(node.parent), False))]


def _fold(subtree: exp.Expression) -> exp.Expression | None:
    """The value of a constant subtree, or None if sqlglot cannot compute all of it."""
    try:
        value = simplify(subtree.copy(), dialect="spark")
    except Exception:  # noqa: BLE001 - unfolded, the text stays as written for the binder
        return None
    if isinstance(value, exp.Literal) and not value.is_string:
        return value
    if isinstance(value, exp.Neg) and isinstance(value.this, exp.Literal):
        return value
    if _date_literal(value) and isinstance(value, exp.Cast):
        return value
    return None  # e.g. INTERVAL + INTERVAL, or DATE - DATE: left as written


def _first_position(node: exp.Expression) -> dict[str, int]:
    """The position metadata of the leftmost positioned node in ``node``."""
    positioned = [n.meta for n in node.walk() if "start" in n.meta]
    return min(positioned, key=lambda meta: meta["start"], default={})
