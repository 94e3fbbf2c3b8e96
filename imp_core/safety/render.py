"""SQL-like text of plan expressions, for the reasons given in verdicts.

The text is for people, never parsed again: column names are shown as they are (callers
first rename them to their labels, e.g. ``sum(x)``), and an expression of a kind not
listed here falls back to its ``str``.
"""

from __future__ import annotations

from imp_core.plan.expr import (
    BinaryOp,
    Case,
    Cast,
    ColumnRef,
    Expr,
    FuncCall,
    InList,
    Like,
    Literal,
    Strict,
    UnaryOp,
)
from imp_core.plan.literal import sql_literal

_OPS = {"and": "AND", "or": "OR"}


def sql_text(e: Expr) -> str:
    """SQL-like text of an expression (ColumnRef names are shown as they are)."""

    def wrap(x: Expr) -> str:
        return f"({sql_text(x)})" if isinstance(x, BinaryOp) else sql_text(x)

    if isinstance(e, ColumnRef):
        return e.name
    if isinstance(e, Literal):
        return sql_literal(e.value)
    if isinstance(e, BinaryOp):
        return f"{wrap(e.left)} {_OPS.get(e.op, e.op)} {wrap(e.right)}"
    if isinstance(e, UnaryOp):
        if e.op == "not":
            return f"NOT {wrap(e.operand)}"
        if e.op == "neg":
            return f"-{wrap(e.operand)}"
        return f"{wrap(e.operand)} {'IS NULL' if e.op == 'is_null' else 'IS NOT NULL'}"
    if isinstance(e, Case):
        body = " ".join(f"WHEN {sql_text(c)} THEN {sql_text(v)}" for c, v in e.whens)
        default = "" if e.default is None else f" ELSE {sql_text(e.default)}"
        return f"CASE {body}{default} END"
    if isinstance(e, InList):
        vals = ", ".join(sql_text(v) for v in e.values)
        return f"{wrap(e.operand)} {'NOT IN' if e.negated else 'IN'} ({vals})"
    if isinstance(e, Like):
        return f"{wrap(e.operand)} {'NOT LIKE' if e.negated else 'LIKE'} {sql_literal(e.pattern)}"
    if isinstance(e, FuncCall):
        return f"{e.name}({', '.join(sql_text(a) for a in e.args)})"
    if isinstance(e, Cast):
        return f"CAST({sql_text(e.operand)} AS {e.to})"
    if isinstance(e, Strict):
        return sql_text(e.inner)
    return str(e)

