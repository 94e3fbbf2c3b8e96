"""Standard output that holds one JSON document and nothing else (``--json``).

Spark's JVM, Ray's workers and their log monitors, and libraries write to file
descriptor 1 or to ``sys.stdout`` whenever they like; piped into a JSON parser, one such
line breaks it. While ``json_only_stdout()`` is active, descriptor 1 and ``sys.stdout``
both point at standard error, and the document is written to ``json_out()``: the
stream standard output was when the block began. ``imp demo`` uses it the same way
for its report, which must not be interleaved with Ray's and Spark's messages.
"""

from __future__ import annotations

import io
import os
import sys
from contextlib import contextmanager
from typing import Iterator, TextIO

_json_stream: TextIO | None = None


def json_out() -> TextIO:
    """Where a JSON document goes: the real standard output inside
    ``json_only_stdout()``, else ``sys.stdout``."""
    return _json_stream if _json_stream is not None else sys.stdout


def _fd(stream: TextIO) -> int | None:
    try:
        return stream.fileno()
    except (AttributeError, OSError, io.UnsupportedOperation, ValueError):
        return None


@contextmanager
def json_only_stdout() -> Iterator[TextIO]:
    """Everything but ``json_out()`` goes to standard error for the block's duration."""
    global _json_stream
    if _json_stream is not None:  # nested: the outer block already routes
        yield _json_stream
        return
    real = sys.stdout
    real.flush()
    sys.stderr.flush()
    saved = dedicated = None
    try:
        saved = os.dup(1)
        if _fd(real) == 1:  # the document needs its own handle on the real stdout
            dedicated = os.fdopen(os.dup(saved), "w", encoding="utf-8", buffering=1)
        os.dup2(2, 1)
    except OSError:  # no descriptors to juggle (an embedded interpreter): Python only
        saved = None
    _json_stream = dedicated or real
    sys.stdout = sys.stderr
    try:
        yield _json_stream
    finally:
        try:
            _json_stream.flush()
        finally:
            _json_stream = None
            sys.stdout = real
            if saved is not None:
                sys.stderr.flush()
                os.dup2(saved, 1)
                os.close(saved)
            if dedicated is not None:
                dedicated.close()
