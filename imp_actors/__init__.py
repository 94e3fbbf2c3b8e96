"""Ray actors of the IMP service: one actor per registered query, holding that query's
incremental operator state and sketch, maintained from the table deltas it is sent.

Nothing lives here yet; the actors are built in a later issue on top of ``imp_core.engine``.
"""
