"""Bounds on what one registration may ask for, checked before any work starts.

A sketch's fragments cost memory in every annotation and in μ's counts, and choosing
them (equi-depth) costs time per fragment, so a request for billions of fragments or
hundreds of thousands of split points is refused up front, with the limit's name, by
the one path every registration takes (``imp_core.query.prepare.prepare_query``). Limits come
from the environment (``IMP_MAX_FRAGMENTS``) or the defaults here.
"""

from __future__ import annotations

from typing import Any, Mapping

from imp_core.errors import RequestLimitError
from imp_core.settings import int_setting
from imp_core.sketch.partition import RangePartition

DEFAULT_MAX_FRAGMENTS = 65536  # fragments of one query, over all its partitions
MAX_FRAGMENTS_ENV = "IMP_MAX_FRAGMENTS"


def max_fragments(env: Mapping[str, str] | None = None) -> int:
    """``IMP_MAX_FRAGMENTS`` (an integer >= 1), else ``DEFAULT_MAX_FRAGMENTS``."""
    return int_setting(MAX_FRAGMENTS_ENV, DEFAULT_MAX_FRAGMENTS, 1, env)


def requested_fragments(spec: Any) -> int:
    """The fragments a partition spec asks for: a count, split points + 1, or a
    partition's size (a spec of another shape counts 1; it is refused later)."""
    if isinstance(spec, RangePartition):
        return spec.size
    if isinstance(spec, bool):
        return 1
    if isinstance(spec, int):
        return spec
    try:
        return len(spec) + 1
    except TypeError:
        return 1


def check_fragments(specs: Mapping[str, Any], limit: int | None = None) -> None:
    """Refuse partitions asking for more than ``limit`` fragments in all (default
    ``max_fragments()``), before any value is read."""
    limit = max_fragments() if limit is None else limit
    asked = {attr: requested_fragments(spec) for attr, spec in specs.items()}
    total = sum(asked.values())
    if total > limit:
        detail = ", ".join(f"{attr}: {n:,}" for attr, n in asked.items())
        raise RequestLimitError(
            f"the partitions ask for {total:,} fragments ({detail}), more than the limit "
            f"of {limit:,} per query ({MAX_FRAGMENTS_ENV})")
