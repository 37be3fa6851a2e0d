"""The agent's input for one host is what the plan says of that host, nothing else
(:func:`tenter.launch.agent.spec.agent_spec`, a pure function)."""

from __future__ import annotations

from tenter.launch.agent.spec import agent_spec
from tests.contract.test_replica_groups import plan_4_hosts_in_2_groups


def test_a_hosts_agent_spec_names_its_ranks_rendezvous_and_files_as_the_plan_does() -> None:
    plan = plan_4_hosts_in_2_groups()
    host = plan.hosts[3]  # the second host of replica group 1
    spec = agent_spec(plan, host, "10.0.0.1:29400", {"USER_VAR": "kept"})
    assert (spec.host, spec.host_addr, spec.host_dir) == (host.name, host.addr, host.dir)
    assert (spec.job_dir, spec.run_id, spec.rdzv_endpoint) == (
        plan.job_dir,
        "ft-1-group-1",
        "10.0.0.1:29400",
    )
    assert (spec.command, spec.cwd, dict(spec.env)) == (
        tuple(plan.command),
        plan.cwd,
        {"USER_VAR": "kept"},
    )
    assert (spec.min_hosts, spec.max_restarts, spec.restart_in_round) == (2, 2, True)
    # torch counts ranks within the group; the job-wide rank names the files.
    assert [spec.job_rank(r) for r in (2, 3)] == [6, 7] == [r.rank for r in host.ranks]
    assert spec.planned_ranks == frozenset({6, 7})
    for rank, attempt in [(6, 0), (7, 0), (6, 1), (0, 0)]:
        assert spec.log_stem(rank, attempt) == plan.log_stem(host.name, rank, attempt)
    assert spec.log_stem(6, 0).endswith("/logs/rank-6")
    assert spec.log_stem(0, 0).endswith("/logs/rank-0.algo-4.attempt-0")
