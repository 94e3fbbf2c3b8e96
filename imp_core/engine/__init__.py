"""The incremental engine: weighted annotated deltas flowing through stateful operators.

It knows nothing of SQL: it consumes plans (``imp_core.plan``) and weighted batches.
"""
