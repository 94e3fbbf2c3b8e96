"""Spark's error classes (``DIVIDE_BY_ZERO``, ``SCALAR_SUBQUERY_TOO_MANY_ROWS``, ...) out of
the exceptions PySpark raises, whichever way they arrive: a captured exception with
``getCondition`` / ``getErrorClass``, or a Py4J error whose Java message names the
class in brackets (an error met while collecting the rows)."""

from __future__ import annotations

import re

_BRACKETED = re.compile(r"\[([A-Z][A-Z0-9_]*)(?:\.[A-Z0-9_]+)?\]")


def spark_error_class(error: BaseException) -> str | None:
    """The top error class of ``error`` (without a sub-class: ``NUMERIC_VALUE_OUT_OF_RANGE``
    for ``NUMERIC_VALUE_OUT_OF_RANGE.WITH_SUGGESTION``), or None when it names none.

    >>> spark_error_class(RuntimeError("Caused by: [DIVIDE_BY_ZERO] Division by zero."))
    'DIVIDE_BY_ZERO'
    >>> spark_error_class(ValueError("no class here")) is None
    True
    """
    for name in ("getCondition", "getErrorClass"):
        method = getattr(error, name, None)
        if callable(method):
            try:
                found = method()
            except Exception:  # noqa: BLE001 - an older PySpark without the method's Java side
                found = None
            if found:
                return str(found).split(".")[0]
    match = _BRACKETED.search(str(error))
    return match.group(1) if match else None
