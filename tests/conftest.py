"""Fixtures shared by several test modules.

A module that defines a fixture of the same name keeps its own (pytest prefers the
nearest definition). Every fixture here is module-scoped at most, so what one module
changes (a table store's contents, the Spark session's configuration) never leaks into
another, and none is autouse: a test pays only for what it asks for.
"""

from __future__ import annotations

import functools
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


@functools.cache
def _starts_ray(module: Path) -> bool:
    """Whether a test module holds a test marked ``ray`` (read from its source: the
    xdist controller that schedules does not collect)."""
    return module.is_file() and "pytest.mark.ray" in module.read_text()


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist, which may be absent
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """How ``make test`` (``-n 2``, pytest-xdist) shares the tests between its workers: a
    module is one unit of work, run on one worker in the order it is written, so its
    module-scoped fixtures (a Spark session configured for it, Delta stores, a running
    service) are made once and its tests may build on each other. Every module holding a
    test marked ``ray`` is in one unit: each such test starts a local Ray cluster (or a
    fake multi-node one) and kills parts of it, which two at once would contend for.
    Units go out largest first (xdist's --loadscope-reorder)."""
    from xdist.scheduler import LoadScopeScheduling

    root = config.rootpath

    class ModulesRayTogether(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return "ray" if _starts_ray(root / module) else module

    return ModulesRayTogether(config, log)
