"""The ``imp`` command line (``services.cli.main:main``): the front end's commands.

``main`` builds the parser: ``data``, ``demo``, ``serve`` and the client commands
(``commands``), and ``bench`` when the ``benchmarks`` package is installed (it sits above
the service and adds its own subcommands). Nothing here imports gRPC, Spark or Ray until
a command runs, so ``imp --help`` stays quick.
"""
