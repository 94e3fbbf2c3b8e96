"""Idempotent commits: the key of the call that made a Delta commit rides in that commit.

A client names each logical call that changes a table with an idempotency key and sends
the same key again on every retry. The commit that applies the call carries two things,
written atomically with the data by Delta's own log:

- a *transaction* action (``txn``) with application id ``imp.call:<key>`` and as its
  version the first 60 bits of the request's digest: delta-rs refuses a commit whose
  ``txn`` names an application id that a concurrent commit (one it did not read) also
  named, so two servers that both believe they own the store cannot both apply one key;
- the commit's ``commitInfo``: the key, the request digest and what the call did
  (method, rows inserted and deleted), which a retry returns as the first outcome.

Invariants: before committing a call with a key, the writer looks the key up in the
latest snapshot (``applied_call``) and commits only when it is absent, so a key is
applied at most once; a key found with another digest is a misuse (the same key for a
different request), never silently taken for the first request. Delta expires ``txn``
actions older than the table's ``delta.setTransactionRetentionDuration`` (the
``TABLE_CONFIGURATION`` of every table the store creates: ``RETENTION``), so the keys
a table remembers stay bounded; a retry later than that is a new call.
"""

from __future__ import annotations

import hashlib
import re
import time
from dataclasses import dataclass
from typing import Any

from deltalake import CommitProperties, DeltaTable, Transaction

from imp_core.errors import IdempotencyKeyError

APP_PREFIX = "imp.call:"
MAX_KEY_CHARS = 128
_KEY = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")
# how long a table remembers the keys of the calls that changed it (Delta's txn retention)
RETENTION_SECONDS = 24 * 3600
RETENTION = f"interval {RETENTION_SECONDS} seconds"
# commitInfo fields (custom metadata of the commit)
KEY_FIELD, DIGEST_FIELD, METHOD_FIELD = "imp.call_key", "imp.call_digest", "imp.call_method"
INSERTED_FIELD, DELETED_FIELD = "imp.inserted", "imp.deleted"
# commits read back per step while looking for a key's commit in the table's history
_HISTORY_STEP = 200


def check_key(key: str) -> str:
    """``key`` if it is a valid idempotency key, else ``IdempotencyKeyError``."""
    if not _KEY.match(key):
        shown = key if len(key) <= 40 else key[:40] + "..."
        raise IdempotencyKeyError(
            f"idempotency key {shown!r} is not 1 to {MAX_KEY_CHARS} characters of letters, "
            "digits and '_.:-'")
    return key


def request_digest(*parts: bytes | str) -> str:
    """A digest naming a request's content (hex, 32 characters)."""
    h = hashlib.blake2b(digest_size=16)
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


@dataclass(frozen=True)
class CallTag:
    """The idempotency key of a call and the digest of its request."""

    key: str
    digest: str
    method: str = "ApplyUpdate"

    def __post_init__(self) -> None:
        check_key(self.key)

    @property
    def app_id(self) -> str:
        return APP_PREFIX + self.key

    @property
    def txn_version(self) -> int:
        return digest_version(self.digest)

    def commit_properties(self, inserted: int, deleted: int) -> CommitProperties:
        """What a commit applying this call carries (module docstring)."""
        return CommitProperties(
            custom_metadata={KEY_FIELD: self.key, DIGEST_FIELD: self.digest,
                             METHOD_FIELD: self.method, INSERTED_FIELD: inserted,
                             DELETED_FIELD: deleted},
            app_transactions=[Transaction(self.app_id, self.txn_version,
                                          int(time.time() * 1000))])


def digest_version(digest: str) -> int:
    """A digest as a Delta transaction version (a non-negative 64-bit integer)."""
    return int(digest[:15], 16) if digest else 0


@dataclass(frozen=True)
class AppliedCall:
    """A call found committed: the table version it made and what it did (``version``
    -1 and no counts when its commit is no longer in the log's history)."""

    key: str
    txn_version: int  # the request digest's 60 bits (``digest_version``)
    method: str
    table: str
    version: int
    inserted: int
    deleted: int
    committed_at: float

    def same_request(self, tag: CallTag) -> bool:
        return self.txn_version == tag.txn_version

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "method": self.method, "table": self.table,
                "version": self.version, "inserted": self.inserted,
                "deleted": self.deleted, "committed_at": self.committed_at}


def applied_call(table: DeltaTable, name: str, key: str) -> AppliedCall | None:
    """The call ``key`` as committed in ``table`` (its latest snapshot), or None."""
    found = table.transaction_version(APP_PREFIX + key)
    if found is None:
        return None
    for info in _history(table):
        if info.get(KEY_FIELD) == key:
            return AppliedCall(
                key, found, str(info.get(METHOD_FIELD, "ApplyUpdate")),
                name, int(info.get("version", -1)), int(info.get(INSERTED_FIELD, 0)),
                int(info.get(DELETED_FIELD, 0)), float(info.get("timestamp", 0)) / 1000)
    # the txn is kept but its commit is gone from the history (log clean-up): applied,
    # outcome unknown; the request is still checked through the txn's version
    return AppliedCall(key, found, "ApplyUpdate", name, -1, 0, 0, 0.0)


def _history(table: DeltaTable):
    """commitInfo dicts of ``table``, newest first, read a step at a time."""
    limit = _HISTORY_STEP
    seen = 0
    while True:
        batch = table.history(limit)
        yield from batch[seen:]
        if len(batch) < limit:
            return
        seen, limit = len(batch), limit * 4


def is_concurrent_call(error: Exception) -> bool:
    """Whether a failed commit lost to a concurrent commit (possibly of the same key)."""
    text = str(error).lower()
    return "concurrent" in text
