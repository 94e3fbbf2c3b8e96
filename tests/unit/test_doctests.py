"""The examples in docstrings (``>>>``) run as tests, in every package of the project,
so an example that no longer holds fails ``make test`` instead of misleading a reader.

A module with examples must run them: every ``>>>`` line of its source is an example
doctest collects (none lost to a docstring it cannot reach), and at least one of them
runs, unless the module is in ``NOT_RUN`` (all of its examples marked ``+SKIP``, with the
reason there)."""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("imp_core", "imp_actors", "services")
# modules whose examples only illustrate (each marked "+SKIP"), and why
NOT_RUN = {
    "imp_core.storage.delta_store": "DeltaStore's examples need a folder on disk",
}


def _modules_with_examples() -> list[str]:
    out = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "_generated" in path.parts or ">>> " not in path.read_text():
                continue
            parts = path.relative_to(ROOT).with_suffix("").parts
            out.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return out


def _prompts(module) -> int:
    """The ``>>>`` lines of the module's source: the examples it holds."""
    source = Path(module.__file__).read_text()
    return sum(1 for line in source.splitlines() if line.lstrip().startswith(">>> "))


def test_the_project_has_modules_with_examples():
    found = _modules_with_examples()
    assert len(found) >= 10, found
    assert set(NOT_RUN) <= set(found), "NOT_RUN names a module without examples"


@pytest.mark.parametrize("name", _modules_with_examples())
def test_docstring_examples_hold(name):
    module = importlib.import_module(name)
    examples = [e for t in doctest.DocTestFinder().find(module) for e in t.examples]
    skipped = sum(1 for e in examples if e.options.get(doctest.SKIP))
    assert len(examples) == _prompts(module), \
        f"{name}: doctest finds {len(examples)} of the {_prompts(module)} examples"
    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    result = doctest.testmod(module, optionflags=flags)  # "+SKIP" ones are not attempted
    assert result.failed == 0, f"{name}: {result.failed} of {result.attempted} examples fail"
    assert result.attempted == len(examples) - skipped
    if name in NOT_RUN:
        assert result.attempted == 0, f"{name} runs its examples now: drop it from NOT_RUN"
    else:
        assert result.attempted > 0, f"{name}: none of its {len(examples)} examples ran"
