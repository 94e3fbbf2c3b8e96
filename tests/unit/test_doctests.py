"""The examples in docstrings (``>>>``) run as tests, in every package of the project,
so an example that no longer holds fails ``make test`` instead of misleading a reader."""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("imp_core", "imp_actors", "services")


def _modules_with_examples() -> list[str]:
    out = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "_generated" in path.parts or ">>> " not in path.read_text():
                continue
            parts = path.relative_to(ROOT).with_suffix("").parts
            out.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return out


@pytest.mark.parametrize("name", _modules_with_examples())
def test_docstring_examples_hold(name):
    module = importlib.import_module(name)
    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    result = doctest.testmod(module, optionflags=flags)  # "+SKIP" ones are not attempted
    assert result.failed == 0, f"{name}: {result.failed} of {result.attempted} examples fail"
