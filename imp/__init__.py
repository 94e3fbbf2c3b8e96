"""IMP: incremental maintenance of provenance sketches.

The engine (``imp.engine``) knows nothing of SQL; ``imp.sql`` turns SQL into the
immutable plan nodes of ``imp.plan``; ``imp.api`` is the small public entry point.
"""

__version__ = "0.1.0"
