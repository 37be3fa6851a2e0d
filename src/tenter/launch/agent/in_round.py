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

Restart ``n`` of a round (its keys in the round's store, which torch prefixes with the round),
in a number of store requests per host that does not grow with the hosts:

1. Each host stops its workers, writes its name under its group rank and adds 1 to
   ``JOINED``. A host whose workers run sees ``JOINED`` appear and does the same: one group
   restart, which uses one of the job's restarts whichever host's worker failed (the round's
   :attr:`~tenter.launch.agent.rendezvous.Round.restart_count` adds one on every host).
2. The last host to join (its add returns the round's size) decides ``go`` with every host
   that is not lost, in their order. The first to join watches for what the others cannot
   see without asking every host: when every host of the round either joined or is lost, it
   decides ``go`` with the hosts that joined and are not lost (``abandon`` if fewer than
   ``min_hosts``); when it waited longer than :data:`WAIT_S`, or sees a host waiting in
   torch's rendezvous (a new or returning host), ``abandon``. Every other host waits on
   ``OUTCOME`` alone, and decides ``abandon`` itself if none came (the first host died).
   The first to add 1 to ``DECIDED`` writes its decision to ``OUTCOME``; every host reads
   that one.
3. On ``go`` the hosts take their places in the list as group ranks; the new group rank 0
   serves a fresh workers' store. On ``abandon`` every host falls back to a new round of
   torch's rendezvous.

Only the deciding host reads the hosts' names (one request each, once per restart): the
others make a constant number of requests, so a restart costs O(hosts) requests in all.
``store.add`` is atomic, so every host reads the same outcome.
"""

from __future__ import annotations

import datetime
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from torch.distributed import Store
from torch.distributed.elastic.rendezvous import RendezvousHandler

from tenter.launch.agent import rendezvous
from tenter.launch.shared.processes import STOP_GRACE_S
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
WAIT_MARGIN_S = 2.0
"""How much longer than the first host the others wait for its decision before abandoning
on their own (it died while watching)."""
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
    arrived = store.add(JOINED_KEY.format(n=n), 1)
    members = _outcome(round_, n, arrived, handler, lost, min_hosts)
    if members is None or name not in members:
        logger.info("restart %d within the round abandoned: a new rendezvous round", n)
        return None
    group_rank = members.index(name)
    key = WORKERS_STORE_KEY.format(n=n)
    # A fresh workers' store: the previous workers' keys (their barriers) must not be seen
    # by the next ones.
    served = rendezvous.serve_workers_store(store, key, addr) if group_rank == 0 else None
    master_addr, master_port = rendezvous.workers_store_at(store, key)
    # The round's names if a restart left them here; else the hosts declared lost (one
    # listdir, not a request per host).
    gone = [h for h in (round_.names or sorted(lost())) if h not in members]
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
    arrived: int,
    handler: RendezvousHandler,
    lost: Callable[[], set[str]],
    min_hosts: int,
) -> list[str] | None:
    """The hosts that go on, in order, once the hosts have agreed; None to fall back.
    ``arrived``: this host's place in the order of joining (1: first)."""
    if arrived == round_.hosts:
        verdict = _verdict(_members(round_, n, lost), min_hosts)
    elif arrived == 1:
        verdict = _watch(round_, n, handler, lost, min_hosts)
    else:
        verdict = None if _wait_for_outcome(round_.store, n, WAIT_S + WAIT_MARGIN_S) else GIVE_UP
    return _agreed(round_.store, n, verdict)


def _verdict(members: list[str] | None, min_hosts: int) -> str | None:
    if members is None:
        return None
    return f"{GO} {','.join(members)}" if len(members) >= min_hosts else GIVE_UP


def _watch(
    round_: rendezvous.Round,
    n: int,
    handler: RendezvousHandler,
    lost: Callable[[], set[str]],
    min_hosts: int,
) -> str | None:
    """The first host's watch: a verdict, or None once another host decided."""
    store, key = round_.store, OUTCOME_KEY.format(n=n)
    deadline = time.monotonic() + WAIT_S
    next_waiting_check = time.monotonic() + WAITING_POLL_S
    looked_at: tuple[int, frozenset[str]] | None = None
    while not store.check([key]):
        joined, gone = store.add(JOINED_KEY.format(n=n), 0), frozenset(lost())
        # Most looks end here: one round trip, one listdir. The names are read only when the
        # count says every host may have joined or be lost, and then once per change.
        if joined + len(gone) >= round_.hosts and (joined, gone) != looked_at:
            looked_at = (joined, gone)
            verdict = _verdict(_members(round_, n, lost), min_hosts)
            if verdict is not None:
                return verdict
        now = time.monotonic()
        if now >= deadline:
            return GIVE_UP
        if now >= next_waiting_check:
            if handler.num_nodes_waiting() > 0:
                return GIVE_UP
            next_waiting_check = now + WAITING_POLL_S
        time.sleep(POLL_S)
    return None


def _wait_for_outcome(store: Store, n: int, timeout_s: float) -> bool:
    """Wait (one request) until a host decided restart ``n``; False if none did in time."""
    try:
        store.wait([OUTCOME_KEY.format(n=n)], datetime.timedelta(seconds=timeout_s))
    except (RuntimeError, LookupError):  # TCPStore's DistStoreError; EtcdStore's LookupError
        return False
    return True


def _agreed(store: Store, n: int, verdict: str | None) -> list[str] | None:
    """Propose ``verdict`` (None: none of this host's); the hosts that go on as the first
    proposal has it, None to fall back."""
    key = OUTCOME_KEY.format(n=n)
    if verdict is not None and store.add(DECIDED_KEY.format(n=n), 1) == 1:
        store.set(key, verdict)
    store.wait([key], datetime.timedelta(seconds=WAIT_S))
    outcome, _, listed = store.get(key).decode().partition(" ")
    return listed.split(",") if outcome == GO else None


def _members(round_: rendezvous.Round, n: int, lost: Callable[[], set[str]]) -> list[str] | None:
    """The hosts that go on, once every host of the round joined restart ``n`` or is lost;
    None before."""
    store, hosts = round_.store, round_.hosts
    joined, gone = store.add(JOINED_KEY.format(n=n), 0), lost()
    if joined + len(gone) < hosts:
        return None
    joined_names = _values(store, [JOINED_HOST_KEY.format(n=n, group_rank=r) for r in range(hosts)])
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
    keys = [rendezvous.HOST_NAME_KEY.format(group_rank=r) for r in range(round_.hosts)]
    return _values(round_.store, keys)


def _values(store: Store, keys: list[str]) -> list[str | None]:
    """The keys' values (None: not set), in two requests when every key is set, as when no
    host is lost (a get per key was O(hosts) requests in a row on the deciding host, every
    restart); else one look per key, then the set ones in one request."""
    if store.check(keys):
        return [value.decode() for value in store.multi_get(keys)]
    present = [k for k in keys if store.check([k])]
    values = dict(zip(present, store.multi_get(present), strict=True)) if present else {}
    return [values[k].decode() if k in values else None for k in keys]
