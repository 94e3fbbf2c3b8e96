"""Benchmarks run by ``imp bench``: each returns JSON-ready rows and records its setup."""
