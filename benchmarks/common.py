"""What every benchmark records next to its figures: machine, versions, parameters."""

from __future__ import annotations

import os
import platform
import time
from importlib import metadata
from typing import Any


def environment() -> dict[str, Any]:
    versions = {}
    for pkg in ("pyarrow", "numpy", "pandas", "pyroaring", "sortedcontainers", "sqlglot",
                "pyspark", "ray", "deltalake", "matplotlib"):
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            versions[pkg] = None
    return {
        "machine": platform.machine(),
        "processor": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "system": platform.platform(),
        "versions": versions,
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    idx = min(len(s) - 1, max(0, int(round(q / 100 * (len(s) - 1)))))
    return s[idx]
