"""An agent's looks at the other hosts between two looks at its workers, each spaced to what
it costs: whether another host began a group restart (one store request, every
:func:`~tenter.launch.agent.rendezvous.poll_interval`: every pass below 1,000 hosts) and
whether a host waits to join (torch's rendezvous, every :data:`JOIN_CHECK_S`)."""

from __future__ import annotations

import logging
import time

from torch.distributed.elastic.rendezvous import RendezvousHandler

from tenter.launch.agent import in_round, rendezvous

logger = logging.getLogger(__name__)

JOIN_CHECK_S = 1.0
"""How often torch's rendezvous is asked whether a host waits to join: torch answers from a
copy of its state it refreshes once a second anyway, a join waits for a whole group restart,
and the ask on every pass was the largest part of an idle agent's CPU (docs/scale.md)."""


class PeerLooks:
    def __init__(self, handler: RendezvousHandler, restart_in_round: bool, pass_s: float) -> None:
        """``restart_in_round``: whether the hosts restart within their round (else no host
        asks the others); ``pass_s``: the agent's pass, the least spacing of a look."""
        self.handler = handler
        self._in_round, self._pass_s = restart_in_round, pass_s
        self._next_ask = 0.0
        self._next_join_check = 0.0

    def restart_asked(self, round_: rendezvous.Round | None) -> bool:
        """Whether another host of ``round_`` started a restart."""
        if not self._in_round or round_ is None or time.monotonic() < self._next_ask:
            return False
        self._next_ask = time.monotonic() + rendezvous.poll_interval(round_.hosts, self._pass_s)
        return in_round.asked(round_)

    def hosts_waiting(self) -> bool:
        """Whether a host waits to join."""
        if time.monotonic() < self._next_join_check:
            return False
        self._next_join_check = time.monotonic() + JOIN_CHECK_S
        waiting = self.handler.num_nodes_waiting()
        if waiting > 0:
            logger.info("%d hosts wait to join; restarting the workers", waiting)
        return waiting > 0
