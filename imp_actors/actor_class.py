"""The one place that applies ``ray.remote``: the query worker as a Ray actor class.

Only ``imp_actors.handles`` imports this module (lazily, so that importing the runtime
never imports Ray).
"""

from __future__ import annotations

import ray

from imp_actors.worker import QueryWorker


class _RayQueryWorker(QueryWorker):
    """A ``QueryWorker`` that can also say which Ray node it runs on."""

    def node(self) -> str:
        return ray.get_runtime_context().get_node_id()


RemoteQueryWorker = ray.remote(_RayQueryWorker)
