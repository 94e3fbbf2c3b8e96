"""Aggregate functions, one module per function, found through ``registry``.

Each module declares what is specific to its functions (``base.AggregateFunction``): the
result type, the per-group state it needs (a non-NULL count, exact power sums, or an
ordered multiset of values), how that state turns into the output value (the same code
for the incremental operator and the reference evaluator, so both agree bit for bit),
its Spark SQL and its monotonicity for the safety rules. Consumers (the plan's types,
the SQL binder, ``AggregateOp``, the reference evaluator, the Spark compiler, the
estimate and the safety rules) look functions up in ``registry`` by name.

Layering: the plan's nodes and types consult this package, so it lies inside
``imp_core.plan`` and imports only ``imp_core.plan.decimal64`` (a leaf) from imp_core
(import-linter contract "aggregates-are-leaves").
"""
