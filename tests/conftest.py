"""Fixtures shared by several test modules.

A module that defines a fixture of the same name keeps its own (pytest prefers the
nearest definition). Every fixture here is module-scoped at most, so what one module
changes (a table store's contents, the Spark session's configuration) never leaks into
another, and none is autouse: a test pays only for what it asks for.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

SPARK_MASTER = "local[2]"  # two cores: the machine the suite is sized for
SPARK_DRIVER_MEMORY = "2g"


@pytest.fixture(scope="module")
def spark() -> Any:
    """The process's local Spark session (``local[2]``, 2 GiB driver).

    Module-scoped because ``get_spark`` replaces the session when a module asks for
    another configuration; each module gets the session that is running for it.
    """
    from imp_core.spark import SparkConfig, get_spark

    # Java 17+ is required (make test checks it): a missing runtime fails, never skips
    return get_spark(SparkConfig(master=SPARK_MASTER, driver_memory=SPARK_DRIVER_MEMORY))


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Delta stores ``{"tpch", "synthetic"}`` holding the tiny workload tables, one pair
    per module (tests may change them)."""
    from workload_data import workload_stores

    root: Path = tmp_path_factory.mktemp("stores")
    return workload_stores(root)
