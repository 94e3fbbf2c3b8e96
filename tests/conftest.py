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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist (``make test`` runs ``-n 2 --dist loadgroup``), every test marked
    ``ray`` joins one group, run by one worker in turn: each starts a local Ray cluster
    (or a fake multi-node one) and kills parts of it, which two at once would contend
    for. Spark tests need no group: each worker has its own local session."""
    for item in items:
        if item.get_closest_marker("ray") is not None:
            item.add_marker(pytest.mark.xdist_group("ray"))
