"""Session settings a query text may begin with: Spark's ``SET key = value`` statements.

Only settings that change a query's answer are taken, and only those the engine
follows; any other ``SET`` is refused with its key named, so that a query never runs
under settings it silently ignores. Today that is ``spark.sql.ansi.enabled``: Spark's
ANSI mode (``imp_core.plan.ansi``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from sqlglot import exp

from imp_core.errors import UnsupportedSqlError

ANSI_KEY = "spark.sql.ansi.enabled"
_TRUE = frozenset({"true", "1", "on", "yes"})
_FALSE = frozenset({"false", "0", "off", "no"})


@dataclass(frozen=True)
class Session:
    """The settings a query runs under. ``ansi``: Spark's ANSI mode (off by default, as
    in Spark's classic sessions)."""

    ansi: bool = False


def split_settings(statements: Sequence[exp.Expression], default: Session
                   ) -> tuple[Session, list[exp.Expression]]:
    """The session the leading ``SET`` statements give (over ``default``) and the
    statements after them."""
    ansi = default.ansi
    rest = list(statements)
    while rest and isinstance(rest[0], exp.Set):
        for item in rest.pop(0).expressions:
            key, value = _setting(item)
            if key != ANSI_KEY:
                raise UnsupportedSqlError(
                    f"SET {key}", detail=f"only {ANSI_KEY} may be set in a query's text")
            if value in _TRUE:
                ansi = True
            elif value in _FALSE:
                ansi = False
            else:
                raise UnsupportedSqlError(f"SET {key} = {value}",
                                          detail="give true or false")
    return Session(ansi=ansi), rest


def leading_settings(statements: Sequence[exp.Expression]) -> int:
    """How many statements at the head of ``statements`` are ``SET`` statements of the
    settings a query may carry (those ``split_settings`` takes); the read-only check
    lets them pass and refuses any other ``SET``."""
    count = 0
    for statement in statements:
        if not isinstance(statement, exp.Set) or not statement.expressions:
            break
        try:
            keys = {_setting(item)[0] for item in statement.expressions}
        except UnsupportedSqlError:
            break
        if keys != {ANSI_KEY}:
            break
        count += 1
    return count


def _setting(item: exp.Expression) -> tuple[str, str]:
    this = item.this if isinstance(item, exp.SetItem) else item
    if isinstance(this, exp.EQ):
        key, value = this.this, this.expression
    else:
        key, value = this, None
    name = key.sql(dialect="spark") if isinstance(key, exp.Expression) else str(key)
    if value is None:
        raise UnsupportedSqlError(f"SET {name}", detail="give SET key = value")
    text = value.name if isinstance(value, (exp.Literal, exp.Identifier, exp.Column)) \
        else value.sql(dialect="spark")
    return name.replace("`", "").lower(), str(text).strip().lower()


DEFAULT_SESSION = Session()
