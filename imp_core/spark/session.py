"""One Spark session per process: embedded local mode, a cluster master, or Spark Connect.

``get_spark()`` creates the session on first use and caches it; ``stop_spark()`` stops
it. The configuration comes from a ``SparkConfig`` or, when none is given, from the
environment (``IMP_SPARK_MASTER``, ``IMP_SPARK_CONNECT``). Local sessions bind to the
loopback interface, log only errors, use UTC, few shuffle partitions, Arrow transfers and
no web UI. Starting a local or cluster session needs Java 17+; without it
``SparkUnavailableError`` says so.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Mapping

from imp_core.errors import SparkUnavailableError

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

ENV_MASTER = "IMP_SPARK_MASTER"
ENV_CONNECT = "IMP_SPARK_CONNECT"
ENV_DRIVER_MEMORY = "IMP_SPARK_DRIVER_MEMORY"

_LOG4J2 = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
logger.hadoop.name = org.apache.hadoop
logger.hadoop.level = error
"""

# PySpark logs every SQL error through these Python loggers before raising it
_PY_LOGGERS = ("SQLQueryContextLogger", "DataFrameQueryContextLogger")


@dataclass(frozen=True)
class SparkConfig:
    """Where Spark runs and how it is tuned.

    ``connect_url`` ("sc://host:port") selects Spark Connect and wins over ``master``;
    otherwise ``master`` is "local[N]" (embedded) or a cluster URL ("spark://...").
    """

    master: str = "local[2]"
    connect_url: str | None = None
    driver_memory: str = "4g"
    app_name: str = "imp"
    shuffle_partitions: int = 4
    quiet: bool = True
    extra_conf: Mapping[str, str] = field(default_factory=dict)

    @staticmethod
    def from_env(base: SparkConfig | None = None) -> SparkConfig:
        """``base`` (default: the defaults) with IMP_SPARK_MASTER / IMP_SPARK_CONNECT /
        IMP_SPARK_DRIVER_MEMORY (a JVM size such as "8g") applied."""
        cfg = base or SparkConfig()
        master = os.environ.get(ENV_MASTER)
        connect = os.environ.get(ENV_CONNECT)
        memory = os.environ.get(ENV_DRIVER_MEMORY, "").strip()
        if master:
            cfg = replace(cfg, master=master)
        if connect:
            cfg = replace(cfg, connect_url=connect)
        if memory:
            if not re.fullmatch(r"[0-9]+[kmgt]?", memory.lower()):
                raise ValueError(f"{ENV_DRIVER_MEMORY}={memory!r} is not a JVM memory size "
                                 "such as 4g or 8192m")
            cfg = replace(cfg, driver_memory=memory)
        return cfg

    @property
    def is_connect(self) -> bool:
        return bool(self.connect_url)

    @property
    def is_local(self) -> bool:
        return not self.is_connect and self.master.startswith("local")

    def conf(self) -> dict[str, str]:
        """The Spark properties this configuration sets."""
        out = {
            "spark.sql.session.timeZone": "UTC",
            "spark.sql.shuffle.partitions": str(self.shuffle_partitions),
            "spark.sql.execution.arrow.pyspark.enabled": "true",
            "spark.sql.ansi.enabled": "true",
            "spark.sql.decimalOperations.allowPrecisionLoss": "true",
        }
        if not self.is_connect:
            out.update({
                "spark.ui.enabled": "false",
                "spark.ui.showConsoleProgress": "false",
                "spark.driver.memory": self.driver_memory,
                # the service names each table version's files explicitly; listing them
                # in a Spark job (the default above 32 paths) cost ~0.6 s per query, far
                # more than the driver's own listing of local files
                "spark.sql.sources.parallelPartitionDiscovery.threshold": "4096",
            })
            if self.quiet:
                opts = f"-Dlog4j2.configurationFile={_log4j_file().as_uri()}"
                prior = self.extra_conf.get("spark.driver.extraJavaOptions")
                out["spark.driver.extraJavaOptions"] = f"{prior} {opts}" if prior else opts
        for k, v in self.extra_conf.items():
            out.setdefault(k, str(v))
        return out


_lock = threading.Lock()
_session: SparkSession | None = None
_session_config: SparkConfig | None = None


def _log4j_file() -> Path:
    path = Path(tempfile.gettempdir()) / "imp-spark-log4j2.properties"
    if not path.exists() or path.read_text() != _LOG4J2:
        # written aside and renamed: another process may be starting its JVM on it
        fd, aside = tempfile.mkstemp(prefix=".imp-log4j2-", dir=path.parent)
        with os.fdopen(fd, "w") as handle:
            handle.write(_LOG4J2)
        os.replace(aside, path)
    return path


def java_version() -> int | None:
    """Major version of the ``java`` Spark would launch (JAVA_HOME first), or None."""
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not java or not Path(java).exists():
        return None
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    text = out.stderr + out.stdout
    for token in text.split():
        token = token.strip('"')
        if token[:1].isdigit():
            head = token.split(".")[0]
            if head == "1":  # 1.8.0_x
                return int(token.split(".")[1])
            try:
                return int(head.split("-")[0].split("+")[0])
            except ValueError:
                continue
    return None


def _check_java() -> None:
    version = java_version()
    if version is None:
        raise SparkUnavailableError(
            "Spark needs Java 17 or newer, and no 'java' was found (JAVA_HOME or PATH); "
            "install Java 17+ (e.g. apt-get install openjdk-17-jre-headless) or use a Spark "
            f"Connect server via {ENV_CONNECT}=sc://host:port")
    if version < 17:
        raise SparkUnavailableError(
            f"Spark 4 needs Java 17 or newer but found Java {version}; install Java 17+ "
            "and point JAVA_HOME at it")


def _quiet_python_loggers() -> None:
    for name in _PY_LOGGERS:
        logging.getLogger(name).setLevel(logging.CRITICAL)
    logging.getLogger("py4j").setLevel(logging.ERROR)


_LAUNCH_ATTEMPTS = 3  # launches of a local JVM before a start is reported as failed


def _build(config: SparkConfig) -> SparkSession:
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(config.app_name)
    if config.is_connect:
        builder = builder.remote(config.connect_url)
    else:
        _check_java()
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        # Python workers (UDFs) must run this interpreter, with this virtualenv
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        builder = builder.master(config.master)
    for key, value in config.conf().items():
        builder = builder.config(key, value)
    for attempt in range(1, _LAUNCH_ATTEMPTS + 1):
        try:
            spark = builder.getOrCreate()
            break
        except Exception as exc:  # JAVA_GATEWAY_EXITED, connection refused, ...
            # a JVM launched from a busy process (a server's gRPC threads running while it
            # forks) has exited before reporting its port, once in a few hundred starts
            # on a loaded machine; another launch works
            if config.is_connect or "JAVA_GATEWAY_EXITED" not in str(exc) \
                    or attempt == _LAUNCH_ATTEMPTS:
                raise SparkUnavailableError(
                    f"could not start Spark ({_where(config)}): {exc}") from exc
            logging.getLogger(__name__).warning(
                "the Spark JVM exited before it reported its port (launch %d of %d); "
                "launching it again", attempt, _LAUNCH_ATTEMPTS)
            time.sleep(0.5 * attempt)
    if config.quiet:
        _quiet_python_loggers()
        if not config.is_connect:
            spark.sparkContext.setLogLevel("ERROR")
    return spark


def _where(config: SparkConfig) -> str:
    return f"Spark Connect {config.connect_url}" if config.is_connect else config.master


def get_spark(config: SparkConfig | None = None) -> SparkSession:
    """The process's Spark session, created on first use.

    With ``config`` None the environment decides (``SparkConfig.from_env()``). Asking for a
    different configuration than the running session's stops it and starts a new one
    (the JVM of an embedded session stays, so ``driver_memory`` cannot change).
    """
    global _session, _session_config
    with _lock:
        wanted = config if config is not None else SparkConfig.from_env()
        if _session is not None:
            alive = _alive(_session)
            if alive and (config is None or wanted == _session_config):
                return _session
            if not alive:  # e.g. its JVM ran out of heap: start a new one
                log.warning("the Spark session is no longer running; starting a new one")
                wanted = config if config is not None else _session_config or wanted
                try:
                    _stop_locked()
                except Exception:  # noqa: BLE001 - stopping a dead JVM's session fails
                    pass
                _forget_dead_gateway()
            else:
                _stop_locked()
        _session = _build(wanted)
        _session_config = wanted
        return _session


def _alive(session: SparkSession) -> bool:
    """Whether an embedded session's JVM still answers and its context still runs (a JVM
    out of heap stops its context; a JVM that died refuses the gateway's connections)."""
    if is_connect_session(session):
        return True
    try:
        return not session.sparkContext._jsc.sc().isStopped()
    except Exception:  # noqa: BLE001 - py4j's errors for a gone JVM vary
        return False


def _forget_dead_gateway() -> None:
    """Drop pyspark's handle on a JVM that no longer answers, so that the next session
    launches a new one instead of calling the dead one."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    SparkSession._instantiatedSession = None
    SparkSession._activeSession = None
    gateway = SparkContext._gateway
    if gateway is None:
        return
    try:
        gateway.jvm.java.lang.System.currentTimeMillis()
        return  # the JVM answers: a new context can be created in it
    except Exception:  # noqa: BLE001
        pass
    try:
        gateway.shutdown()
    except Exception:  # noqa: BLE001 - already gone
        pass
    SparkContext._gateway = None
    SparkContext._jvm = None
    SparkContext._active_spark_context = None


def current_config() -> SparkConfig | None:
    """The configuration of the running session, or None when none runs."""
    return _session_config


def stop_spark() -> None:
    """Stop the cached session (no-op when none runs)."""
    with _lock:
        _stop_locked()


def _stop_locked() -> None:
    global _session, _session_config
    if _session is not None:
        try:
            _session.stop()
        finally:
            _session = None
            _session_config = None


def is_connect_session(spark: SparkSession) -> bool:
    """True for a Spark Connect client session (no py4j JVM behind it)."""
    return not hasattr(spark, "_jsparkSession")
