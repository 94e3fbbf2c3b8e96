"""The tests themselves: every check able to fail, every wait bounded by its condition.

Two shapes of test code pass whatever the code under test does, or fail for the wrong
reason, and this module fails on both (issue 51), reading every file under ``tests/``
with ``ast``:

- **an assertion that cannot fail**: ``assert x >= 0`` (or ``x > -1``, ``0 <= x``,
  ``-1 < x``) with nothing else to it, alone, as one operand of an ``and``, or as the
  element of ``all(...)``. Of a count or a duration it holds by construction; check the
  real figure instead (that the pulls happened, a positive duration bounded by the wall
  time around the call, a count against an independent count). A range with an upper
  bound (``0 <= share <= 1``) is a real check and passes. Test modules and conftest
  files only: a support module's ``assert`` is a precondition of the harness, not a
  check of the code.
- **a fixed sleep**: ``time.sleep(...)`` anywhere under ``tests/`` outside the polling
  helpers of ``POLLING_HELPERS``. Wait for the condition instead
  (``waiting.wait_until``, with a deadline); a loop that paces itself waits on the event
  that ends it (``stop.wait(0.05)``). Scripts that tests run in child processes are text
  to this check: a server or generator that is slow or hangs on purpose is what they
  stand for.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest
from waiting import wait_until

TESTS = Path(__file__).resolve().parents[1]

# (file name, function): the only functions under tests/ that may call time.sleep, each a
# loop that asks a condition between its sleeps and gives up at a deadline
POLLING_HELPERS = {
    ("waiting.py", "wait_until"),  # tests/support/waiting.py: the one polling helper
}


def _python_files() -> list[Path]:
    return sorted(p for p in TESTS.rglob("*.py") if "__pycache__" not in p.parts)


def _is_test_module(path: Path) -> bool:
    return path.name.startswith("test_") or path.name == "conftest.py"


def _number(node: ast.expr) -> float | None:
    """The value of a numeric literal (``-1`` included), else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) \
            and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _number(node.operand)
        return None if inner is None else -inner
    return None


def _checks(test: ast.expr) -> list[ast.expr]:
    """The separate checks of an assertion: the operands of ``and``, the element of
    ``all(... for ...)``, recursively."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return [c for value in test.values for c in _checks(value)]
    if isinstance(test, ast.Call) and isinstance(test.func, ast.Name) \
            and test.func.id == "all" and len(test.args) == 1 \
            and isinstance(test.args[0], (ast.GeneratorExp, ast.ListComp, ast.SetComp)):
        return _checks(test.args[0].elt)
    return [test]


def _only_not_negative(check: ast.expr) -> bool:
    """``x >= 0``, ``x > -1``, ``0 <= x`` or ``-1 < x``, with no other bound."""
    if not isinstance(check, ast.Compare) or len(check.ops) != 1:
        return False
    op, left, right = check.ops[0], check.left, check.comparators[0]
    return (isinstance(op, ast.GtE) and _number(right) == 0) \
        or (isinstance(op, ast.Gt) and _number(right) == -1) \
        or (isinstance(op, ast.LtE) and _number(left) == 0) \
        or (isinstance(op, ast.Lt) and _number(left) == -1)


def tautologies(source: str) -> list[tuple[int, str]]:
    """(line, check) of every assertion check that only says a value is not negative."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assert):
            out += [(node.lineno, ast.unparse(c)) for c in _checks(node.test)
                    if _only_not_negative(c)]
    return out


def _sleep_names(tree: ast.Module) -> tuple[set[str], set[str]]:
    """The names the module binds to the ``time`` module and to ``time.sleep``."""
    modules, functions = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules |= {a.asname or a.name for a in node.names if a.name == "time"}
        elif isinstance(node, ast.ImportFrom) and node.module == "time":
            functions |= {a.asname or a.name for a in node.names if a.name == "sleep"}
    return modules, functions


def fixed_sleeps(source: str, file_name: str) -> list[tuple[int, str]]:
    """(line, enclosing function) of every ``time.sleep`` call outside the polling
    helpers."""
    tree = ast.parse(source)
    modules, functions = _sleep_names(tree)
    out = []

    def visit(node: ast.AST, function: str) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            function = node.name
        if isinstance(node, ast.Call):
            f = node.func
            sleeps = (isinstance(f, ast.Attribute) and f.attr == "sleep"
                      and isinstance(f.value, ast.Name) and f.value.id in modules) \
                or (isinstance(f, ast.Name) and f.id in functions)
            if sleeps and (file_name, function) not in POLLING_HELPERS:
                out.append((node.lineno, function))
        for child in ast.iter_child_nodes(node):
            visit(child, function)

    visit(tree, "<module>")
    return out


# -- the suite ---------------------------------------------------------------------------------


def test_the_guard_reads_the_whole_suite():
    files = _python_files()
    names = {p.name for p in files}
    assert {"test_test_hygiene.py", "waiting.py", "conftest.py"} <= names
    assert len([p for p in files if p.parent.name == "integration"]) >= 40
    assert len([p for p in files if p.parent.name == "unit"]) >= 80


def test_no_assertion_only_says_a_value_is_not_negative():
    found = [f"{p.relative_to(TESTS)}:{line}: assert {check}"
             for p in _python_files() if _is_test_module(p)
             for line, check in tautologies(p.read_text())]
    assert not found, "checks that hold whatever the code does (check the real " \
                      "figure):\n" + "\n".join(found)


def test_no_fixed_sleep_outside_the_polling_helpers():
    found = [f"{p.relative_to(TESTS)}:{line} in {function}()"
             for p in _python_files()
             for line, function in fixed_sleeps(p.read_text(), p.name)]
    assert not found, "fixed sleeps (wait for the condition with waiting.wait_until):\n" \
                      + "\n".join(found)


def test_every_polling_helper_exists_and_polls():
    """An entry of the allow-list names a function that still exists and sleeps."""
    by_name = {p.name: p for p in _python_files()}
    for file_name, function in POLLING_HELPERS:
        tree = ast.parse(by_name[file_name].read_text())
        defs = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)
                and n.name == function]
        assert len(defs) == 1, (file_name, function)
        calls = [n for n in ast.walk(defs[0]) if isinstance(n, ast.Call)
                 and isinstance(n.func, ast.Attribute) and n.func.attr == "sleep"]
        assert calls, f"{file_name}:{function} no longer sleeps: drop it from the list"


# -- the guard itself ----------------------------------------------------------------------------


@pytest.mark.parametrize("check", [
    "n >= 0", "seconds >= 0.0", "stats['pulls'] + stats['hits'] >= 0", "skipped > -1",
    "0 <= len(rows)", "-1 < count", "ok and r['state_mib'] >= 0 and r['fm_s'] > 0",
    "all(r['seconds'] >= 0 for r in rows)", "x is not None and (y >= 0 and z)",
])
def test_a_check_that_cannot_fail_is_found(check):
    assert len(tautologies(f"assert {check}, 'why'\n")) == 1


@pytest.mark.parametrize("check", [
    "n > 0", "n >= 1", "0 <= share <= 1", "0 < seconds <= wall", "x >= y", "n == 0",
    "low is None or low >= 0", "any(v >= 0 for v in values)", "-2 < x",
])
def test_a_check_that_can_fail_passes(check):
    assert tautologies(f"assert {check}\n") == []


def test_fixed_sleeps_are_found_by_any_name_and_helpers_are_allowed():
    source = textwrap.dedent("""
        import time
        import time as clock
        from time import sleep, sleep as nap

        def test_a():
            time.sleep(0.1)
            clock.sleep(1)

        def test_b():
            sleep(2)
            nap(3)
            stop.wait(0.05)  # an event's wait is not a fixed sleep

        def wait_until(check):
            while not check():
                time.sleep(0.02)

        SCRIPT = "import time; time.sleep(60)"  # a child process's text
    """)
    assert fixed_sleeps(source, "test_x.py") == [
        (7, "test_a"), (8, "test_a"), (11, "test_b"), (12, "test_b"), (17, "wait_until")]
    assert fixed_sleeps(source, "waiting.py") == [
        (7, "test_a"), (8, "test_a"), (11, "test_b"), (12, "test_b")]


def test_wait_until_returns_the_value_and_fails_at_its_deadline():
    asked = []
    assert wait_until(lambda: asked.append(1) or len(asked) >= 3 and "done") == "done"
    assert len(asked) == 3
    with pytest.raises(AssertionError, match="timed out after 0.05 s waiting for nothing"):
        wait_until(lambda: None, timeout=0.05, what="nothing")
