"""A local Spark Connect server: an embedded Spark session with the Connect plugin.

``python -m imp_core.spark.connect_server --port 15002`` serves ``sc://127.0.0.1:15002``
until its standard input closes (or it is interrupted), then stops Spark. It prints one
line ``READY <port>`` once clients can connect. Meant for development and tests: a real
deployment points ``IMP_SPARK_CONNECT`` at a cluster's Connect endpoint instead. pyspark's
wheel ships the server (``jars/spark-connect_*.jar``), so nothing else is needed.
"""

from __future__ import annotations

import argparse
import signal
import sys

from imp_core.spark.session import SparkConfig, get_spark, stop_spark

PLUGIN = "org.apache.spark.sql.connect.SparkConnectPlugin"


def server_config(port: int, host: str = "127.0.0.1", master: str = "local[2]",
                  driver_memory: str = "1g") -> SparkConfig:
    """The embedded session that hosts the Connect service on ``host:port``."""
    return SparkConfig(master=master, driver_memory=driver_memory, app_name="imp-connect",
                       extra_conf={"spark.plugins": PLUGIN,
                                   "spark.connect.grpc.binding.address": host,
                                   "spark.connect.grpc.binding.port": str(port)})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=15002)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--driver-memory", default="1g")
    args = parser.parse_args(argv)
    get_spark(server_config(args.port, args.host, args.master, args.driver_memory))
    print(f"READY {args.port}", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        sys.stdin.read()  # returns when the parent closes our stdin (or exits)
    except KeyboardInterrupt:
        pass
    finally:
        stop_spark()
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
