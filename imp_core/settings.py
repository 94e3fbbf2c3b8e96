"""Integer settings read from the environment (``IMP_*``): one parser, one error text.

Invariant: ``int_setting`` returns the default for an unset or blank variable, else an
integer at least ``minimum``; anything else raises ``ValueError`` naming the variable.
"""

from __future__ import annotations

import os
from typing import Mapping


def int_setting(name: str, default: int, minimum: int,
                env: Mapping[str, str] | None = None) -> int:
    """The integer ``name`` holds in ``env`` (default: the process environment), or
    ``default`` when it is unset or blank."""
    raw = (os.environ if env is None else env).get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, not {raw!r}")
    return value
