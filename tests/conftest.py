"""Fixtures shared by several test modules.

A module that defines a fixture of the same name keeps its own (pytest prefers the
nearest definition). Every fixture here is module-scoped at most, so what one module
changes (a table store's contents, the Spark session's configuration) never leaks into
another, and none is autouse: a test pays only for what it asks for.
"""

from __future__ import annotations

import gc
import os
from pathlib import Path
from typing import Any

import pytest

SPARK_MASTER = "local[2]"  # two cores: the machine the suite is sized for
SPARK_DRIVER_MEMORY = "2g"
# a session asked for with the environment's settings (``get_spark()``, a coordinator's)
# is the same as the fixture's: no module restarts a session another one left running
# (each restart of a SparkContext costs seconds), in this process or a server it starts
os.environ.setdefault("IMP_SPARK_DRIVER_MEMORY", SPARK_DRIVER_MEMORY)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--record-module-seconds", metavar="PATH", default=None,
                     help="write each test module's seconds in this run to PATH (JSON), "
                          "as tests/support/module_seconds.json holds them")


def pytest_configure(config: pytest.Config) -> None:
    from module_order import Recorder

    # The suite is CPU-bound on two cores (docs/testing.md), and CPython's cyclic collector
    # at its default threshold (a collection every 700 allocations, over every object the
    # imports made) took a fifth of the CPU of the property tests: the imported objects are
    # frozen out of the collector and it runs every 50,000 allocations. Each xdist worker
    # runs this hook. The code under test is unchanged, and servers the tests start keep
    # the interpreter's defaults.
    gc.freeze()
    gc.set_threshold(50_000, 20, 20)

    path = config.getoption("--record-module-seconds")
    if path and not hasattr(config, "workerinput"):  # the controller sees every report
        config.pluginmanager.register(Recorder(Path(path)), "module-seconds-recorder")


def pytest_collection_modifyitems(config: pytest.Config, items: list[Any]) -> None:
    """The longest modules first (``tests/support/module_order.py``): both workers of
    ``make test`` stay busy to the end."""
    from module_order import load, order

    items[:] = order(items, load())


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
