"""One simulated host: ``python -m tenter.launch.agent PLAN_JSON HOST_INDEX RDZV_PORT``.

A thin shell around torch elastic's ``LocalElasticAgent`` (process supervision, restarts,
c10d rendezvous and error files are all torch's): it reads its host's part of the plan,
joins the job's rendezvous with the host's own loopback address (so the group rank is the
host index), runs the workers with their output in the plan's per-rank files, and writes
what happened to ``agent-result.json`` in the host directory for the launcher to report.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from torch.distributed.elastic.agent.server.api import RunResult, WorkerSpec, WorkerState
from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent
from torch.distributed.elastic.multiprocessing.api import LogsDest, LogsSpecs, SignalException
from torch.distributed.elastic.rendezvous import RendezvousParameters
from torch.distributed.elastic.rendezvous import registry as rdzv_registry

from tenter.launch.plan import HostPlan, Plan

RESULT_FILE = "agent-result.json"
RDZV_JOIN_TIMEOUT_S = 120
PARENT_POLL_S = 0.5


@dataclass(frozen=True)
class WorkerFailure:
    rank: int
    local_rank: int
    pid: int
    exit_code: int
    timestamp: float
    error_file: str


@dataclass(frozen=True)
class AgentResult:
    state: str
    """SUCCEEDED, FAILED, STOPPED (by a signal) or ERROR (the agent itself failed)."""
    failures: list[WorkerFailure]
    message: str = ""


class HostLogsSpecs(LogsSpecs):
    """Each worker writes to the plan's per-rank files, named by global rank."""

    def __init__(self, host: HostPlan) -> None:
        super().__init__(log_dir=str(Path(host.ranks[0].stdout).parent))
        self._by_rank = {r.rank: r for r in host.ranks}

    @property
    def root_log_dir(self) -> str:
        return str(self._root_log_dir)

    def reify(self, envs: dict[int, dict[str, str]]) -> LogsDest:
        ranks = {local: self._by_rank[int(env["RANK"])] for local, env in envs.items()}
        for local, rank in ranks.items():
            # torch's `record` writes the worker's uncaught exception there.
            envs[local]["TORCHELASTIC_ERROR_FILE"] = rank.error_file
        return LogsDest(
            stdouts={local: r.stdout for local, r in ranks.items()},
            stderrs={local: r.stderr for local, r in ranks.items()},
            tee_stdouts={},
            tee_stderrs={},
            error_files={local: r.error_file for local, r in ranks.items()},
        )


def _stop_when_orphaned() -> None:
    """If the launcher dies (even by SIGKILL), stop this host's workers instead of lingering."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="tenter-orphan-watch", daemon=True).start()


def _failures(result: RunResult, host: HostPlan) -> list[WorkerFailure]:
    error_files = {r.rank: r.error_file for r in host.ranks}
    out = []
    for rank, f in result.failures.items():
        error_file = error_files[rank]
        # The error file's mtime is when the exception was recorded, to the nanosecond;
        # torch's own timestamp is whole seconds, too coarse to find the first failure.
        stamp = os.stat(error_file).st_mtime if os.path.exists(error_file) else time.time()
        out.append(WorkerFailure(rank, f.local_rank, f.pid, f.exitcode, stamp, error_file))
    return out


def run_host(plan: Plan, host: HostPlan, rdzv_port: int) -> AgentResult:
    params = RendezvousParameters(
        backend="c10d",
        endpoint=plan.rdzv_endpoint.replace("${rdzv_port}", str(rdzv_port)),
        run_id=plan.job_id,
        min_nodes=len(plan.hosts),
        max_nodes=len(plan.hosts),
        local_addr=host.addr,
        is_host=False,  # the launcher serves the rendezvous store
        join_timeout=RDZV_JOIN_TIMEOUT_S,
    )
    spec = WorkerSpec(
        role="default",
        local_world_size=plan.procs_per_host,
        entrypoint=plan.command[0],
        args=tuple(plan.command[1:]),
        rdzv_handler=rdzv_registry.get_rendezvous_handler(params),
        max_restarts=plan.max_restarts,
        monitor_interval=0.1,
        local_addr=host.addr,
    )
    agent = LocalElasticAgent(spec=spec, logs_specs=HostLogsSpecs(host), start_method="spawn")
    try:
        result = agent.run()
    except SignalException as e:
        return AgentResult("STOPPED", [], f"stopped by {signal.Signals(e.sigval).name}")
    finally:
        spec.rdzv_handler.shutdown()
    state = "SUCCEEDED" if result.state == WorkerState.SUCCEEDED else "FAILED"
    return AgentResult(state, _failures(result, host))


def main(argv: list[str]) -> int:
    plan_path, host_index, rdzv_port = argv
    # The agent's own log is a file in the job directory; keep torch elastic's INFO lines
    # (rendezvous rounds, worker starts and exits), which are what explain a stuck job.
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("torch.distributed.elastic").setLevel(logging.INFO)
    _stop_when_orphaned()
    plan = Plan.from_json(Path(plan_path).read_text())
    host = plan.hosts[int(host_index)]
    try:
        result = run_host(plan, host, int(rdzv_port))
    except Exception as e:  # rendezvous timeouts and the like: report, don't just die
        logging.exception("agent of %s failed", host.name)
        result = AgentResult("ERROR", [], f"{type(e).__name__}: {e}")
    tmp = Path(host.dir) / f".{RESULT_FILE}.tmp"
    tmp.write_text(json.dumps(asdict(result)))
    tmp.replace(Path(host.dir) / RESULT_FILE)
    return 0 if result.state == "SUCCEEDED" else 1


if __name__ == "__main__":
    code = main(sys.argv[1:])
    # Everything is written; skip interpreter finalisation (a second with torch loaded),
    # which would only delay the launcher's view of this host's end.
    logging.shutdown()
    os._exit(code)
