"""The table catalog: table name -> where its Delta table lives and what it declares.

Invariants:
- Names are lower-case identifiers (``[a-z_][a-z0-9_]*``); lookups lower-case first.
- ``TableEntry.location`` is an absolute local path or a URI delta-rs understands. In
  ``catalog.json`` a location inside the store root is kept relative to the root, so a
  moved store still resolves.
- ``key`` is ``None`` (the table has a hidden ``__rid`` row id instead) or a non-empty
  tuple of columns; ``sketch_columns`` are the columns the table is clustered (sorted)
  on, possibly none. ``domains`` maps a column to a declared ``(low, high)`` bound pair
  whose values are ``None``, ``int``, ``float``, ``str``, ``Decimal``, ``date`` or
  ``datetime`` (the same form as ``imp_core.workloads.schemas.TableInfo.domains``).
- ``catalog.json`` is only ever replaced whole (temp file + ``os.replace``): a reader
  sees the previous or the next catalog, never a torn one. Another ``TableCatalog`` on
  the same file sees changes at its next lookup (the file's stamp is re-checked).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from imp_core.errors import TableExistsError, UnknownTableError

CATALOG_FILE = "catalog.json"
FORMAT_VERSION = 1
_NAME = re.compile(r"[a-z_][a-z0-9_]*")
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")

Bound = Any  # None | int | float | str | Decimal | date | datetime


def normalize_name(name: str) -> str:
    """The catalog form of a table name; raises ValueError for a non-identifier."""
    low = name.lower()
    if not _NAME.fullmatch(low):
        raise ValueError(f"table name {name!r} is not an identifier ([a-z_][a-z0-9_]*)")
    return low


def is_uri(location: str) -> bool:
    return bool(_SCHEME.match(location))


@dataclass(frozen=True)
class TableEntry:
    """One table: name, Delta location, unique key (or None), domains, cluster columns."""

    name: str
    location: str
    key: tuple[str, ...] | None
    domains: Mapping[str, tuple[Bound, Bound]] = field(default_factory=dict)
    sketch_columns: tuple[str, ...] = ()
    # rows laid out in Z-order of ``sketch_columns`` (``imp_core.storage.layout``)
    # rather than sorted on them in turn
    zorder: bool = False

    def __post_init__(self) -> None:
        if self.name != normalize_name(self.name):
            raise ValueError(f"table name {self.name!r} must be lower case")
        if self.key is not None and not self.key:
            raise ValueError(f"table {self.name}: key must be None or non-empty")

    @property
    def has_row_ids(self) -> bool:
        """Keyless tables carry the hidden ``__rid`` column."""
        return self.key is None


def encode_bound(value: Bound) -> Any:
    # bool is an int subclass; a bool bound is a mistake, not a number
    if value is None:
        return None
    if isinstance(value, bool):
        raise TypeError(f"unsupported domain bound {value!r}")
    if isinstance(value, int):
        return {"int": value}
    if isinstance(value, float):
        return {"float": value}
    if isinstance(value, Decimal):
        return {"decimal": str(value)}
    if isinstance(value, dt.datetime):  # before date: datetime is a date subclass
        return {"datetime": value.isoformat()}
    if isinstance(value, dt.date):
        return {"date": value.isoformat()}
    if isinstance(value, str):
        return {"str": value}
    raise TypeError(f"unsupported domain bound {value!r} of type {type(value).__name__}")


def decode_bound(value: Any) -> Bound:
    if value is None:
        return None
    ((tag, raw),) = value.items()
    decoders = {
        "int": int,
        "float": float,
        "decimal": Decimal,
        "datetime": dt.datetime.fromisoformat,
        "date": dt.date.fromisoformat,
        "str": str,
    }
    return decoders[tag](raw)


class TableCatalog:
    """Table entries persisted in ``<root>/catalog.json``."""

    def __init__(self, root: str | Path):
        self.root = Path(root).resolve()
        self.path = self.root / CATALOG_FILE
        self._entries: dict[str, TableEntry] = {}
        self._stamp: tuple[int, int] | None = None
        self._reload()

    # --- lookups -----------------------------------------------------------------

    def names(self) -> list[str]:
        self._reload()
        return sorted(self._entries)

    def get(self, name: str) -> TableEntry:
        self._reload()
        entry = self._entries.get(name.lower())
        if entry is None:
            known = ", ".join(sorted(self._entries)) or "none"
            raise UnknownTableError(f"unknown table {name!r} (known tables: {known})")
        return entry

    def __contains__(self, name: object) -> bool:
        self._reload()
        return isinstance(name, str) and name.lower() in self._entries

    # --- changes -----------------------------------------------------------------

    def check(self, entry: TableEntry) -> None:
        """Raise (TableExistsError, TypeError) if ``add(entry)`` would; changes nothing."""
        if entry.name in self:
            raise TableExistsError(f"table {entry.name!r} already exists")
        self._entry_to_json(entry)

    def add(self, entry: TableEntry) -> None:
        self._reload()
        if entry.name in self._entries:
            raise TableExistsError(f"table {entry.name!r} already exists")
        self._save({**self._entries, entry.name: entry})

    def replace(self, entry: TableEntry) -> None:
        """Replace the entry of an existing table (e.g. its layout)."""
        self._save({**self._entries, self.get(entry.name).name: entry})

    def remove(self, name: str) -> TableEntry:
        entry = self.get(name)
        self._save({k: v for k, v in self._entries.items() if k != entry.name})
        return entry

    # --- persistence ---------------------------------------------------------------

    def _file_stamp(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        return (st.st_mtime_ns, st.st_ino)

    def _reload(self) -> None:
        stamp = self._file_stamp()
        if stamp == self._stamp:
            return
        entries: dict[str, TableEntry] = {}
        if stamp is not None:
            doc = json.loads(self.path.read_text())
            if doc.get("format") != FORMAT_VERSION:
                raise ValueError(f"{self.path}: unknown catalog format {doc.get('format')!r}")
            for name, raw in doc["tables"].items():
                entries[name] = self._entry_from_json(name, raw)
        self._entries = entries
        self._stamp = stamp

    def _save(self, entries: dict[str, TableEntry]) -> None:
        doc = {
            "format": FORMAT_VERSION,
            "tables": {name: self._entry_to_json(e) for name, e in sorted(entries.items())},
        }
        self.root.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".catalog-", suffix=".json", dir=self.root)
        try:
            with os.fdopen(fd, "w") as out:
                json.dump(doc, out, indent=2)
                out.write("\n")
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        self._entries = dict(entries)
        self._stamp = self._file_stamp()

    def _entry_to_json(self, entry: TableEntry) -> dict[str, Any]:
        location = entry.location
        if not is_uri(location):
            path = Path(location)
            if path.is_relative_to(self.root):
                location = path.relative_to(self.root).as_posix()
        return {
            "location": location,
            "key": None if entry.key is None else list(entry.key),
            "domains": {
                col: [encode_bound(low), encode_bound(high)]
                for col, (low, high) in entry.domains.items()
            },
            "sketch_columns": list(entry.sketch_columns),
            **({"zorder": True} if entry.zorder else {}),
        }

    def _entry_from_json(self, name: str, raw: Mapping[str, Any]) -> TableEntry:
        location = raw["location"]
        if not is_uri(location) and not Path(location).is_absolute():
            location = str(self.root / location)
        return TableEntry(
            name=name,
            location=location,
            key=None if raw["key"] is None else tuple(raw["key"]),
            domains={
                col: (decode_bound(low), decode_bound(high))
                for col, (low, high) in raw["domains"].items()
            },
            sketch_columns=tuple(raw["sketch_columns"]),
            zorder=bool(raw.get("zorder", False)),
        )
