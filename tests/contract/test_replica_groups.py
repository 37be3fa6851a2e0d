"""The plan of a ``fault_tolerance`` job: hosts split into replica groups in order, each its
own rendezvous, with the variables torchft's Manager reads."""

from __future__ import annotations

from pathlib import Path

from tenter.contract.placeholders import LIGHTHOUSE_PORT
from tenter.contract.plan import Plan
from tenter.contract.planner import make_plan
from tenter.spec import load

HERE = Path(__file__).parents[1] / "launch"


def plan_4_hosts_in_2_groups() -> Plan:
    spec, _ = load(
        {
            "entry_point": "scripts/contract.py",
            "source_dir": str(HERE),
            "hosts": 4,
            "processes_per_host": 2,
            "elastic": {"max_restarts": 2},
            "fault_tolerance": {"replica_groups": 2, "min_replicas": 1},
        },
        HERE,
    )
    return make_plan(spec, "ft-1", Path("/home"), "/usr/bin/python3")


def test_hosts_split_in_order_into_equal_groups_each_its_own_rendezvous() -> None:
    plan = plan_4_hosts_in_2_groups()
    assert [(h.name, h.replica_group) for h in plan.hosts] == [
        ("algo-1", 0),
        ("algo-2", 0),
        ("algo-3", 1),
        ("algo-4", 1),
    ]
    assert (plan.replica_groups, plan.min_replicas, plan.hosts_per_group) == (2, 1, 2)
    assert (plan.min_hosts, plan.max_hosts) == (2, 2)  # a group's rendezvous waits for its own
    assert [plan.run_id(h) for h in plan.hosts] == ["ft-1-group-0"] * 2 + ["ft-1-group-1"] * 2


def test_torchs_variables_count_within_the_group_and_torchfts_name_it() -> None:
    plan = plan_4_hosts_in_2_groups()
    third = plan.hosts[2]
    rank = third.ranks[1]
    env = plan.process_env(third, rank)
    assert rank.rank == 5  # job-wide: names its log files
    assert {k: env[k] for k in ("RANK", "WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR")} == {
        "RANK": "1",
        "WORLD_SIZE": "4",
        "GROUP_RANK": "0",
        "MASTER_ADDR": "127.102.0.1",  # the group's first host
    }
    assert env["TORCHELASTIC_RUN_ID"] == "ft-1-group-1"
    assert env["REPLICA_GROUP_ID"] == "1"
    assert env["NUM_REPLICA_GROUPS"] == "2"
    assert env["TENTER_MIN_REPLICAS"] == "1"
    assert env["TORCHFT_LIGHTHOUSE"] == f"http://127.0.0.1:{LIGHTHOUSE_PORT}"
    assert env["TORCHFT_QUORUM_RETRIES"] == "59"


def test_each_groups_ranks_have_their_own_job_wide_rank_and_log_files() -> None:
    plan = plan_4_hosts_in_2_groups()
    # torch's agent knows a rank by its RANK within the group: the job-wide rank names it.
    ranks = [
        plan.job_rank(h, int(plan.process_env(h, r)["RANK"])) for h in plan.hosts for r in h.ranks
    ]
    assert ranks == [r.rank for h in plan.hosts for r in h.ranks] == list(range(8))
    stems = [plan.log_stem(h.name, r.rank, 0) for h in plan.hosts for r in h.ranks]
    assert stems == [f"{plan.job_dir}/logs/rank-{rank}" for rank in range(8)]
