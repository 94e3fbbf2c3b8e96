"""IMP: incremental maintenance of provenance sketches.

The engine (``imp_core.engine``) knows nothing of SQL; ``imp_core.sql`` turns SQL into the
immutable plan nodes of ``imp_core.plan``; ``imp_core.embedded.api`` is the small public
entry point.
"""

__version__ = "0.1.0"
