"""Errors of the versioned table store that ``imp_core.errors`` does not (yet) define.

Each derives from ``ImpError`` and carries a ``code`` like the others, so the service
layer maps them without knowing the storage package.
"""

from __future__ import annotations

from imp_core.errors import ImpError


class TableExistsError(ImpError):
    """A table of that name (or a Delta table at that location) already exists."""

    code = "ALREADY_EXISTS"


class VersionError(ImpError):
    """A table version (or version range) outside what the table's log holds."""

    code = "OUT_OF_RANGE"


class UnsupportedTableError(ImpError):
    """A Delta table uses a feature the store cannot read as plain Parquet files."""

    code = "FAILED_PRECONDITION"
