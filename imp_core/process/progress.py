"""Progress on standard error: a tqdm bar on a terminal, one line per step elsewhere.

tqdm redraws its bar with carriage returns; written to a pipe or a log file those
redraws pile up into one long ``\\r``-joined line. ``progress_bar`` gives tqdm's bar
when the stream is a terminal and a ``LineProgress`` otherwise, which prints one whole
line per step. Both take ``update(n)``, ``set_postfix_str(text)`` and ``close()`` and
are context managers.

Invariants: ``LineProgress`` never writes a carriage return; it prints at most one line
per ``update`` (fewer when ``every`` asks for a minimum step) and ends with a line for
the last step when the last update was not printed.
"""

from __future__ import annotations

import sys
from typing import Any, TextIO


class LineProgress:
    """tqdm's progress interface as plain lines: ``desc: done of total unit (pct%)``."""

    def __init__(self, total: int, desc: str, unit: str = "rows", file: TextIO | None = None,
                 every: float = 0.0):
        self.total, self.desc, self.unit = total, desc, unit
        self.file = file if file is not None else sys.stderr
        self.every = every  # least share of the total between two printed lines
        self.done = 0
        self.postfix = ""
        self._printed_at: int | None = None
        self._next = every * total  # the count at which the next line is due

    def update(self, n: int = 1) -> None:
        self.done += n
        if self.done >= self._next or self.done >= self.total:
            self._print()
            self._next = self.done + self.every * self.total

    def set_postfix_str(self, text: str, refresh: bool = True) -> None:
        self.postfix = text

    def close(self) -> None:
        if self._printed_at != self.done:
            self._print()

    def _print(self) -> None:
        share = f" ({100 * self.done / self.total:.0f}%)" if self.total > 0 else ""
        total = f" of {self.total:,}" if self.total > 0 else ""
        postfix = f", {self.postfix}" if self.postfix else ""
        print(f"{self.desc}: {self.done:,}{total} {self.unit}{share}{postfix}",
              file=self.file, flush=True)
        self._printed_at = self.done

    def __enter__(self) -> LineProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError, OSError):  # closed or not a real stream
        return False


def progress_bar(total: int, desc: str, unit: str = "rows", file: TextIO | None = None,
                 every: float = 0.0) -> Any:
    """A tqdm bar on ``file`` (default stderr) if it is a terminal, else a
    ``LineProgress`` (``every``: least share of the total between two lines)."""
    file = file if file is not None else sys.stderr
    if not is_terminal(file):
        return LineProgress(total, desc, unit, file, every)
    from tqdm import tqdm

    return tqdm(total=total, unit=unit, unit_scale=True, desc=desc, file=file)
