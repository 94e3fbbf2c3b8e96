"""The generated protobuf and gRPC modules of ``imp.v1`` (``pb`` messages, ``rpc`` stubs).

Importing this module makes sure the stubs exist and match the ``.proto`` sources
(``services.protogen``), so a fresh checkout works without a separate build step.
"""

from __future__ import annotations

from services import protogen

protogen.ensure()

from services._generated.imp.v1 import sketch_service_pb2 as pb  # noqa: E402
from services._generated.imp.v1 import sketch_service_pb2_grpc as rpc  # noqa: E402

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["SketchService"].full_name

__all__ = ["SERVICE_NAME", "pb", "rpc"]
