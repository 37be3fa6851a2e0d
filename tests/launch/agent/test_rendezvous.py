"""A job of fixed membership starts in the round its plan gives: hosts (threads here) meet on
the job's store (a real TCPStore, as the launcher serves it) with their planned group ranks,
without a round of torch's rendezvous."""

from __future__ import annotations

import socket
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import torch.distributed as dist
from torch.distributed.elastic.rendezvous import RendezvousTimeoutError

from tenter.contract.plan import Plan
from tenter.contract.planner import make_plan
from tenter.launch.agent import rendezvous
from tenter.launch.shared.store import serve_store
from tenter.spec import load


def _serve(plan: Plan) -> dist.TCPStore:
    """The job's store where the plan has it: the first host's agent's (a job of fixed
    membership), or the launcher's."""
    addr = plan.rdzv_endpoint.rpartition(":")[0]
    store: dist.TCPStore = serve_store(addr, socket.create_server((addr, 0)))
    return store


def _plan(tmp_path: Path, **fields: Any) -> Plan:
    spec, _ = load({"command": ["true"], "instance_count": 4, **fields}, tmp_path)
    return make_plan(spec, "planned-1", tmp_path, "python3")


def _join_all(plan: Plan, server: dist.TCPStore) -> list[rendezvous.Round]:
    with ThreadPoolExecutor(len(plan.hosts)) as pool:
        return list(
            pool.map(
                lambda h: rendezvous.join_planned(
                    plan, h, rendezvous.endpoint(plan, str(server.port))
                ),
                plan.hosts,
            )
        )


def test_hosts_meet_with_their_planned_group_ranks_at_rank_0s_workers_store(
    tmp_path: Path,
) -> None:
    plan = _plan(tmp_path)
    assert plan.store_on_first_host
    server = _serve(plan)  # kept: the store serves while the object lives
    rounds = _join_all(plan, server)
    assert [(r.group_rank, r.hosts, r.planned) for r in rounds] == [(i, 4, True) for i in range(4)]
    served = rounds[0].workers_store
    assert served is not None and [r.workers_store for r in rounds[1:]] == [None] * 3
    assert {(r.master_addr, r.master_port) for r in rounds} == {(plan.hosts[0].addr, served.port)}
    # The round's store is one for all hosts: what one sets, the others see.
    rounds[3].store.set("seen", "yes")
    assert rounds[0].store.get("seen") == b"yes"


def test_each_replica_group_is_a_round_of_its_own(tmp_path: Path) -> None:
    plan = _plan(tmp_path, fault_tolerance={"replica_groups": 2, "min_replicas": 1})
    assert not plan.store_on_first_host  # a group may end: the launcher serves it
    server = _serve(plan)
    rounds = _join_all(plan, server)
    assert [(r.group_rank, r.hosts) for r in rounds] == [(0, 2), (1, 2), (0, 2), (1, 2)]
    masters = [(r.master_addr, r.master_port) for r in rounds]
    assert masters[0] == masters[1] != masters[2] == masters[3]
    assert masters[2][0] == plan.hosts[2].addr
    rounds[0].store.set("group", "0")
    assert not rounds[2].store.check(["group"])


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({}, True),
        ({"elastic": {"max_restarts": 3}}, True),
        ({"elastic": {"min_hosts": 2, "max_hosts": 4}}, False),
        ({"elastic": {"rendezvous": {"backend": "etcd", "endpoint": "etcd:2379"}}}, False),
    ],
    ids=["fixed", "fixed-with-restarts", "elastic", "etcd"],
)
def test_only_a_fixed_membership_on_the_jobs_c10d_store_is_planned(
    tmp_path: Path, fields: dict[str, Any], expected: bool
) -> None:
    assert _plan(tmp_path, **fields).planned_first_round is expected


def test_a_host_whose_group_rank_0_never_comes_gives_up_at_the_join_timeout(
    tmp_path: Path,
) -> None:
    plan = _plan(tmp_path, elastic={"rendezvous": {"join_timeout": 1}})
    server = _serve(plan)
    with pytest.raises(RendezvousTimeoutError, match=r"join_timeout \(1 s\)"):
        rendezvous.join_planned(plan, plan.hosts[1], rendezvous.endpoint(plan, str(server.port)))
