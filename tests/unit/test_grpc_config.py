"""ServerConfig: IMP_* variables, `imp serve` flags over them, the runtime configuration
it hands the coordinator, and refusals of inconsistent settings."""

from __future__ import annotations

import argparse

import pytest

from services.server import is_loopback
from services.server_config import DEFAULT_LISTEN, Limits, ServerConfig


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    ServerConfig.add_arguments(parser)
    return parser.parse_args(argv)


def test_defaults_listen_on_loopback():
    cfg = ServerConfig.from_env({})
    assert cfg.listen == DEFAULT_LISTEN and is_loopback(cfg.listen)
    assert cfg.limits == Limits() and not cfg.tls and cfg.auth_tokens() == ()


def test_environment_then_flags(tmp_path):
    tokens = tmp_path / "tokens"
    tokens.write_text("# comment\nalpha\n\n beta \n")
    env = {"IMP_LISTEN": "0.0.0.0:6000", "IMP_ROOT": str(tmp_path), "IMP_BACKEND": "local",
           "IMP_MAX_LIVE_ACTORS": "3", "IMP_AUTH_TOKEN_FILE": str(tokens),
           "IMP_MAX_SQL_CHARS": "123", "IMP_SPARK_MASTER": "local[1]",
           "IMP_CHECKPOINTS": str(tmp_path / "ck")}
    cfg = ServerConfig.from_env(env)
    assert cfg.listen == "0.0.0.0:6000" and not is_loopback(cfg.listen)
    assert cfg.auth_tokens() == ("alpha", "beta") and cfg.limits.max_sql_chars == 123
    flagged = ServerConfig.from_args(_args("--listen", "127.0.0.1:7000", "--max-sql-chars",
                                           "456", "--backend", "ray"), env)
    assert flagged.listen == "127.0.0.1:7000" and flagged.limits.max_sql_chars == 456
    assert flagged.backend == "ray" and flagged.root == str(tmp_path)  # env kept
    runtime = cfg.runtime_config()
    assert runtime.root == str(tmp_path) and runtime.backend == "local"
    assert runtime.eviction.max_live_actors == 3
    assert runtime.checkpoints_dir == str(tmp_path / "ck")
    assert cfg.spark_env() == {"IMP_SPARK_MASTER": "local[1]"}


@pytest.mark.parametrize("env,message", [
    ({"IMP_TLS_CERT": "c.pem"}, "both a certificate"),
    ({"IMP_TLS_CLIENT_CA": "ca.pem"}, "mutual TLS"),
    ({"IMP_BACKEND": "spark"}, "backend"),
    ({"IMP_MAX_BATCH_ROWS": "0"}, "max_batch_rows"),
    ({"IMP_MAX_BATCH_ROWS": "many"}, "expected int"),
    ({"IMP_MAX_BATCH_BYTES": str(1 << 40)}, "cannot exceed"),
    ({"IMP_WORKERS": "1"}, "workers"),
])
def test_inconsistent_settings_are_refused(env, message):
    with pytest.raises(ValueError, match=message):
        ServerConfig.from_env(env)


def test_empty_token_file_is_refused(tmp_path):
    empty = tmp_path / "tokens"
    empty.write_text("# nothing\n")
    with pytest.raises(ValueError, match="no token"):
        ServerConfig(auth_token_file=str(empty)).auth_tokens()


@pytest.mark.parametrize("listen,loopback", [
    ("127.0.0.1:1", True), ("localhost:1", True), ("[::1]:1", True), ("0.0.0.0:1", False),
    ("10.1.2.3:1", False), (":50051", False)])
def test_loopback_detection(listen, loopback):
    assert is_loopback(listen) is loopback


def test_serve_refuses_a_bad_runtime_setting_in_one_line(monkeypatch, capsys):
    from services.cli.main import main

    monkeypatch.setenv("IMP_JOIN_STATE_BUDGET_BYTES", "lots")
    assert main(["serve", "--listen", "127.0.0.1:0"]) == 2
    err = capsys.readouterr().err
    assert "IMP_JOIN_STATE_BUDGET_BYTES" in err and "Traceback" not in err


def test_metrics_endpoint_setting():
    """`imp serve` serves /metrics on loopback unless told otherwise; 'off' turns it off;
    a ServerConfig built in code (tests, the demo) has none unless given one."""
    from services.server_config import DEFAULT_METRICS_LISTEN

    assert ServerConfig().metrics_listen is None
    assert ServerConfig.from_env({}).metrics_listen == DEFAULT_METRICS_LISTEN
    assert is_loopback(DEFAULT_METRICS_LISTEN)
    env = {"IMP_METRICS_LISTEN": "0.0.0.0:9191"}
    assert ServerConfig.from_env(env).metrics_listen == "0.0.0.0:9191"
    assert ServerConfig.from_env({"IMP_METRICS_LISTEN": "off"}).metrics_listen is None
    assert ServerConfig.from_args(_args("--metrics-listen", "OFF"), env).metrics_listen is None
    assert ServerConfig.from_args(_args("--metrics-listen", "127.0.0.1:0"),
                                  env).metrics_listen == "127.0.0.1:0"


def test_serve_refuses_a_busy_metrics_port(capsys, tmp_path):
    import socket

    from services.cli.main import main

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert main(["serve", "--listen", "127.0.0.1:0", "--root", str(tmp_path),
                     "--metrics-listen", f"127.0.0.1:{port}"]) == 2
    err = capsys.readouterr().err
    assert "IMP_METRICS_LISTEN" in err and f"127.0.0.1:{port}" in err
    assert "Traceback" not in err
