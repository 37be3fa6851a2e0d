"""The agent's side of a rendezvous round, on torch's public elastic API only.

torch's rendezvous (c10d or etcd, through
``torch.distributed.elastic.rendezvous.registry.get_rendezvous_handler``) is the engine: it
decides who is in a round and gives each host its group rank and the round's store. On top of
it, tenter's agents exchange one value per round through that store: where the workers'
store is (``MASTER_ADDR:MASTER_PORT``), chosen by the group's rank 0 on its own address.

The workers use the agent's store (``TORCHELASTIC_USE_AGENT_STORE=True``, with restarts or
without): the rank 0 agent serves it for the round, bound to the host's job address, never to
all interfaces. torch's own handler would serve it on ``*:PORT`` (tenter's agent turns that
off with ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``), and so would the rank 0 worker's
``init_process_group`` if the workers served it themselves (``TCPStore`` binds a port of its
own on every interface). Each round, and so each restart, gets a fresh store on a fresh port,
so no worker ever reads a previous round's keys.

A job of fixed membership (``min_hosts == max_hosts``, torch's c10d rendezvous) starts without
a round of torch's rendezvous (:func:`join_planned`): the plan already gives every host its
group rank (its place among the hosts, the order torch's rendezvous gives simulated hosts
too), so the agents meet on the job's store under a prefix of their own, exchange the
workers' store as above, and start. torch's round polls its state once a second, so the
last host to join used to wait up to a second for nothing. A later round (a restart that
cannot stay within the round, a host that comes back) is torch's, as before.
"""

from __future__ import annotations

import datetime
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch.distributed import PrefixStore, Store, TCPStore
from torch.distributed.elastic.rendezvous import (
    RendezvousHandler,
    RendezvousParameters,
    RendezvousTimeoutError,
    registry,
)

from tenter.contract.placeholders import RDZV_PORT, resolve
from tenter.contract.plan import HostPlan, Plan
from tenter.launch.shared.store import listener_on, serve_store

logger = logging.getLogger(__name__)

WORKERS_STORE_KEY = "tenter/workers-store"
"""In the round's store: ``ADDR:PORT`` of the workers' store (``MASTER_ADDR:MASTER_PORT``)."""
HOST_NAME_KEY = "tenter/host/{group_rank}"
"""In the round's store: the name of the host of each group rank (for a restart that goes
on without a lost host, :mod:`tenter.launch.agent.in_round`)."""
RESTART_COUNT_KEY = "tenter/restart-count/{group_rank}"
"""In the round's store: the job's group restarts as each host knew them when it joined."""
ROUND_RESTART_COUNT_KEY = "tenter/restart-count"
"""In the round's store: the most of :data:`RESTART_COUNT_KEY`'s, as group rank 0 read them
(:attr:`Round.restart_count`): one host reads them all, the others this one key."""
FINISHED_KEY = "tenter/finished/{restarts}"
"""In the round's store: how many hosts' workers all succeeded (the exit barrier), for the
round's restart they ran in: a count, so that a look costs one key whatever the hosts."""
EXIT_POLL_S = 0.05
"""How often the exit barrier looks whether every host finished, or one asks for a restart
(less often in a job so large that the looks would load the store: :func:`poll_interval`)."""
STORE_POLLS_PER_S = 10_000.0
"""The most looks a second that a round's hosts make at the store together while they wait
for something (a restart asked, every host finished): one TCPStore served 13k ``check``
requests a second to one client and 73k to four on a 2-core machine (docs/scale.md). Up to
``STORE_POLLS_PER_S * interval`` hosts each looks at its own interval; beyond, each looks
less often (16,000 hosts, a 0.1 s pass: every 1.6 s), so the store's load stays bounded."""
PLANNED_ROUND_PREFIX = "tenter/planned-round/{run_id}/"
"""In the job's store: the keys of the first round of a job of fixed membership."""
PLANNED_POLL_S = 0.01
"""How often a host of the planned round looks for the workers' store (a store round trip)."""
SHARED_STORE_OPT_OUT = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"
"""torch's switch that stops its rendezvous handler serving a store on all interfaces."""


def endpoint(plan: Plan, rdzv_port: str) -> str:
    """Where the job's rendezvous is: the plan's endpoint with the port the launcher (or the
    first host's agent) serves the store on. Resolved once per agent, here."""
    return resolve(plan.rdzv_endpoint, {RDZV_PORT: rdzv_port})


def create_handler(plan: Plan, host: HostPlan, at: str) -> RendezvousHandler:
    """The host's handler of the job's (or its replica group's) rendezvous at ``at``
    (:func:`endpoint`)."""
    params = RendezvousParameters(
        backend=plan.rdzv_backend,
        endpoint=at,
        run_id=plan.run_id(host),
        min_nodes=plan.min_hosts,
        max_nodes=plan.max_hosts,
        local_addr=host.addr,
        is_host=False,  # the launcher serves the c10d store
        join_timeout=plan.join_timeout,
        last_call_timeout=plan.last_call_timeout,
        keep_alive_interval=plan.keep_alive_s,
    )
    return registry.get_rendezvous_handler(params)


@dataclass
class Round:
    """One rendezvous round as this host took part in it."""

    store: Store
    """The round's own store (torch prefixes its keys with the round)."""
    group_rank: int
    hosts: int
    master_addr: str
    master_port: int
    workers_store: Any
    """The workers' store this host serves (group rank 0), kept open for the round (or
    until the round's next restart)."""
    restarts: int = 0
    """Restarts within the round so far (:mod:`tenter.launch.agent.in_round`)."""
    planned: bool = False
    """Formed as the plan has it (:func:`join_planned`), not by torch's rendezvous."""
    names: tuple[str, ...] = ()
    """The hosts by group rank, where a restart within the round left fewer than it began
    with (empty: under :data:`HOST_NAME_KEY` in the store)."""
    restart_count: int = 0
    """The job's group restarts before this round's workers started: their
    ``TORCHELASTIC_RESTART_COUNT``, the same on every host of the round."""

    def close(self) -> None:
        self.workers_store = None  # its server stops with the object


def serve_workers_store(store: Store, key: str, addr: str) -> Any:
    """Serve a fresh workers' store on ``addr`` (a port the kernel picks, the socket kept: no
    window for a clash) and publish where under ``key`` in the round's store."""
    served = serve_store(addr, listener_on(addr))
    store.set(key, f"{addr}:{served.port}")
    return served


def workers_store_at(store: Store, key: str) -> tuple[str, int]:
    """Where the workers' store published under ``key`` is (waits for it)."""
    master_addr, _, master_port = store.get(key).decode().rpartition(":")
    return master_addr, int(master_port)


def join(handler: RendezvousHandler, name: str, addr: str, restart_count: int) -> Round:
    """Join the next round (blocks until it is complete) and learn the workers' store, which
    this host serves if it is the round's rank 0, and the job's group restarts: the most
    that any host of the round knows (this one knows ``restart_count``)."""
    info = handler.next_rendezvous()
    store, group_rank, hosts = info.store, info.rank, info.world_size
    store.set(HOST_NAME_KEY.format(group_rank=group_rank), name)
    store.set(RESTART_COUNT_KEY.format(group_rank=group_rank), str(restart_count))
    served = serve_workers_store(store, WORKERS_STORE_KEY, addr) if group_rank == 0 else None
    if group_rank == 0:
        # Two requests whatever the hosts (a get each was O(hosts) for every host).
        keys = [RESTART_COUNT_KEY.format(group_rank=r) for r in range(hosts)]
        store.wait(keys)
        store.set(ROUND_RESTART_COUNT_KEY, str(max(int(c) for c in store.multi_get(keys))))
    master_addr, master_port = workers_store_at(store, WORKERS_STORE_KEY)
    return Round(
        store,
        group_rank,
        hosts,
        master_addr,
        master_port,
        served,
        restart_count=int(store.get(ROUND_RESTART_COUNT_KEY)),  # waits for rank 0's
    )


def join_planned(plan: Plan, host: HostPlan, at: str) -> Round:
    """The job's first round as the plan has it (see the module's doc), its store at ``at``
    (:func:`endpoint`): blocks until group rank 0 has published the workers' store, at most
    the rendezvous' join timeout."""
    store_addr, _, store_port = at.rpartition(":")
    timeout = datetime.timedelta(seconds=plan.join_timeout)
    # A client of the job's store: the launcher may start serving it after this agent.
    client = TCPStore(store_addr.strip("[]"), int(store_port), is_master=False, timeout=timeout)
    store = PrefixStore(PLANNED_ROUND_PREFIX.format(run_id=plan.run_id(host)), client)
    group_rank, hosts = host.index % plan.hosts_per_group, plan.hosts_per_group
    logger.info("joining the planned first round as group rank %d of %d", group_rank, hosts)
    store.set(HOST_NAME_KEY.format(group_rank=group_rank), host.name)
    served = serve_workers_store(store, WORKERS_STORE_KEY, host.addr) if group_rank == 0 else None
    deadline = time.monotonic() + plan.join_timeout
    # Short looks, not one blocking get: a stop signal is handled between two. Spaced with
    # the hosts: every host looks while group rank 0 starts (at 0.01 s, 16,000 hosts would
    # ask the store 1.6 million times a second).
    every = poll_interval(hosts, PLANNED_POLL_S)
    while not store.check([WORKERS_STORE_KEY]):
        if time.monotonic() > deadline:
            raise RendezvousTimeoutError(
                f"group rank 0 of the round did not start within join_timeout "
                f"({plan.join_timeout} s)"
            )
        time.sleep(every)
    master_addr, master_port = workers_store_at(store, WORKERS_STORE_KEY)
    logger.info("joined the planned first round: workers' store at %s:%d", master_addr, master_port)
    return Round(store, group_rank, hosts, master_addr, master_port, served, planned=True)


def exit_barrier(round_: Round, timeout_s: float, restart_asked: Callable[[], bool]) -> bool:
    """Wait (at most ``timeout_s``) until every host of the round has finished: rank 0's
    agent may serve the store other hosts' workers still use as they end. Leave it early, and
    return True, when ``restart_asked``: a host's worker failed as ours finished, and the
    hosts restart together (else the finished host never joins the restart, and the
    failed one waits for it)."""
    key = FINISHED_KEY.format(restarts=round_.restarts)
    finished = round_.store.add(key, 1)
    deadline = time.monotonic() + timeout_s
    interval = poll_interval(round_.hosts, EXIT_POLL_S)
    while finished < round_.hosts:
        if restart_asked():
            return True
        if time.monotonic() > deadline:
            logger.warning("not every host finished within %s s", timeout_s)
            return False
        time.sleep(interval)
        finished = round_.store.add(key, 0)
    return False


def poll_interval(hosts: int, least_s: float) -> float:
    """How often each of a round's ``hosts`` looks at the store for what it waits for: every
    ``least_s``, or less often where the hosts' looks would pass :data:`STORE_POLLS_PER_S`."""
    return max(least_s, hosts / STORE_POLLS_PER_S)
