"""What one host's agent runs, as torch elastic's agent takes a ``WorkerSpec``: the part of
the plan that the agent's loop and its workers' entries read (:class:`AgentSpec`), made from
the plan for one host by a pure function (:func:`agent_spec`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tenter.contract.plan import HostPlan, Plan
from tenter.jobdir import layout


@dataclass(frozen=True)
class AgentSpec:
    """One host's agent's input: its ranks, what its workers run, its rendezvous and restart
    policy, and where in the job directory it writes."""

    host: str
    host_addr: str
    host_dir: str
    """Where the agent writes its result (:func:`tenter.jobdir.agent_result.write_result`)."""
    job_dir: str
    """Where its events, worker logs and control files are."""
    run_id: str
    """The rendezvous the host joins."""
    command: tuple[str, ...]
    cwd: str
    env: Mapping[str, str]
    """Every worker's environment but its rank's variables."""
    procs_per_host: int
    first_rank: int
    """The job-wide rank of torch's rank 0 in the host's rendezvous (its replica group's)."""
    planned_ranks: frozenset[int]
    """The job-wide ranks the plan gives this host: their first attempt logs to ``rank-N``."""
    rdzv_endpoint: str
    min_hosts: int
    max_restarts: int
    restart_in_round: bool
    hang_timeout: int | None

    def job_rank(self, rank: int) -> int:
        """The job-wide rank of torch's ``RANK`` (see :meth:`Plan.job_rank`)."""
        return self.first_rank + rank

    def log_stem(self, job_rank: int, attempt: int) -> str:
        """Where a worker's logs go (see :meth:`Plan.log_stem`)."""
        planned = job_rank in self.planned_ranks
        return layout.worker_log_stem(self.job_dir, job_rank, self.host, attempt, planned=planned)


def agent_spec(plan: Plan, host: HostPlan, rdzv_endpoint: str, env: Mapping[str, str]) -> AgentSpec:
    """The agent's input for ``host`` of ``plan``, its rendezvous at ``rdzv_endpoint``
    (:func:`tenter.launch.agent.rendezvous.endpoint`), its workers' environment ``env``."""
    return AgentSpec(
        host=host.name,
        host_addr=host.addr,
        host_dir=host.dir,
        job_dir=plan.job_dir,
        run_id=plan.run_id(host),
        command=tuple(plan.command),
        cwd=plan.cwd,
        env=dict(env),
        procs_per_host=plan.procs_per_host,
        first_rank=plan.job_rank(host, 0),
        planned_ranks=plan.planned_ranks_of(host.name),
        rdzv_endpoint=rdzv_endpoint,
        min_hosts=plan.min_hosts,
        max_restarts=plan.max_restarts,
        restart_in_round=plan.restart_in_round,
        hang_timeout=plan.hang_timeout,
    )
