"""The benchmark suites run by ``imp bench`` (``benchmarks.cli``), one module per suite.

Each suite returns a JSON-ready report that records its setup (machine, versions,
parameters; ``benchmarks.common``). The suites sit above the service: they use only the
public APIs of ``imp_core``, ``imp_actors`` and ``services``, and nothing there imports
them (the import contracts in ``pyproject.toml``).
"""
