"""Incremental operators (section 5 of the IMP paper), one module per operator family."""
