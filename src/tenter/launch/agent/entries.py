"""What the agent starts in a round and what it is asked to kill: each worker of the host as a
:class:`WorkerEntry` (the plan's command and directory; the environment the agent was started
with, the round's torchrun variables and the agent's own, composed by
:func:`tenter.contract.torchrun.worker_env`; this attempt's files), and what the job's
control folder asks of it (:class:`ControlRequests`)."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence

from tenter.contract.torchrun import torchrun_env, worker_env
from tenter.jobdir import layout
from tenter.jobdir.agent_result import WorkerFailure
from tenter.jobdir.control import control_dir, hang_stopped_at, rank_kill_reply, rank_kill_request
from tenter.jobdir.events import EventKind, record_event
from tenter.jobdir.layout import write_atomic
from tenter.jobdir.line_files import record_worker_logs
from tenter.launch.agent.rendezvous import Round
from tenter.launch.agent.spec import AgentSpec
from tenter.launch.agent.workers import WorkerEntry, WorkerGroup
from tenter.launch.diagnosis.rank_signals import RelayAnswers

logger = logging.getLogger(__name__)


def record_round(spec: AgentSpec, round_: Round, attempt: int) -> None:
    """The round this host's workers start in, for the launcher (and where this host serves
    the workers' store)."""
    record_event(
        spec.job_dir,
        EventKind.RENDEZVOUS,
        host=spec.host,
        group_rank=round_.group_rank,
        hosts=round_.hosts,
        world_size=round_.hosts * spec.procs_per_host,
        attempt=attempt,
        restarts_in_round=round_.restarts,
        restart_count=round_.restart_count,
        planned=round_.planned,
    )
    if round_.workers_store is not None:
        record_event(
            spec.job_dir,
            EventKind.WORKERS_STORE,
            host=spec.host,
            attempt=attempt,
            port=round_.master_port,
        )


def record_restart(
    spec: AgentSpec,
    restart_count: int,
    remaining: int,
    used: bool,
    failures: Sequence[WorkerFailure],
) -> None:
    """This host's agent begins to stop its workers for restart ``restart_count`` (``used``:
    one of the job's restarts; ``failures``: its own failed workers). With when its first
    worker failed, and whether one was killed by a signal: the launcher names the host whose
    failure came first (the others' may be its echo)."""
    record_event(
        spec.job_dir,
        EventKind.RESTART,
        host=spec.host,
        run_id=spec.run_id,
        restart_count=restart_count,
        used=used,
        remaining=remaining,
        failed_at=min((f.timestamp for f in failures), default=None),
        killed=any(f.exit_code < 0 for f in failures),
    )


def record_stopped(spec: AgentSpec, restart_count: int) -> None:
    """The agent's workers stopped for the restart (the timeline of a recovery's stop)."""
    record_event(spec.job_dir, EventKind.STOPPED, host=spec.host, restart_count=restart_count)


def worker_entries(
    spec: AgentSpec, round_: Round, attempt: int, restart_count: int
) -> list[WorkerEntry]:
    """This host's workers in ``round_`` (``restart_count``: the job's group restarts before
    it), their log files recorded for ``attempt``."""
    entries = []
    world_size = round_.hosts * spec.procs_per_host
    for local_rank in range(spec.procs_per_host):
        rank = round_.group_rank * spec.procs_per_host + local_rank
        job_rank = spec.job_rank(rank)
        stem = spec.log_stem(job_rank, attempt)
        torchrun = torchrun_env(
            rank=rank,
            local_rank=local_rank,
            group_rank=round_.group_rank,
            local_world_size=spec.procs_per_host,
            num_hosts=round_.hosts,
            master_addr=round_.master_addr,
            master_port=str(round_.master_port),
            run_id=spec.run_id,
            max_restarts=spec.max_restarts,
            restart_count=restart_count,
        )
        watch_file = layout.watch_file(stem) if spec.hang_timeout else None
        entry = WorkerEntry(
            rank=job_rank,
            local_rank=local_rank,
            argv=spec.command,
            env=worker_env(spec.env, torchrun, layout.error_file(stem), watch_file),
            cwd=spec.cwd,
            stdout=layout.stdout_file(stem),
            stderr=layout.stderr_file(stem),
            error_file=layout.error_file(stem),
        )
        record_worker_logs(
            layout.logs_dir(spec.job_dir),
            layout.rank_stem(entry.stdout, layout.STDOUT_SUFFIX),
            job_rank,
            local_rank,
            spec.host,
            attempt,
            world_size,
        )
        entries.append(entry)
    return entries


class ControlRequests:
    """``tenter fault JOB kill --rank N`` for a rank of this host's: SIGKILL its worker, as a
    crash would end it (the restart that follows is the job's); a Slurm job's hang watch's
    signals to this host's ranks (:class:`~tenter.launch.diagnosis.rank_signals.RelayAnswers`)
    and its stop (:attr:`hang_stop`). One ``stat`` of the control folder per look; its
    requests are read only when it changed."""

    def __init__(self, job_dir: str, host: str, host_dir: str) -> None:
        self._job_dir, self._host = job_dir, host
        self._mtime: int | None = None
        """The control folder's mtime when its requests were last read, twice."""
        self._seen: int | None = None
        """Its mtime at the last look."""
        self._relay = RelayAnswers(job_dir, host, host_dir)
        self.hang_stop = False
        """The job's hang watch stops the job (``on_hang: stop``)."""

    def take(self, group: WorkerGroup) -> None:
        self._relay.refresh()
        try:
            mtime = os.stat(control_dir(self._job_dir)).st_mtime_ns
        except OSError:
            return
        if mtime == self._mtime:
            return
        # A folder's mtime moves by the kernel's clock tick (milliseconds): a second change
        # within the tick after a look (a request's rename after its temp file) keeps it. So
        # a change is read twice, at the look that sees it and at the next.
        self._mtime = mtime if mtime == self._seen else None
        self._seen = mtime
        self._relay.answer()
        self.hang_stop = hang_stopped_at(self._job_dir) is not None
        for rank in group.ranks():
            request = rank_kill_request(self._job_dir, rank)
            if request.exists():
                pid = group.kill_rank(rank)
                logger.info("fault: rank %d (pid %s) killed (SIGKILL) on request", rank, pid)
                reply = {"host": self._host, "pid": pid}
                write_atomic(rank_kill_reply(self._job_dir, rank), json.dumps(reply))
                request.unlink(missing_ok=True)
