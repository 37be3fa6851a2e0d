"""What the ray backend needs from Ray that Ray has no public API for.

Each entry names the Ray versions that need it: once Ray has a public equivalent, those lines
go."""

from __future__ import annotations


def draining_nodes() -> dict[str, int]:
    """The cluster's draining nodes, ``{node id (hex): deadline (ms since the epoch; 0: none)}``,
    from the GCS (one request, on the driver's connection).

    Ray 2.52-2.60: no public API tells a node is draining (``ray.nodes()`` and
    ``ray.util.state.list_nodes`` say ALIVE until it is gone); Ray Train v2 reads this same
    accessor (``ray.train.v2._internal.execution.preemption``)."""
    from ray._private.state import state  # [ray 2.52-2.60] the only access to the drains

    drains: dict[str, int] = state.get_draining_nodes()  # [ray 2.52-2.60]
    return dict(drains)
