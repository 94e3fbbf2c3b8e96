"""Immutable, typed relational plans (the bag algebra of the IMP paper, Fig. 4)."""
