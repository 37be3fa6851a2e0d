"""A Ray node drain as tenter's preemption: ``ray drain-node --reason
DRAIN_NODE_REASON_PREEMPTION --deadline-remaining-seconds N`` (what autoscaler v2 asks before a
spot node goes, or an operator before maintenance) only tells the GCS; the launcher polls the
GCS's draining nodes (at most once every :data:`DRAIN_POLL_S`) and, once a node holding one of
the job's hosts drains, asks the same agreed stop as SIGTERM to ``tenter run``: a final
checkpoint at the next step boundary, exit 75, and the same command resumes
(:mod:`tenter.launch.launcher.preemption`)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tenter.launch.backends.ray.compat import draining_nodes
from tenter.launch.launcher.preemption import PreemptionWatch
from tenter.launch.shared.console import say

if TYPE_CHECKING:
    from ray.util.placement_group import PlacementGroup

DRAIN_POLL_S = 1.0
"""How often the launcher asks the GCS (one small request): well within any drain deadline
worth a final checkpoint, and no load on the GCS."""


@dataclass(frozen=True)
class Drain:
    """A draining node of the job: the host on it and when Ray said it goes."""

    host: str
    node_id: str
    deadline_ms: int
    """Milliseconds since the epoch; 0: no deadline given."""

    def describe(self, now: float) -> str:
        """The console's line, e.g. ``ray: node 3f2a... (host algo-2) is draining: deadline in
        58 s (09:12:40); preempting the job``."""
        if self.deadline_ms:
            at = self.deadline_ms / 1000
            clock = time.strftime("%H:%M:%S", time.localtime(at))
            deadline = f"deadline in {max(at - now, 0):.0f} s ({clock})"
        else:
            deadline = "no deadline given"
        return (
            f"ray: node {self.node_id} (host {self.host}) is draining: {deadline}; "
            "preempting the job"
        )


def first_drain(host_nodes: dict[str, str], draining: dict[str, int]) -> Drain | None:
    """The first of the job's hosts (in ``host_nodes``' order, host name -> node id) whose node
    is among ``draining`` (node id -> deadline), or None."""
    for host, node in host_nodes.items():
        if node in draining:
            return Drain(host, node, draining[node])
    return None


class DrainWatch:
    """Polls the GCS for a drain of the job's nodes, until it sees one."""

    def __init__(self, ray: Any, group: PlacementGroup, hosts: list[str]) -> None:
        # Bundle i is host i's, on the node the placement group put it on.
        nodes = ray.util.placement_group_table(group)["bundles_to_node_id"]
        self.host_nodes = {host: nodes[i] for i, host in enumerate(hosts)}
        self._next_poll = 0.0
        self.seen: Drain | None = None

    def poll(self, now: float) -> Drain | None:
        """The job's first draining node, once (None before, and after it was returned)."""
        if self.seen is not None or now < self._next_poll:
            return None
        self._next_poll = now + DRAIN_POLL_S
        self.seen = first_drain(self.host_nodes, draining_nodes())
        return self.seen


def preempt_on_drain(watch: DrainWatch | None, preemption: PreemptionWatch) -> None:
    """On the launcher's every poll: a drain of one of the job's nodes starts the job's
    preemption (unless one is already under way), the console saying which node and when."""
    if watch is None or preemption.requested:
        return
    drain = watch.poll(time.monotonic())
    if drain is not None:
        say(drain.describe(time.time()))
        preemption.start()
