"""The actor runtime of the IMP service: a coordinator that keeps registered queries'
sketches fresh, and the Ray actors (one or more shards per query) holding their
incremental operator state. See docs/runtime.md; the entry point is
``imp_actors.coordinator.Coordinator``.
"""
