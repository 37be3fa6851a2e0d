"""One simulated host: ``python -m tenter.launch.agent PLAN_JSON HOST_INDEX RDZV_PORT``.

A thin shell around torch elastic's ``LocalElasticAgent`` (process supervision, restarts,
c10d rendezvous and error files are all torch's): it reads its host's part of the plan,
joins the job's rendezvous with the host's own loopback address (so the group rank is the
host index), runs the workers with their output in the plan's per-rank files, and writes
what happened to ``agent-result.json`` in the host directory for the launcher to report.

Signals: the launcher of a local job stops its agents with SIGTERM and preempts the job
itself. On a scheduler's nodes (Slurm) SIGTERM comes from the scheduler (``scancel``, a
preemption) and asks for a preemption: the agent writes the request its workers check at
their step boundaries and lets them finish, stopping them only once the spec's
``checkpoint.preemption_grace`` has passed.

Restarts are fast: workers start from warm spares (:mod:`tenter.launch.warm`), and the
rendezvous polls its shared state every :data:`RDZV_POLL_S` rather than torch's 1 s.
"""

from __future__ import annotations

import json
import logging
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from types import FrameType
from typing import Any

import torch.distributed.elastic.multiprocessing.api as torch_processes
from torch.distributed.elastic.agent.server.api import (
    RunResult,
    Worker,
    WorkerGroup,
    WorkerSpec,
    WorkerState,
)
from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent
from torch.distributed.elastic.multiprocessing.api import LogsDest, LogsSpecs, SignalException
from torch.distributed.elastic.multiprocessing.subprocess_handler import SubprocessHandler
from torch.distributed.elastic.rendezvous import (
    RendezvousError,
    RendezvousParameters,
    dynamic_rendezvous,
)
from torch.distributed.elastic.rendezvous import registry as rdzv_registry
from torch.distributed.elastic.rendezvous.utils import _delay

from tenter.contract.plan import RDZV_PORT, HostPlan, Plan
from tenter.contract.torchrun import finished_marker
from tenter.jobdir.control import request_preemption, stopping_marker
from tenter.jobdir.records import EVENTS_FILE, append_line, record_worker_logs
from tenter.launch.console import read_index
from tenter.launch.processes import STOP_GRACE_S, dies_with_parent
from tenter.launch.report import AGENT_RESULT
from tenter.launch.signals import STOP_SIGNALS
from tenter.launch.warm import WarmPool

RDZV_POLL_S = 0.05
"""How often a host waiting in a rendezvous round reads the round's state. torch waits 1 s,
and serves reads from a copy up to 1 s old (to spare a store that thousands of hosts share):
every round, restarts included, then ends up to two seconds after its last host joined, and
a running host sees a host waiting to join up to a second late. A tenter job's store serves
a few hosts, each reading it at most every 0.05 s while waiting and every 0.1 s (the
agent's monitor interval) while running."""


def _rendezvous_delay(seconds: float | tuple[float, float]) -> None:
    # torch's dynamic rendezvous asks for 1 s between polls of the state, and for random
    # delays (a tuple) to skew the first joins; only the poll is shortened.
    _delay(RDZV_POLL_S if seconds == 1 else seconds)


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
    """Each worker writes to files named by the plan's :meth:`Plan.log_stem`; every file set
    opened is listed in ``logs/index.jsonl`` for the launcher's console and report."""

    def __init__(self, plan: Plan, host: HostPlan) -> None:
        super().__init__(log_dir=str(Path(plan.job_dir) / "logs"))
        self._plan, self._host = plan, host
        # An agent restarted on a host (after a partition) goes on from its predecessor's
        # rounds: its files must not overwrite theirs.
        self.attempt = max(
            (int(str(e["attempt"])) for e in read_index(plan.job_dir) if e["host"] == host.name),
            default=-1,
        )
        """Rendezvous rounds this host joined, minus one. torch's TORCHELASTIC_RESTART_COUNT
        cannot name files: it counts this host's failures only, and a restart caused by a
        membership change leaves it unchanged."""

    @property
    def root_log_dir(self) -> str:
        return str(self._root_log_dir)

    def reify(self, envs: dict[int, dict[str, str]]) -> LogsDest:
        stems = {}
        for local, env in envs.items():
            rank = self._plan.job_rank(self._host, int(env["RANK"]))
            stem = self._plan.log_stem(self._host.name, rank, self.attempt)
            stems[local] = stem
            # torch's `record` (and tenter's bootstrap) write the worker's failure there.
            env["TORCHELASTIC_ERROR_FILE"] = f"{stem}.error.json"
            if self._plan.hang_timeout:
                env["TENTER_WATCH_FILE"] = f"{stem}.watch"
            record_worker_logs(
                Path(self.root_log_dir), stem, rank, local, self._host.name, self.attempt
            )
        return LogsDest(
            stdouts={local: f"{stem}.stdout" for local, stem in stems.items()},
            stderrs={local: f"{stem}.stderr" for local, stem in stems.items()},
            tee_stdouts={},
            tee_stderrs={},
            error_files={local: f"{stem}.error.json" for local, stem in stems.items()},
        )


class HostAgent(LocalElasticAgent):
    """torch's local agent, telling the launcher about rendezvous rounds and restarts."""

    def __init__(self, plan: Plan, host: HostPlan, spec: WorkerSpec, pool: WarmPool | None) -> None:
        self.logs = HostLogsSpecs(plan, host)
        super().__init__(spec=spec, logs_specs=self.logs, start_method="spawn")
        self._events = Path(plan.job_dir) / EVENTS_FILE
        self._host = host.name
        self._stopping = stopping_marker(plan.job_dir, host.name)
        self._pool = pool

    def _event(self, event: str, **fields: Any) -> None:
        append_line(
            self._events, {"event": event, "host": self._host, "time": time.time(), **fields}
        )

    def _rendezvous(self, worker_group: WorkerGroup) -> None:
        super()._rendezvous(worker_group)
        self.logs.attempt += 1
        hosts = worker_group.group_world_size or 0
        self._event(
            "rendezvous",
            group_rank=worker_group.group_rank,
            hosts=hosts,
            world_size=hosts * worker_group.spec.local_world_size,
            attempt=self.logs.attempt,
        )

    def _assign_worker_ranks(
        self, store: Any, group_rank: int, group_world_size: int, spec: WorkerSpec
    ) -> list[Worker]:
        """Every host runs ``procs_per_host`` workers of one role: the ranks follow from the
        group rank, without torch's exchange through the store (which waits for the slowest
        host to finish its rendezvous)."""
        world = group_world_size * spec.local_world_size
        first = group_rank * spec.local_world_size
        return [
            Worker(local, first + local, first + local, world, world)
            for local in range(spec.local_world_size)
        ]

    def _monitor_workers(self, worker_group: WorkerGroup) -> RunResult:
        if self._pool is not None:
            self._pool.fill_when_due()
        result: RunResult = super()._monitor_workers(worker_group)
        return result

    def _restart_workers(self, worker_group: WorkerGroup) -> None:
        self._event("restart", remaining=self._remaining_restarts)
        if self._pool is not None:
            # A failure within REFILL_DELAY_S of the start finds the pool still empty: the
            # restarted workers need their spares now.
            self._pool.fill()
        super()._restart_workers(worker_group)

    def _shutdown(self, death_sig: signal.Signals = signal.SIGTERM, timeout: int = 30) -> None:
        """Stop the workers: ``death_sig``, then SIGKILL after tenter's grace period (torch's
        is 30 s). Further stop signals are ignored meanwhile: torch raises on them out of its
        wait, which skipped the SIGKILL and left the workers of a script that traps SIGTERM
        running after their agent. The workers are told it is a stop, not a preemption."""
        previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in STOP_SIGNALS}
        self._stopping.parent.mkdir(exist_ok=True)
        self._stopping.touch()
        try:
            super()._shutdown(death_sig, timeout=math.ceil(STOP_GRACE_S))
        finally:
            self._stopping.unlink(missing_ok=True)
            for sig, handler in previous.items():
                signal.signal(sig, handler)


class WorkerDyingWithAgent(SubprocessHandler):
    """torch's worker process, which the kernel SIGKILLs if its agent dies (a SIGKILLed agent
    runs no cleanup; its workers, in sessions of their own, would otherwise live on); a warm
    spare of the host's pool when one can stand in for it."""

    def __init__(
        self,
        *args: Any,
        pool: WarmPool | None,
        crashed_at_exit: list[WorkerFailure],
        **kwargs: Any,
    ) -> None:
        # Before torch's __init__, which starts the process.
        self._pool, self._crashed_at_exit = pool, crashed_at_exit
        super().__init__(*args, **kwargs)

    def _popen(self, args: tuple[str, ...], env: dict[str, str]) -> subprocess.Popen[bytes]:
        proc = self._pool and self._pool.take(
            args, env, *(None if f is None else f.name for f in (self._stdout, self._stderr))
        )
        if not proc:
            proc = subprocess.Popen(
                args=args,
                env=env,
                stdout=self._stdout,
                stderr=self._stderr,
                start_new_session=True,  # as torch's: the agent signals each worker's group
                preexec_fn=dies_with_parent(signal.SIGKILL),
            )
        self._finished_is_success(proc, env)
        return proc

    def _finished_is_success(self, proc: subprocess.Popen[bytes], env: dict[str, str]) -> None:
        """A worker that finished its script and then died in interpreter teardown (gloo's
        threads, a crash handler at exit) did its work: torch sees it exit 0, so that it does
        not stop the host's other workers, which may still be finishing theirs. The real
        status is kept for the report (a note, not a failure)."""
        error_file = env.get("TORCHELASTIC_ERROR_FILE", "")
        poll = proc.poll

        def poll_finished() -> int | None:
            code = poll()
            if not code or not error_file or os.path.exists(error_file):
                return code
            if not os.path.exists(finished_marker(error_file)):
                return code
            if not any(f.pid == proc.pid for f in self._crashed_at_exit):
                rank, local = int(env.get("RANK", "-1")), int(env.get("LOCAL_RANK", "-1"))
                failure = WorkerFailure(rank, local, proc.pid, code, time.time(), error_file)
                self._crashed_at_exit.append(failure)
            return 0

        proc.poll = poll_finished  # type: ignore[method-assign]


def preempting_handler(plan: Plan, host: HostPlan) -> Callable[[int, FrameType | None], None]:
    """torch's stop-signal handler, for an agent whose SIGTERM comes from the scheduler: a
    SIGTERM writes the preemption request and arms a timer for the grace period, at whose end
    the workers are stopped as that SIGTERM would have (other signals stop them at once)."""
    stop_now = torch_processes._terminate_process_handler

    def handle(signum: int, frame: FrameType | None) -> None:
        if signum != signal.SIGTERM:
            stop_now(signum, frame)
            return
        request_preemption(plan.job_dir, plan.preemption_grace, by=host.name)
        signal.signal(signal.SIGALRM, lambda _, f: stop_now(signal.SIGTERM, f))
        if signal.getitimer(signal.ITIMER_REAL)[0] == 0:  # a second SIGTERM keeps the deadline
            signal.setitimer(signal.ITIMER_REAL, plan.preemption_grace)

    return handle


def _failures(result: RunResult, plan: Plan, host: HostPlan, attempt: int) -> list[WorkerFailure]:
    out = []
    for group_rank, f in result.failures.items():
        rank = plan.job_rank(host, group_rank)
        error_file = f"{plan.log_stem(host.name, rank, attempt)}.error.json"
        # The error file's mtime is when the exception was recorded, to the nanosecond;
        # torch's own timestamp is whole seconds, too coarse to find the first failure.
        stamp = os.stat(error_file).st_mtime if os.path.exists(error_file) else time.time()
        out.append(WorkerFailure(rank, f.local_rank, f.pid, f.exitcode, stamp, error_file))
    return out


def run_host(plan: Plan, host: HostPlan, rdzv_port: int, pool: WarmPool | None) -> AgentResult:
    params = RendezvousParameters(
        backend=plan.rdzv_backend,
        endpoint=plan.rdzv_endpoint.replace(RDZV_PORT, str(rdzv_port)),
        run_id=plan.run_id(host),
        min_nodes=plan.min_hosts,
        max_nodes=plan.max_hosts,
        local_addr=host.addr,
        is_host=False,  # the launcher serves the c10d store
        join_timeout=plan.join_timeout,
        last_call_timeout=plan.last_call_timeout,
        keep_alive_interval=plan.keep_alive_s,
    )
    rdzv_handler = rdzv_registry.get_rendezvous_handler(params)
    if isinstance(rdzv_handler, dynamic_rendezvous.DynamicRendezvousHandler):
        holder = rdzv_handler._state_holder
        if isinstance(holder, dynamic_rendezvous._BackendRendezvousStateHolder):
            holder._cache_duration = 0  # see RDZV_POLL_S
    spec = WorkerSpec(
        role="default",
        local_world_size=plan.procs_per_host,
        entrypoint=plan.command[0],
        args=tuple(plan.command[1:]),
        rdzv_handler=rdzv_handler,
        max_restarts=plan.max_restarts,
        monitor_interval=0.1,
        local_addr=host.addr,
    )
    agent = HostAgent(plan, host, spec, pool)
    try:
        result = agent.run()
    except SignalException as e:
        return AgentResult("STOPPED", [], f"stopped by {signal.Signals(e.sigval).name}")
    finally:
        spec.rdzv_handler.shutdown()
    state = "SUCCEEDED" if result.state == WorkerState.SUCCEEDED else "FAILED"
    return AgentResult(state, _failures(result, plan, host, agent.logs.attempt))


def _explain(error: Exception, plan: Plan, rdzv_port: str) -> str:
    """What went wrong, naming the rendezvous endpoint and the underlying cause."""
    text = f"{type(error).__name__}: {error}"
    if error.__cause__ is not None:
        text += f" (cause: {str(error.__cause__)[:300]})"
    if isinstance(error, RendezvousError):
        endpoint = plan.rdzv_endpoint.replace(RDZV_PORT, rdzv_port)
        text = f"rendezvous ({plan.rdzv_backend} at {endpoint}) failed: {text}"
        if plan.rdzv_backend == "etcd-v2":
            text += (
                "; check that etcd is reachable there and serves the v2 API "
                "(etcd <= 3.5 started with --enable-v2; etcd 3.6 removed it)"
            )
    return text


def main(argv: list[str]) -> int:
    plan_path, host_index, rdzv_port = argv
    plan = Plan.from_json(Path(plan_path).read_text())
    host = plan.hosts[int(host_index)]
    # First of all: the spares import torch while this agent joins the rendezvous (only
    # torch: the workers' start waits for them).
    pool = WarmPool.for_workers(plan.command, plan.procs_per_host)
    if pool is not None:
        pool.fill(preload=())
    # The agent's own log is a file in the job directory; keep torch elastic's INFO lines
    # (rendezvous rounds, worker starts and exits), which are what explain a stuck job.
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("torch.distributed.elastic").setLevel(logging.INFO)

    # The launcher starts this agent with a parent-death signal (SIGTERM): if it dies, this
    # host stops its workers as on a cancel. torch picks the handler class through this name.
    crashed_at_exit: list[WorkerFailure] = []

    def worker_handler(*args: Any, **kwargs: Any) -> SubprocessHandler:
        return WorkerDyingWithAgent(*args, pool=pool, crashed_at_exit=crashed_at_exit, **kwargs)

    torch_processes.get_subprocess_handler = worker_handler
    dynamic_rendezvous._delay = _rendezvous_delay
    if plan.backend != "local" and plan.preemption_grace:
        # torch installs its handler by this name when the workers start.
        handler = preempting_handler(plan, host)
        torch_processes._terminate_process_handler = handler  # type: ignore[assignment]
    try:
        result = run_host(plan, host, int(rdzv_port), pool)
        # What the report notes (the launcher sees this host succeed).
        result = replace(result, failures=[*result.failures, *crashed_at_exit])
    except Exception as e:  # rendezvous timeouts and the like: report, don't just die
        logging.exception("agent of %s failed", host.name)
        result = AgentResult("ERROR", [], _explain(e, plan, rdzv_port))
    finally:
        if pool is not None:
            pool.close()
    tmp = Path(host.dir) / f".{AGENT_RESULT}.tmp"
    try:
        tmp.write_text(json.dumps(asdict(result)))
        tmp.replace(Path(host.dir) / AGENT_RESULT)
    except OSError:  # a full disk: the launcher reports the silent exit status instead
        logging.exception("could not write %s", AGENT_RESULT)
        tmp.unlink(missing_ok=True)
    return 0 if result.state == "SUCCEEDED" else 1


if __name__ == "__main__":
    code = main(sys.argv[1:])
    # Everything is written; skip interpreter finalisation (a second with torch loaded),
    # which would only delay the launcher's view of this host's end.
    logging.shutdown()
    os._exit(code)
