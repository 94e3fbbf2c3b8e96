"""The registration memory budget: how much memory one operator of a registered plan may
need (``imp_core.estimate.memory`` checks plans against it).

A budget is a byte count or None (no limit). By default it is ``BUDGET_FRACTION`` of the
memory available when the query is registered (the system's available memory, lowered
to the room left under a cgroup limit, as on Kubernetes); ``IMP_REGISTRATION_MEMORY_BYTES``
overrides it (``8G``, ``512MiB``, a byte count, or ``none``). A bad setting raises
``ValueError`` naming it.
"""

from __future__ import annotations

import os
from typing import Mapping

ENV_BUDGET = "IMP_REGISTRATION_MEMORY_BYTES"
BUDGET_FRACTION = 0.5  # of the memory available when the query is registered
FALLBACK_MEMORY = 8 << 30  # assumed available when the machine's memory cannot be read
AUTO = "auto"


def parse_budget(raw: str, name: str = ENV_BUDGET) -> int | None:
    """A budget setting: a byte count > 0, optionally with a K/M/G/T suffix (powers of
    1024, e.g. ``8G``, ``512MiB``), or ``none`` / ``off`` (no limit). A bad value raises
    ``ValueError`` naming ``name``."""
    text = raw.strip().lower().replace("_", "")
    if text in ("none", "off"):
        return None
    units = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    body = text.removesuffix("ib").removesuffix("b")
    unit = body[-1:] if body[-1:] in units else ""
    number = body[:len(body) - len(unit)].strip()
    value = -1
    if number.isdigit():
        value = int(number) * units[unit]
    if value <= 0:
        raise ValueError(f"{name} must be a byte count > 0 (e.g. 8589934592 or 8G) or "
                         f"'none', not {raw!r}")
    return value


def available_memory_bytes() -> int | None:
    """The memory available to this process now: the system's available memory
    (``MemAvailable``), lowered to the room left under a cgroup memory limit; None when
    neither can be read."""
    found: list[int] = []
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    found.append(int(line.split()[1]) * 1024)
                    break
    except (OSError, ValueError, IndexError):
        pass
    if not found:
        try:
            found.append(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
        except (ValueError, OSError, AttributeError):
            pass
    for limit_file, usage_file in (
            ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
            ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
             "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        try:
            with open(limit_file) as f:
                limit_text = f.read().strip()
            with open(usage_file) as f:
                usage = int(f.read().strip())
        except (OSError, ValueError):
            continue
        if limit_text.isdigit() and int(limit_text) < (1 << 60):
            found.append(max(0, int(limit_text) - usage))
        break
    return min(found) if found else None


def default_memory_budget() -> int:
    """``BUDGET_FRACTION`` of the memory available now (``FALLBACK_MEMORY`` when it
    cannot be read)."""
    available = available_memory_bytes()
    return int(BUDGET_FRACTION * (available if available is not None else FALLBACK_MEMORY))


def memory_budget(value: int | None | str = AUTO,
                  env: Mapping[str, str] | None = None) -> int | None:
    """The registration memory budget in bytes (None: no limit). ``value``: a byte
    count, None, or ``AUTO``: ``IMP_REGISTRATION_MEMORY_BYTES`` if set (see
    ``parse_budget``), else ``default_memory_budget()``."""
    if value is None:
        return None
    if isinstance(value, str):
        if value != AUTO:
            return parse_budget(value, "memory_budget_bytes")
        raw = (os.environ if env is None else env).get(ENV_BUDGET, "").strip()
        return parse_budget(raw) if raw else default_memory_budget()
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"memory_budget_bytes must be a byte count > 0, None or "
                         f"{AUTO!r}, not {value!r}")
    return value
