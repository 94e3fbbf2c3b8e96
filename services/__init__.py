"""The gRPC front end of the IMP service: ``SketchService`` (``protos/imp/v1``).

- ``protos``/``protogen``: the generated stubs (made from the .proto files, not stored);
- ``servicer``: the thin servicer (request -> coordinator call -> response);
- ``convert``: protobuf <-> domain records; ``records``: what the client returns;
- ``errors``/``handlers``: error codes -> gRPC statuses, tokens and call metrics, in the
  one wrapper every SketchService method handler gets;
- ``auth``: bearer tokens; ``guards``: limits and the read-only SELECT rule;
- ``config``: ``ServerConfig`` (IMP_* variables, ``imp serve`` flags);
- ``server``: the server with health and reflection; ``client``: the Python client;
- ``cli``: the ``imp`` command line (``cli.main``; ``imp bench`` comes from ``benchmarks``);
- ``demo``/``demo_engine``: ``imp demo`` (the service over gRPC) and ``imp demo --engine``.

Importing the package itself loads nothing heavy (no gRPC), so ``imp`` stays quick.
"""
