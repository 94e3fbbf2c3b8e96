"""CLI mistakes end in one line on stderr and exit code 2 (issue 13, smaller items),
before anything starts: no traceback, no Ray, no Spark. No server is needed: each is
refused before the first call."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from services.cli.commands import token_from_file
from services.cli.main import main

UNUSED = "127.0.0.1:9"  # never reached: every case is refused before a call


def _refused(capsys, *argv: str) -> str:
    code = main(list(argv))
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err and err.startswith("error: ") and err.count("\n") == 1
    return err


def test_unknown_workload_is_one_line(capsys):
    err = _refused(capsys, "register", "x", "--workload", "nosuch", "--target", UNUSED)
    assert "unknown workload query 'nosuch'" in err and "`imp workloads` lists them" in err


def test_serve_on_a_busy_port(capsys, tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        err = _refused(capsys, "serve", "--listen", f"127.0.0.1:{port}",
                       "--root", str(tmp_path))
    assert f"cannot listen on 127.0.0.1:{port}" in err


@pytest.mark.parametrize("listen,message", [
    ("nosuchhost.invalid:50051", "does not resolve"),
    ("127.0.0.1:http", "expected host:port"),
    ("127.0.0.1:70000", "expected host:port"),
])
def test_serve_on_a_bad_address(capsys, tmp_path, listen, message):
    assert message in _refused(capsys, "serve", "--listen", listen, "--root", str(tmp_path))


def test_serve_with_a_missing_token_file(capsys, tmp_path):
    err = _refused(capsys, "serve", "--listen", "127.0.0.1:0", "--root", str(tmp_path),
                   "--auth-token-file", str(tmp_path / "nosuch"))
    assert "nosuch" in err


@pytest.mark.parametrize("args", [["--count", "0"], ["--count", "-1"]])
def test_watch_count_must_be_positive(capsys, args):
    with pytest.raises(SystemExit) as exit_:
        main(["watch", "q", *args, "--target", UNUSED])
    assert exit_.value.code == 2 and "expected an integer >= 1" in capsys.readouterr().err


@pytest.mark.parametrize("delay", ["nan", "inf", "-1"])
def test_max_delay_must_be_finite(capsys, delay):
    with pytest.raises(SystemExit) as exit_:
        main(["register", "q", "--sql", "SELECT 1", "--eager", "--max-delay", delay,
              "--target", UNUSED])
    assert exit_.value.code == 2 and "expected seconds >= 0" in capsys.readouterr().err


def test_log_level_has_help_and_choices(capsys):
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    out = capsys.readouterr().out
    assert "--log-level LEVEL" in out and "IMP_LOG_LEVEL" in out
    with pytest.raises(SystemExit) as exit_:
        main(["serve", "--log-level", "chatty"])
    assert exit_.value.code == 2


def test_token_file_skips_comments_and_blank_lines():
    assert token_from_file("# the token for prod\n\n  s3cret  \nother\n", "f") == "s3cret"
    with pytest.raises(ValueError, match="no token"):
        token_from_file("# only a comment\n\n", "f")


def test_a_closed_pipe_ends_quietly(tmp_path):
    # ``imp data ls | head -0``: the reader is gone before the first write
    proc = subprocess.Popen([sys.executable, "-m", "services.cli.main", "data", "ls",
                             "--root", str(tmp_path)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    proc.wait(timeout=120)
    assert "BrokenPipe" not in err and "Traceback" not in err, err
    assert proc.returncode == 141  # as if SIGPIPE had ended it, quietly


def test_serve_on_a_store_in_use(capsys, tmp_path):
    from imp_actors.coordinator import Coordinator
    from imp_actors.runtime_config import RuntimeConfig

    config = RuntimeConfig(root=str(tmp_path), backend="local", warm_actors=0)
    with Coordinator(config):
        err = _refused(capsys, "serve", "--listen", "127.0.0.1:0", "--root", str(tmp_path),
                       "--backend", "local")
    assert "one coordinator per store" in err
