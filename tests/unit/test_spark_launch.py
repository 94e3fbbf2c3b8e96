"""A local Spark JVM that exits before reporting its port is launched again, a bounded
number of times; other failures, and the last launch's, end as SparkUnavailableError.
(The JVM launch is replaced here: no Spark starts.)"""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession

from imp_core.errors import SparkUnavailableError
from imp_core.spark import session
from imp_core.spark.session import SparkConfig

EXITED = "[JAVA_GATEWAY_EXITED] Java gateway process exited before sending its port number."


def _launches(monkeypatch, failures: list[str]) -> list[int]:
    calls: list[int] = []
    started = object()

    def get_or_create(self):
        calls.append(1)
        if len(calls) <= len(failures):
            raise RuntimeError(failures[len(calls) - 1])
        return started

    monkeypatch.setattr(SparkSession.Builder, "getOrCreate", get_or_create)
    monkeypatch.setattr(session.time, "sleep", lambda s: None)
    return calls


def test_a_jvm_that_exited_before_its_port_is_launched_again(monkeypatch):
    calls = _launches(monkeypatch, [EXITED])
    spark = session._build(SparkConfig(quiet=False))
    assert len(calls) == 2 and spark is not None


def test_the_launches_are_bounded(monkeypatch):
    calls = _launches(monkeypatch, [EXITED] * 5)
    with pytest.raises(SparkUnavailableError, match="JAVA_GATEWAY_EXITED"):
        session._build(SparkConfig(quiet=False))
    assert len(calls) == session._LAUNCH_ATTEMPTS == 3


def test_other_failures_are_not_retried(monkeypatch):
    calls = _launches(monkeypatch, ["Connection refused"])
    with pytest.raises(SparkUnavailableError, match="Connection refused"):
        session._build(SparkConfig(quiet=False))
    assert len(calls) == 1
