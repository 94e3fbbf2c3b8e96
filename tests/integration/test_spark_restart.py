"""A Spark session whose JVM stopped or died is replaced by the next ``get_spark``
(a JVM out of heap at SF 10 had left every later capture failing with "connection
refused"). Its own module: it kills the session other modules would share."""

from __future__ import annotations

import os
import signal

import pytest

pytestmark = pytest.mark.spark


def _count(spark) -> int:
    return spark.range(5).count()


def test_a_stopped_context_and_a_killed_jvm_are_replaced():
    from pyspark import SparkContext

    from imp_core.spark import SparkConfig, get_spark

    config = SparkConfig(master="local[1]", driver_memory="1g")
    spark = get_spark(config)
    assert _count(spark) == 5
    spark.sparkContext.stop()  # what an out-of-heap JVM does to its context
    again = get_spark()
    assert again is not spark and _count(again) == 5
    assert get_spark() is again  # a live session is kept

    proc = SparkContext._gateway.proc
    os.kill(proc.pid, signal.SIGKILL)  # the JVM dies
    assert proc.wait(30) == -signal.SIGKILL
    fresh = get_spark(config)
    assert _count(fresh) == 5
    assert SparkContext._gateway.proc.pid != proc.pid
