"""``--json`` leaves nothing but the JSON document on standard output (issue 13, P9):
writes of libraries to ``sys.stdout``, of native code to descriptor 1 and of child
processes (Ray workers, Spark's JVM) go to standard error instead."""

from __future__ import annotations

import json
import subprocess
import sys

SCRIPT = """
import os, subprocess, sys
from imp_core.process.stdout import json_only_stdout, json_out
print("before")
with json_only_stdout():
    print("library chatter")
    sys.stdout.flush()
    os.write(1, b"native chatter\\n")
    subprocess.run([sys.executable, "-c", "print('child chatter')"], check=True)
    print(json.dumps({"ok": True}), file=json_out())
print("after")
"""


def _run(code: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "import json\n" + code, *args],
                          capture_output=True, text=True, timeout=120, check=True)


def test_every_other_writer_goes_to_stderr_while_json_is_printed():
    run = _run(SCRIPT)
    assert run.stdout == 'before\n{"ok": true}\nafter\n'
    for chatter in ("library chatter", "native chatter", "child chatter"):
        assert chatter in run.stderr


def test_a_cli_json_command_prints_one_parseable_document(tmp_path):
    # ``imp data ls --json`` through the real entry point, with a library that prints
    code = ("import builtins\n"
            "from services.cli.main import main\n"
            "import imp_core.storage as s\n"
            "orig = s.DeltaStore.tables\n"
            "def chatty(self):\n"
            "    print('a warning printed by a library')\n"
            "    return orig(self)\n"
            "s.DeltaStore.tables = chatty\n"
            "raise SystemExit(main(['data', 'ls', '--root', sys.argv[1], '--json']))\n")
    run = _run("import sys\n" + code, str(tmp_path))
    doc = json.loads(run.stdout)
    assert doc["tables"] == [] and "a warning printed by a library" in run.stderr
