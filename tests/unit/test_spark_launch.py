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


BIND = ("java.io.IOException: Failed to bind to address 127.0.0.1:41234 "
        "(java.net.BindException: Address already in use)")


def _connect_starts(monkeypatch, failures: list[str]) -> list[int]:
    from imp_core.spark import connect_server

    ports: list[int] = []

    def get_spark(config):
        ports.append(int(config.extra_conf["spark.connect.grpc.binding.port"]))
        if len(ports) <= len(failures):
            raise RuntimeError(failures[len(ports) - 1])
        return object()

    monkeypatch.setattr(connect_server, "get_spark", get_spark)
    return ports


def test_a_connect_server_on_port_0_takes_another_port_when_its_port_is_taken(monkeypatch):
    from imp_core.spark import connect_server

    ports = _connect_starts(monkeypatch, [BIND, BIND])
    port = connect_server.start(0)
    assert len(ports) == 3 and port == ports[-1] and all(p > 0 for p in ports)


def test_a_connect_server_on_a_given_port_fails_once_it_is_taken(monkeypatch):
    from imp_core.spark import connect_server

    ports = _connect_starts(monkeypatch, [BIND])
    with pytest.raises(RuntimeError, match="Address already in use"):
        connect_server.start(41234)
    assert ports == [41234]


def test_a_connect_server_does_not_retry_other_failures(monkeypatch):
    from imp_core.spark import connect_server

    ports = _connect_starts(monkeypatch, ["JAVA_HEAP_SPACE"])
    with pytest.raises(RuntimeError, match="JAVA_HEAP_SPACE"):
        connect_server.start(0)
    assert len(ports) == 1
