"""How ``imp`` behaves beside what it computes (issue 28, smaller items): every flag has
help, a closed pipe ends it quietly, ``imp stats`` rounds for reading, ``imp ls`` shows
keys and domains, ``imp query`` says it waits for Spark, progress is line by line in a
pipe, the demo's report alone is on stdout, and ``--tables``' documented default is
the store ``--root`` gives. No server: client commands run against a fake client."""

from __future__ import annotations

import argparse
import datetime as dt
import io
import json
import os
import subprocess
import sys
import textwrap

import pyarrow as pa
import pytest

from imp_core.process.progress import LineProgress, progress_bar
from imp_core.storage.declared import with_declared
from services.cli import commands
from services.cli.main import EXIT_BROKEN_PIPE, build_parser, main
from services.cli.output import SPARK_NOTE, rounded
from services.records import TableRecord

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _options(parser: argparse.ArgumentParser, path: str):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _options(child, f"{path} {name}")
        elif action.option_strings and not isinstance(action, argparse._HelpAction):
            yield path, action


def test_every_flag_has_help():
    flags = list(_options(build_parser(), "imp"))
    assert len(flags) > 100  # the walk reaches the subcommands' flags
    missing = [f"{path} {'/'.join(a.option_strings)}" for path, a in flags
               if not (a.help or "").strip() or a.help == argparse.SUPPRESS]
    assert not missing, "flags without help: " + ", ".join(missing)


# -- closed pipes -------------------------------------------------------------------------------


def _imp(*args: str) -> list[str]:
    return [sys.executable, "-m", "services.cli.main", *args]


def test_imp_piped_into_head_ends_quietly():
    done = subprocess.run(f"{' '.join(_imp('workloads'))} | head -1", shell=True,
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.stdout.startswith("tpch22: ") and done.stdout.count("\n") == 1
    assert done.stderr == "", done.stderr


@pytest.mark.parametrize("args", [("workloads",), ("workloads", "--json")])
def test_a_reader_gone_before_the_first_line_ends_it_quietly(args):
    proc = subprocess.Popen(_imp(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            cwd=ROOT)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    proc.wait(timeout=120)
    assert err == "" and proc.returncode == EXIT_BROKEN_PIPE, err


class _ClosedPipe(io.StringIO):
    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    def fileno(self) -> int:
        raise io.UnsupportedOperation


class FakeClient:
    """What the client commands call, answered from memory."""

    def __init__(self, tables: list[TableRecord] | None = None):
        self._tables = tables or []

    def queries(self) -> list:
        return []

    def tables(self) -> list[TableRecord]:
        return self._tables

    def stats(self) -> dict:
        return {"coordinator": {"maintain_ms_p50": 11.080491000029724, "queries": 3,
                                "share": 0.000123456789, "per_query": {"q": 2.71828}},
                "service": {"alive": True, "calls": [1.23456, 7]}}

    def run_query(self, **kwargs):
        raise ValueError("no Spark in this test")

    def close(self) -> None:
        pass


@pytest.fixture
def fake(monkeypatch):
    client = FakeClient()
    monkeypatch.setattr(commands, "_client", lambda args: client)
    return client


def test_a_client_command_on_a_closed_pipe_ends_quietly(fake, monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdout", _ClosedPipe())
    assert main(["stats"]) == EXIT_BROKEN_PIPE
    assert capsys.readouterr().err == ""


# -- output ----------------------------------------------------------------------------------


def test_stats_are_rounded_for_reading_and_whole_in_json(fake, capsys):
    assert main(["stats"]) == 0
    out = capsys.readouterr().out
    assert "  maintain_ms_p50: 11.08\n" in out and "  share: 0.000123\n" in out
    assert '  per_query: {"q": 2.72}' in out and "  calls: [1.23, 7]" in out
    assert "  queries: 3\n" in out and "  alive: True\n" in out
    assert main(["stats", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["coordinator"]["maintain_ms_p50"] == 11.080491000029724
    assert rounded(1234.5678) == 1234.57 and rounded(float("inf")) == float("inf")


def test_ls_shows_each_tables_key_and_domains(fake, capsys):
    schema = pa.schema([("id", pa.int64()), ("qty", pa.int32()), ("day", pa.date32())])
    fake._tables = [
        TableRecord("sales", 3, with_declared(schema, ("id",), {
            "qty": (0, None), "day": (dt.date(2020, 1, 1), dt.date(2030, 12, 31))})),
        TableRecord("bag", 0, with_declared(schema, None, {})),
        TableRecord("old", 1, schema),  # a server that sends no declarations
    ]
    assert main(["ls"]) == 0
    out = capsys.readouterr().out
    assert "key (id); domains day [2020-01-01, 2030-12-31], qty [0, +inf)" in out
    assert "key none (row ids); domains -" in out
    assert out.count("key ") == 2
    assert main(["ls", "--json"]) == 0
    tables = {t["name"]: t for t in json.loads(capsys.readouterr().out)["tables"]}
    assert tables["sales"]["key"] == ["id"]
    assert tables["sales"]["domains"] == {"qty": [0, None],
                                          "day": ["2020-01-01", "2030-12-31"]}
    assert tables["bag"]["key"] is None and "key" not in tables["old"]


@pytest.mark.grpc
def test_ls_over_grpc_shows_what_the_store_declares(tmp_path, capsys):
    from imp_actors.coordinator import Coordinator
    from imp_actors.runtime_config import RuntimeConfig
    from imp_core.storage import DeltaStore
    from services.server import SketchServer
    from services.server_config import ServerConfig

    store = DeltaStore(tmp_path)
    store.create_table("t", pa.table({"id": [1, 2], "qty": [3, 4]}), key=("id",),
                       domains={"qty": (0, 10)})
    store.create_table("bag", pa.table({"x": [1.5]}))
    config = RuntimeConfig(root=str(tmp_path), backend="local", warm_actors=0)
    with Coordinator(config, store=store) as coordinator:  # local workers: no Ray, no Spark
        server = SketchServer(ServerConfig(listen="127.0.0.1:0"), coordinator).start()
        try:
            assert main(["ls", "--target", server.address]) == 0
            out = capsys.readouterr().out
            assert main(["ls", "--target", server.address, "--json"]) == 0
            tables = {t["name"]: t for t in json.loads(capsys.readouterr().out)["tables"]}
        finally:
            server.stop(0)
    assert "key (id); domains qty [0, 10]" in out and "key none (row ids); domains -" in out
    assert tables["t"]["key"] == ["id"] and tables["t"]["domains"] == {"qty": [0, 10]}
    assert tables["bag"]["key"] is None and tables["bag"]["columns"] == {"x": "double"}


def test_query_says_on_stderr_that_spark_may_take_a_while(fake, capsys):
    assert main(["query", "--sql", "SELECT 1"]) == 2
    out = capsys.readouterr()
    assert out.err.startswith(SPARK_NOTE) and SPARK_NOTE not in out.out
    assert main(["query", "--sql", "SELECT 1", "--json"]) == 2
    out = capsys.readouterr()
    assert SPARK_NOTE not in out.err and out.out == ""


# -- progress and the demo's stdout ----------------------------------------------------------------


def test_progress_in_a_pipe_is_one_line_per_step():
    sink = io.StringIO()
    bar = progress_bar(100, "TPC-H SF 0.01", file=sink)
    assert isinstance(bar, LineProgress)
    with bar:
        for table, rows in (("nation", 25), ("orders", 25), ("lineitem", 50)):
            bar.set_postfix_str(table)
            bar.update(rows)
    assert "\r" not in sink.getvalue()
    assert sink.getvalue().splitlines() == [
        "TPC-H SF 0.01: 25 of 100 rows (25%), nation",
        "TPC-H SF 0.01: 50 of 100 rows (50%), orders",
        "TPC-H SF 0.01: 100 of 100 rows (100%), lineitem"]
    sink = io.StringIO()
    with LineProgress(1000, "writing t", file=sink, every=0.1) as bar:
        for _ in range(100):
            bar.update(10)
    assert len(sink.getvalue().splitlines()) == 10  # a line per tenth, not per batch


def test_the_demo_report_alone_is_on_stdout():
    script = textwrap.dedent("""
        import os, sys
        import services.demo as demo

        def fake_run(*args):
            demo._say("report line")
            os.write(1, b"WARN from the JVM\\n")  # what Spark and Ray do
            print("a library's print")
            return 0

        demo._run_demo = fake_run
        sys.exit(demo.run_demo())
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "report line\n"
    assert "WARN from the JVM" in done.stderr and "a library's print" in done.stderr


# -- --tables -----------------------------------------------------------------------------------


def test_the_documented_tables_default_is_the_same_store(tmp_path, capsys):
    from services.server_config import ServerConfig

    parser = build_parser()
    root = str(tmp_path / "svc")
    plain = ServerConfig.from_args(parser.parse_args(["serve", "--root", root]), env={})
    given = ServerConfig.from_args(parser.parse_args(["serve", "--root", root,
                                                      "--tables", root]), env={})
    assert plain.runtime_config().tables_dir == given.runtime_config().tables_dir == root
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "(default ROOT itself)" in help_text and "ROOT/tables" not in help_text
    with open(os.path.join(ROOT, "docs", "operations.md")) as doc:
        assert "| `IMP_TABLES` | `IMP_ROOT` |" in doc.read()
