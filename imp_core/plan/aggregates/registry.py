"""The registry of aggregate functions: every ``FUNCTIONS`` tuple of the modules of
``imp_core.plan.aggregates``, by plan name and by SQL (sqlglot) expression key.

A new function is a new module here declaring ``FUNCTIONS``; nothing else lists them.
Names are unique (checked when the registry is built).
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache

import imp_core.plan.aggregates as _package
from imp_core.plan.aggregates.base import AggregateFunction

_NOT_FUNCTIONS = frozenset({"base", "exact", "registry"})


@cache
def _functions() -> dict[str, AggregateFunction]:
    found: dict[str, AggregateFunction] = {}
    for info in sorted(pkgutil.iter_modules(_package.__path__), key=lambda m: m.name):
        if info.name in _NOT_FUNCTIONS:
            continue
        module = importlib.import_module(f"{_package.__name__}.{info.name}")
        for fn in getattr(module, "FUNCTIONS", ()):
            if fn.name in found:
                raise ValueError(f"aggregate function {fn.name} is declared twice")
            found[fn.name] = fn
    return found


@cache
def _by_sql_key() -> dict[str, AggregateFunction]:
    return {key: fn for fn in _functions().values() for key in fn.sql_keys}


def names() -> tuple[str, ...]:
    """Every function's plan name."""
    return tuple(_functions())


def get(name: str) -> AggregateFunction:
    """The function named ``name`` (a plan name such as "sum" or "count_star")."""
    try:
        return _functions()[name]
    except KeyError:
        raise ValueError(f"unknown aggregate function {name!r}") from None


def from_sql_key(key: str) -> AggregateFunction | None:
    """The function a SQL call parses to, by its sqlglot expression key (``node.key``:
    "sum", "variance", "stddevpop", ...), or None when it is no known aggregate."""
    return _by_sql_key().get(key)
