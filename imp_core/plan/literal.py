"""Python values as standard SQL literals (the text Spark SQL and delta-rs both parse).

Invariant: ``sql_literal(v)`` read back by a SQL parser is ``v`` again (strings quoted
with doubled single quotes, dates and timestamps typed, decimals and numbers exact).
"""

from __future__ import annotations

import datetime as dt
import decimal
from typing import Any


def sql_literal(v: Any) -> str:
    """``v`` as a SQL literal.

    >>> sql_literal("it's"), sql_literal(dt.date(1998, 12, 1)), sql_literal(None)
    ("'it''s'", "DATE '1998-12-01'", 'NULL')
    """
    if v is None:
        return "NULL"
    if isinstance(v, bool):
        return "TRUE" if v else "FALSE"
    if isinstance(v, str):
        return "'" + v.replace("'", "''") + "'"
    if isinstance(v, dt.datetime):
        return f"TIMESTAMP '{v.isoformat(sep=' ')}'"
    if isinstance(v, dt.date):
        return f"DATE '{v.isoformat()}'"
    if isinstance(v, decimal.Decimal):
        return str(v)
    return repr(v)
