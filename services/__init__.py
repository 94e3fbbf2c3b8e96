"""The gRPC front end of the IMP service (``SketchService``): a thin servicer that turns
requests into calls on the query actors and maps domain errors onto gRPC statuses.

Nothing lives here yet; the front end is built in a later issue from ``protos/imp/v1``.
"""
