"""A restart within the rendezvous round: the round's hosts, less any the launcher declared
lost, start their workers again without a new round of torch's rendezvous.

torch's c10d rendezvous polls its shared state once a second while a round forms, so a new
round costs one to two seconds however quick the hosts are; and a host that is gone stays a
participant of torch's round until its heartbeats expire (a few keep-alive intervals), which
a new round waits for, then for the last call. When a worker fails, the next world is the
round's hosts with their order kept: the agents agree on that through the round's own store,
in a few round trips, and torch's rendezvous is used only when they cannot (a host waits to
join, or one neither joins nor is known to be gone).

A host is known to be gone when the launcher declares it lost in the job directory
(:func:`tenter.jobdir.control.declare_lost`: a local job's launcher sees an agent die at once,
and fences a host it cut off). An elastic job then goes on without it at once if at least
``min_hosts`` remain; a job of fixed membership cannot, and falls back at once.

Restart ``n`` of a round (its keys in the round's store, which torch prefixes with the round):

1. Each host stops its workers, writes its name under its group rank and adds 1 to
   ``JOINED``. A host whose workers run sees ``JOINED`` appear and does the same: one group
   restart, which uses one of the job's restarts whichever host's worker failed (the round's
   :attr:`~tenter.launch.agent.rendezvous.Round.restart_count` adds one on every host).
2. A host that sees every host of the round either joined or lost decides: ``go`` with the
   hosts that joined and are not lost, in their order (``abandon`` if fewer than
   ``min_hosts``). A host that waits longer than :data:`WAIT_S`, or sees a host waiting in
   torch's rendezvous (a new or returning host), decides ``abandon``. The first to add 1 to
   ``DECIDED`` writes its decision to ``OUTCOME``; every host reads that one.
3. On ``go`` the hosts take their places in the list as group ranks; the new group rank 0
   serves a fresh workers' store. On ``abandon`` every host falls back to a new round of
   torch's rendezvous.

``store.add`` is atomic, so every host reads the same outcome.
"""

from __future__ import annotations

import datetime
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from torch.distributed.elastic.rendezvous import RendezvousHandler

from tenter.launch.agent import rendezvous
from tenter.launch.processes import STOP_GRACE_S
from tenter.spec.errors import counted

logger = logging.getLogger(__name__)

JOINED_KEY = "tenter/restart/{n}/joined"
JOINED_HOST_KEY = "tenter/restart/{n}/host/{group_rank}"
DECIDED_KEY = "tenter/restart/{n}/decided"
OUTCOME_KEY = "tenter/restart/{n}/outcome"
WORKERS_STORE_KEY = "tenter/restart/{n}/workers-store"
GO, GIVE_UP = "go", "abandon"
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
    round_: rendezvous.Round,
    handler: RendezvousHandler,
    name: str,
    addr: str,
    lost: Callable[[], set[str]],
    min_hosts: int,
) -> rendezvous.Round | None:
    """The round's next restart, once its hosts have agreed on who goes on; None when they
    fall back to torch's rendezvous. This host (``name``, serving on ``addr``) must have
    stopped its workers; ``lost`` reads the hosts the launcher declared lost."""
    store, n = round_.store, round_.restarts + 1
    store.set(JOINED_HOST_KEY.format(n=n, group_rank=round_.group_rank), name)
    store.add(JOINED_KEY.format(n=n), 1)
    members = _outcome(round_, n, handler, lost, min_hosts)
    if members is None or name not in members:
        logger.info("restart %d within the round abandoned: a new rendezvous round", n)
        return None
    group_rank = members.index(name)
    key = WORKERS_STORE_KEY.format(n=n)
    # A fresh workers' store: the previous workers' keys (their barriers) must not be seen
    # by the next ones.
    served = rendezvous.serve_workers_store(store, key, addr) if group_rank == 0 else None
    master_addr, master_port = rendezvous.workers_store_at(store, key)
    gone = [h for h in _round_names(round_) if h not in members]
    logger.info(
        "restart %d within the round: %s%s",
        n,
        counted(len(members), "host"),
        f", without {', '.join(str(h) for h in gone)}" if gone else "",
    )
    round_.close()  # the previous workers' store
    return replace(
        round_,
        restarts=n,
        restart_count=round_.restart_count + 1,  # every host of the round takes part in each
        group_rank=group_rank,
        hosts=len(members),
        names=tuple(members),
        master_addr=master_addr,
        master_port=master_port,
        workers_store=served,
    )


def _outcome(
    round_: rendezvous.Round,
    n: int,
    handler: RendezvousHandler,
    lost: Callable[[], set[str]],
    min_hosts: int,
) -> list[str] | None:
    """The hosts that go on, in order, once the hosts have agreed; None to fall back."""
    store, key = round_.store, OUTCOME_KEY.format(n=n)
    deadline = time.monotonic() + WAIT_S
    next_waiting_check = time.monotonic() + WAITING_POLL_S
    while not store.check([key]):
        verdict = None
        members = _members(round_, n, lost)
        now = time.monotonic()
        if members is not None:
            verdict = f"{GO} {','.join(members)}" if len(members) >= min_hosts else GIVE_UP
        elif now >= deadline:
            verdict = GIVE_UP
        elif now >= next_waiting_check:
            if handler.num_nodes_waiting() > 0:
                verdict = GIVE_UP
            next_waiting_check = now + WAITING_POLL_S
        if verdict is not None:
            if store.add(DECIDED_KEY.format(n=n), 1) == 1:
                store.set(key, verdict)
            store.wait([key], datetime.timedelta(seconds=WAIT_S))
            break
        time.sleep(POLL_S)
    outcome, _, listed = store.get(key).decode().partition(" ")
    return listed.split(",") if outcome == GO else None


def _members(round_: rendezvous.Round, n: int, lost: Callable[[], set[str]]) -> list[str] | None:
    """The hosts that go on, once every host of the round joined restart ``n`` or is lost;
    None before."""
    store, hosts = round_.store, round_.hosts
    joined, gone = store.add(JOINED_KEY.format(n=n), 0), lost()
    if joined + len(gone) < hosts:  # most looks end here: one round trip, one listdir
        return None
    keys = [JOINED_HOST_KEY.format(n=n, group_rank=r) for r in range(hosts)]
    joined_names = [store.get(k).decode() if store.check([k]) else None for k in keys]
    if joined < hosts:
        names = _round_names(round_)
        pairs = zip(joined_names, names, strict=True)
        if any(j is None and (h is None or h not in gone) for j, h in pairs):
            return None  # a host neither joined nor is known to be gone
    return [h for h in joined_names if h is not None and h not in gone]


def _round_names(round_: rendezvous.Round) -> Sequence[str | None]:
    """The round's hosts by group rank (None: not known)."""
    if round_.names:
        return round_.names
    store = round_.store
    keys = [rendezvous.HOST_NAME_KEY.format(group_rank=r) for r in range(round_.hosts)]
    return [store.get(k).decode() if store.check([k]) else None for k in keys]
