"""A restart within the rendezvous round: the same hosts start their workers again, without a
new round of torch's rendezvous.

torch's c10d rendezvous polls its shared state once a second while a round forms, so a new
round costs one to two seconds however quick the hosts are. When a job's membership is fixed
(``min_hosts == max_hosts``) and a worker fails, the next world is the round's hosts with the
same group ranks: the agents agree on that through the round's own store, in a few round
trips, and torch's rendezvous is used only when they cannot (a host is gone or comes back).

Restart ``n`` of a round (its keys in the round's store, which torch prefixes with the round):

1. Each host stops its workers and adds 1 to ``JOINED``; group rank 0 first publishes where the
   next workers' store is. A host whose workers run sees ``JOINED`` appear and does the same
   (a restart for another host's failure uses none of its own, as with torchrun).
2. The host whose add makes ``JOINED`` the number of hosts sets ``OUTCOME`` to ``go``; every
   host waits for ``OUTCOME`` and then starts its workers.
3. A host that waits longer than :data:`WAIT_S`, or sees a host waiting in torch's rendezvous
   (a lost host that came back), gives up: it adds :data:`ABANDON` to ``JOINED``. If that add
   shows that every host had already joined, ``go`` is on its way; if not, it sets ``OUTCOME``
   to ``abandon`` and every host falls back to a new round of torch's rendezvous.

``store.add`` is atomic, so every host restarts within the round or none does.
"""

from __future__ import annotations

import datetime
import logging
import time
from dataclasses import replace

from torch.distributed import Store
from torch.distributed.elastic.rendezvous import RendezvousHandler

from tenter.launch.agent import rendezvous
from tenter.launch.processes import STOP_GRACE_S

logger = logging.getLogger(__name__)

JOINED_KEY = "tenter/restart/{n}/joined"
OUTCOME_KEY = "tenter/restart/{n}/outcome"
WORKERS_STORE_KEY = "tenter/restart/{n}/workers-store"
GO, GIVE_UP = "go", "abandon"
ABANDON = 1 << 20
"""Added to ``JOINED`` by a host that gives up: more than any number of hosts."""
WAIT_S = STOP_GRACE_S + 5.0
"""How long a host waits for the others: each may first have to stop its workers (up to
the stop grace period)."""
POLL_S = 0.01
"""How often a waiting host looks at ``OUTCOME`` (a round trip to the store)."""
WAITING_POLL_S = 0.2
"""How often it asks torch's rendezvous whether a host waits to join."""


def asked(round_: rendezvous.Round) -> bool:
    """Whether a host of the round has started the round's next restart."""
    return round_.store.check([JOINED_KEY.format(n=round_.restarts + 1)])


def restart(
    round_: rendezvous.Round, handler: RendezvousHandler, addr: str
) -> rendezvous.Round | None:
    """The round's next restart, once every host has joined it; None when the hosts fall back
    to torch's rendezvous. This host's workers must have stopped."""
    store, n = round_.store, round_.restarts + 1
    served = None
    if round_.group_rank == 0:
        # A fresh workers' store: the previous workers' keys (their barriers) must not be
        # seen by the next ones.
        served = rendezvous.serve_workers_store(store, WORKERS_STORE_KEY.format(n=n), addr)
    if store.add(JOINED_KEY.format(n=n), 1) == round_.hosts:
        store.set(OUTCOME_KEY.format(n=n), GO)
    if _outcome(store, n, round_.hosts, handler) != GO:
        logger.info("restart %d within the round abandoned: a new rendezvous round", n)
        return None  # the fresh store (if any) stops with its object
    logger.info("every host joined restart %d within the round", n)
    master_addr, master_port = rendezvous.workers_store_at(store, WORKERS_STORE_KEY.format(n=n))
    round_.close()  # the previous workers' store
    return replace(
        round_, restarts=n, master_addr=master_addr, master_port=master_port, workers_store=served
    )


def _outcome(store: Store, n: int, hosts: int, handler: RendezvousHandler) -> str:
    """``go`` or ``abandon``, once the hosts have agreed (or this one gave up)."""
    key = OUTCOME_KEY.format(n=n)
    deadline = time.monotonic() + WAIT_S
    next_waiting_check = time.monotonic() + WAITING_POLL_S
    while not store.check([key]):
        now = time.monotonic()
        if now >= deadline:
            return _give_up(store, n, hosts)
        if now >= next_waiting_check:
            if handler.num_nodes_waiting() > 0:
                return _give_up(store, n, hosts)
            next_waiting_check = now + WAITING_POLL_S
        time.sleep(POLL_S)
    return store.get(key).decode()


def _give_up(store: Store, n: int, hosts: int) -> str:
    key = OUTCOME_KEY.format(n=n)
    before = store.add(JOINED_KEY.format(n=n), ABANDON) - ABANDON
    if before == hosts:
        # Every host had joined and none had given up: the last to join is setting ``go``.
        store.wait([key], datetime.timedelta(seconds=WAIT_S))
        return store.get(key).decode()
    if before < ABANDON:  # the first to give up tells the others
        store.set(key, GIVE_UP)
    return GIVE_UP
