"""The steps :func:`tenter.contract.planner.make_plan` composes, each a pure function, each
pinned on its own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tenter.contract import isolation
from tenter.contract.placeholders import LIGHTHOUSE_PORT, RDZV_PORT
from tenter.contract.planner.addresses import (
    Addresses,
    host_addresses,
    lighthouse_url,
    store_policy,
)
from tenter.contract.planner.hosts import Placements, shared_and_own
from tenter.contract.planner.make import job_policy
from tenter.contract.planner.ranks import common_rank_env, host_ranks, without
from tenter.contract.torchrun import shared_worker_env
from tenter.spec import JobSpec, load, lookup

HERE = Path(__file__).parents[1] / "launch"
CLUSTER = ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
BACKENDS = ("local", "slurm", "mpi", "kubernetes")


def spec_of(**fields: Any) -> JobSpec:
    base = {"entry_point": "scripts/contract.py", "source_dir": str(HERE), "hosts": 3}
    spec, _ = load({**base, "processes_per_host": 2, **fields}, HERE)
    return spec


def cluster_placements(spec: JobSpec) -> Placements:
    """A cluster's three hosts (no share of this machine), as mpirun's and Slurm's plans."""
    return Placements(
        spec=spec,
        job_id="steps-1",
        job_dir=Path("/jobs/steps-1"),
        tenter_home=Path("/home/u/.tenter"),
        names=["algo-1", "algo-2", "algo-3"],
        where=host_addresses(spec, CLUSTER, "eth0"),
        checkpoint_dir="/ckpt",
        lighthouse="",
        machine=None,
        gpus=None,
    )


def test_addresses_a_cluster_gives_stand_simulated_hosts_get_loopback_or_their_own_network() -> (
    None
):
    spec = spec_of()
    assert host_addresses(spec, CLUSTER, "eth0") == Addresses(CLUSTER, "eth0", False, False)
    simulated = host_addresses(spec, None, "lo")
    assert (simulated.addrs, simulated.simulated, simulated.isolated) == (
        ["127.100.0.1", "127.101.0.1", "127.102.0.1"],
        True,
        False,
    )
    isolated = host_addresses(spec_of(isolation="network"), None, "lo")
    assert isolated.network_interface == isolation.HOST_NIC
    assert isolated.addrs == [isolation.host_addr(i) for i in range(3)]


def test_the_lighthouse_is_where_the_launcher_is_and_only_under_fault_tolerance() -> None:
    ft = spec_of(hosts=4, fault_tolerance={"replica_groups": 2})
    assert lighthouse_url(spec_of(), host_addresses(spec_of(), None, "lo")) == ""
    simulated = host_addresses(ft, None, "lo")
    assert lighthouse_url(ft, simulated) == f"http://127.0.0.1:{LIGHTHOUSE_PORT}"
    cluster = host_addresses(ft, [*CLUSTER, "10.0.0.4"], "eth0")
    assert lighthouse_url(ft, cluster) == f"http://10.0.0.1:{LIGHTHOUSE_PORT}"


def test_the_first_host_serves_the_store_of_a_local_job_of_fixed_membership_only() -> None:
    fixed = spec_of()
    where = host_addresses(fixed, None, "lo")
    assert store_policy(fixed, where, 3) == (f"127.100.0.1:{RDZV_PORT}", True)
    elastic = spec_of(elastic={"min_hosts": 2, "max_hosts": 3})
    assert store_policy(elastic, where, 3) == (f"127.0.0.1:{RDZV_PORT}", False)
    etcd = spec_of(elastic={"rendezvous": {"backend": "etcd", "endpoint": "10.9.9.9:2379"}})
    assert store_policy(etcd, where, 3) == ("10.9.9.9:2379", False)


def test_cluster_hosts_share_their_environment_and_files_but_sagemakers_master() -> None:
    spec = spec_of(backend="slurm")
    itype = lookup(spec.instance_type)
    assert itype is not None
    parts = shared_and_own(cluster_placements(spec), itype, 2, 3)
    assert parts.env["SM_CURRENT_HOST"] == "${host}"
    assert "input/config/resourceconfig.json" in parts.files
    first, *others = parts.own
    assert '"is_master":true' in first[0]["SM_TRAINING_ENV"]
    assert others == [({}, {}), ({}, {})]


def test_ranks_count_host_by_host_and_what_all_share_is_kept_once() -> None:
    place = cluster_placements(spec_of(backend="slurm"))
    ranks = [host_ranks(place, 2, 3, index) for index in range(3)]
    assert [[r.rank for r in host] for host in ranks] == [[0, 1], [2, 3], [4, 5]]
    assert ranks[2][1].stdout == "/jobs/steps-1/logs/rank-5.stdout"
    common = common_rank_env([rank for host in ranks for rank in host])
    assert (common["WORLD_SIZE"], common["MASTER_ADDR"]) == ("6", "10.0.0.1")
    assert "RANK" not in common
    [_, last] = without(ranks[2], common)
    assert last.env == {
        "RANK": "5",
        "LOCAL_RANK": "1",
        "GROUP_RANK": "2",
        "ROLE_RANK": "5",
        "TORCHELASTIC_ERROR_FILE": "/jobs/steps-1/logs/rank-5.error.json",
    }


def test_the_spec_alone_gives_the_rendezvous_restart_and_hang_policy() -> None:
    policy = job_policy(spec_of(elastic={"max_restarts": 2, "hang_timeout": 60}), 3)
    assert (policy["rdzv_backend"], policy["min_hosts"], policy["max_hosts"]) == ("c10d", 3, 3)
    assert (policy["max_restarts"], policy["hang_timeout"]) == (2, 60)
    assert (policy["replica_groups"], policy["min_replicas"]) == (0, 0)
    etcd = spec_of(elastic={"rendezvous": {"backend": "etcd", "endpoint": "10.9.9.9:2379"}})
    assert job_policy(etcd, 3)["rdzv_backend"] == "etcd-v2"


def test_the_plan_says_what_the_agents_may_do_not_which_backend_runs_them() -> None:
    """Capabilities as plan fields: restarts within the round where a gone host is known at
    once (fixed membership; the local and Ray launchers, which declare lost hosts), and a
    SIGTERM that asks for a preemption where a scheduler sends it (not from those launchers)."""
    elastic = {"min_hosts": 2, "max_hosts": 4}

    def capabilities(spec: JobSpec) -> tuple[bool, bool]:
        policy = job_policy(spec, 3)
        return policy["restart_in_round"], policy["sigterm_preempts"]

    assert capabilities(spec_of()) == (True, False)
    assert capabilities(spec_of(elastic=elastic)) == (True, False)
    assert capabilities(spec_of(backend="slurm")) == (True, True)
    assert capabilities(spec_of(backend="slurm", elastic=elastic)) == (False, True)
    # Ray's launcher sees a node's loss through its actor and stops the agents with SIGTERM.
    assert capabilities(spec_of(backend="ray", elastic=elastic)) == (True, False)


def test_the_plan_says_whose_rendezvous_store_it_is_not_which_backend_runs_it() -> None:
    """tenter serves a c10d store, and plans the first round on it where the membership is
    fixed; an etcd rendezvous is another's store, with what to check when it fails."""

    def rendezvous(spec: JobSpec) -> tuple[bool, bool, bool]:
        policy = job_policy(spec, 3)
        return policy["serves_store"], policy["planned_first_round"], bool(policy["rdzv_help"])

    etcd = {"rendezvous": {"backend": "etcd", "endpoint": "10.9.9.9:2379"}}
    assert rendezvous(spec_of()) == (True, True, False)
    assert rendezvous(spec_of(backend="slurm")) == (True, True, False)
    assert rendezvous(spec_of(elastic={"min_hosts": 2, "max_hosts": 4})) == (True, False, False)
    assert rendezvous(spec_of(elastic=etcd)) == (False, False, True)
    assert "--enable-v2" in job_policy(spec_of(elastic=etcd), 3)["rdzv_help"]


def test_the_plan_says_what_of_the_submitting_shells_environment_reaches_the_ranks() -> None:
    """All of it where tenter's agents start the workers (torchrun's and Slurm's
    ``--export=ALL``); none where mpirun's remote ranks and the pods get the plan's only."""
    passes = {b: job_policy(spec_of(backend=b), 3)["pass_environment"] for b in BACKENDS}
    assert passes == {"local": "all", "slurm": "all", "mpi": "none", "kubernetes": "none"}


def test_a_workers_environment_is_the_shells_as_the_plan_says_under_the_plans() -> None:
    shell = {"USER_VAR": "mine", "RANK": "stale", "PATH": "/bin"}
    plan_env = {"RANK": "3", "TENTER_JOB_ID": "j"}
    assert shared_worker_env(shell, "all", plan_env) == {**shell, **plan_env}
    assert shared_worker_env(shell, "none", plan_env) == plan_env
