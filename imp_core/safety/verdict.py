"""The verdict of the safety check, and the refusal its analysis raises.

A ``SafetyVerdict`` always names a table the query reads and a column of that table, both
spelled as the plan (or the declared columns) spell them; ``reason`` says why the attribute
is safe ("safe: ...") or which operator makes it unsafe. ``Unsafe`` never leaves the
package: ``check_attribute`` turns it into an unsafe verdict.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SafetyVerdict:
    """Whether a sketch on ``table.column`` is safe for a query, and why (or why not)."""

    table: str
    column: str
    safe: bool
    reason: str

    @property
    def attribute(self) -> str:
        return f"{self.table}.{self.column}"



class Unsafe(Exception):
    """Raised by a rule that fails; ``reason`` becomes the unsafe verdict's reason."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason

