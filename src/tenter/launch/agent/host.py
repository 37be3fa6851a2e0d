"""The host agent's state machine: rendezvous, start, monitor, restart, finish.

::

    RENDEZVOUS --> RUNNING --(all workers exited 0)--> exit barrier --> SUCCEEDED
        ^             |  \\
        |             |   (a worker failed anywhere, the job's restarts not spent: one used)
        |             |   (a host waits to join: none used)
        +-------------+-------- stop the workers
                      |
                      +--(a worker failed, the job's restarts spent)--> stop the workers --> FAILED
    any state --(a stop signal)--> stop the workers --> STOPPED

A job of fixed membership starts in the round its plan gives
(:func:`tenter.launch.agent.rendezvous.join_planned`: no round of torch's rendezvous); an
agent started again on a host (after a partition) joins torch's. A restart is a new
rendezvous round: the hosts that are still there (and any joining) form the next world, as
torchrun's agent does, and torch's rendezvous decides who is in it. Where a host that is gone
is known at once (a job of fixed membership, which cannot go on without it; a local job,
whose launcher declares lost hosts), the hosts restart their workers within the round
instead, without the lost ones (:mod:`tenter.launch.agent.in_round`: no second of torch's
rendezvous polls, no wait for a gone host's heartbeats to expire).
The per-rank environment is the worker contract's (:func:`tenter.contract.torchrun.
torchrun_env`).

``max_restarts`` is one budget for the job, as torchrun's ``--max-restarts`` counts it: a
group restart (a worker failed on any host, or a host was lost with it) uses one whichever
host's worker failed, and ``TORCHELASTIC_RESTART_COUNT`` is the group restarts so far, the same
on every rank. The hosts agree on it with the round: a restart within the round adds one
(every host of the round takes part in each), and a new round of torch's rendezvous takes the
most that any of its hosts knows (:attr:`Round.restart_count
<tenter.launch.agent.rendezvous.Round.restart_count>`: a host that failed counts its restart,
one that restarts for it or for a joining host does not, and a host's new agent knows none).
A host waiting to join uses none (torchrun's "membership changes do not count as retries").
"""

from __future__ import annotations

import enum
import logging
import signal
import time
from collections.abc import Callable, Sequence

from torch.distributed.elastic.rendezvous import (
    RendezvousClosedError,
    RendezvousGracefulExitError,
    RendezvousHandler,
)

from tenter.jobdir.agent_result import (
    JOINED_TOO_LATE,
    AgentResult,
    HostState,
    WorkerFailure,
)
from tenter.jobdir.control import (
    lost_hosts,
    preemption_requested,
    stopping_marker,
)
from tenter.launch.agent import in_round, rendezvous
from tenter.launch.agent.entries import (
    ControlRequests,
    record_restart,
    record_round,
    record_stopped,
    worker_entries,
)
from tenter.launch.agent.peer_looks import PeerLooks
from tenter.launch.agent.ranks_watch import RanksWatch
from tenter.launch.agent.spares import WarmPool
from tenter.launch.agent.spec import AgentSpec
from tenter.launch.agent.workers import GroupState, WorkerGroup, start_worker, stop_telling
from tenter.launch.shared.console import read_index

logger = logging.getLogger(__name__)

MONITOR_INTERVAL_S = 0.1
"""How often the agent checks its workers (and whether another host restarts): torchrun's
default (`--monitor-interval`)."""
EXIT_BARRIER_S = 300.0
"""How long a host whose workers all succeeded waits for the other hosts (torchrun's
``exit_barrier_timeout``)."""


class AgentState(enum.Enum):
    RENDEZVOUS = "rendezvous"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STOPPED = "stopped"


class StopSignal(Exception):
    """A stop signal reached the agent: stop the workers with it and end."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signal.Signals(signum)


def previous_attempts(job_dir: str, host: str) -> int:
    """Rendezvous rounds this host's earlier agents joined, minus one: an agent restarted on
    a host (after a partition) goes on from its predecessor's rounds, so that its files do
    not overwrite theirs. (``TORCHELASTIC_RESTART_COUNT`` cannot name files: it counts the
    job's group restarts, and a restart for a joining host leaves it unchanged.)"""
    return max(
        (int(str(e["attempt"])) for e in read_index(job_dir) if e["host"] == host),
        default=-1,
    )


class HostAgent:
    """Runs one host's workers of a job until they succeed, fail for good, or are stopped."""

    def __init__(
        self,
        spec: AgentSpec,
        handler: RendezvousHandler,
        pool: WarmPool | None,
        planned_round: Callable[[], rendezvous.Round] | None = None,
    ) -> None:
        self.spec, self.handler = spec, handler
        self.pool = pool
        self.state = AgentState.RENDEZVOUS
        self.restart_count = 0
        """The job's group restarts so far: those before the running workers started (as
        their round agreed), and the one this host has begun."""
        self.attempt = previous_attempts(spec.job_dir, spec.host)
        self.round: rendezvous.Round | None = None
        self.group = WorkerGroup([])
        self.crashed_at_exit: list[WorkerFailure] = []
        self._peers = PeerLooks(handler, spec.restart_in_round, MONITOR_INTERVAL_S)
        self._planned_round = planned_round
        self._stopping = stopping_marker(spec.job_dir, spec.host)
        self._preempting = False
        """The job is being preempted: the workers got SIGTERM and end by themselves."""
        self._requests = ControlRequests(spec.job_dir, spec.host, spec.host_dir)
        self._ranks_watch = RanksWatch(spec)

    @property
    def remaining_restarts(self) -> int:
        """The job's restarts not used yet."""
        return self.spec.max_restarts - self.restart_count

    # ---- the loop ----

    def run(self) -> AgentResult:
        """Run until the end; a stop signal (:class:`StopSignal`) ends it as STOPPED."""
        try:
            try:
                self._start_round()
            except (RendezvousClosedError, RendezvousGracefulExitError):
                if self.round is not None or self.attempt >= 0:
                    raise
                # Never in a round: a host that joined as the job ended, whose hosts finished
                # and closed the rendezvous before it entered. The job is done, not failed.
                logger.info("the job ended before %s entered it", self.spec.host)
                return AgentResult(HostState.SUCCEEDED, [], JOINED_TOO_LATE)
            while True:
                time.sleep(MONITOR_INTERVAL_S)
                result = self._step()
                if result is not None:
                    return result
        except StopSignal as stop:
            self._stop_workers(stop.signum)
            self.state = AgentState.STOPPED
            return AgentResult(HostState.STOPPED, [], str(stop))
        finally:
            if self.round is not None:
                self.round.close()

    def _step(self) -> AgentResult | None:
        """One look at the workers; the result once the agent is done."""
        if self.pool is not None:
            self.pool.fill_when_due()
        if self._preempting or preemption_requested(self.spec.job_dir):
            return self._preempted()
        self._requests.take(self.group)
        if self._requests.hang_stop:
            logger.info("the job hung (its hang report: hang-report.txt); stopping the workers")
            raise StopSignal(signal.SIGTERM)
        self._ranks_watch.look(self.group)  # before the poll: a failure is told at once
        state, failures = self.group.poll()
        if state is GroupState.SUCCEEDED:
            assert self.round is not None, "workers run only within a round"
            if rendezvous.exit_barrier(self.round, EXIT_BARRIER_S, self._restart_asked):
                logger.info("another host restarts as ours finished; restarting ours too")
                self._restart([])
                return None
            self.state = AgentState.SUCCEEDED
            return AgentResult(HostState.SUCCEEDED, [])
        if state is GroupState.FAILED:
            for f in failures:
                logger.info("rank %d (pid %d) failed (exit code %d)", f.rank, f.pid, f.exit_code)
            if self.remaining_restarts > 0:
                self._restart(failures)
                return None
            self._stop_workers(signal.SIGTERM)
            self.state = AgentState.FAILED
            return AgentResult(HostState.FAILED, failures)
        if self._restart_asked():
            logger.info("another host restarts its workers; restarting ours")
            self._restart([])
            return None
        if self._peers.hosts_waiting():  # membership changes use no restart, as torchrun's
            self._restart_in_new_round()
        return None

    def _restart_asked(self) -> bool:
        return self._peers.restart_asked(self.round)

    def _preempted(self) -> AgentResult | None:
        """A preemption: every worker gets SIGTERM at once, as torchrun passes it on (a script
        using tenter's checkpointer turns it into the agreed stop after a final checkpoint, a
        script with a handler of its own runs it, any other ends). The workers then end by
        themselves; none is restarted. The launcher's grace period is the deadline, after
        which it stops the agent as on a cancel."""
        if not self._preempting:
            self._preempting = True
            logger.info("the job is preempted: SIGTERM to the workers")
            self.group.pass_on(signal.SIGTERM)
        if self.group.running():
            return None
        _, failures = self.group.poll()
        self.state = AgentState.STOPPED
        return AgentResult(HostState.PREEMPTED, failures, "preempted")

    def _restart(self, failures: list[WorkerFailure]) -> None:
        """A group restart, which uses one of the job's restarts: stop the workers and start
        them again, within the round where the hosts agree on who goes on, in a new
        rendezvous round otherwise. ``failures``: this host's failed workers (none where
        another host's failure asked for the restart)."""
        self.restart_count += 1
        logger.info(
            "restarting the workers: group restart %d of %d",
            self.restart_count,
            self.spec.max_restarts,
        )
        self._stop_for_restart(used=True, failures=failures)
        if self.spec.restart_in_round and self.round is not None:
            self.state = AgentState.RENDEZVOUS
            next_round = in_round.restart(
                self.round,
                self.handler,
                self.spec.host,
                self.spec.host_addr,
                lambda: lost_hosts(self.spec.job_dir),
                self.spec.min_hosts,
            )
            if next_round is not None:
                self._start_workers(next_round)
                return
        self._start_round()

    def _restart_in_new_round(self) -> None:
        """Stop the workers and start them in a new round of torch's rendezvous, which the
        hosts waiting to join enter (no restart used)."""
        self._stop_for_restart(used=False)
        self._start_round()

    def _stop_for_restart(self, used: bool, failures: Sequence[WorkerFailure] = ()) -> None:
        record_restart(self.spec, self.restart_count, self.remaining_restarts, used, failures)
        self._stop_workers(signal.SIGTERM)
        record_stopped(self.spec, self.restart_count)
        if self.pool is not None:
            # Spares that died waiting, or a template that did, are replaced while the next
            # round forms.
            self.pool.fill()

    def _start_round(self) -> None:
        self.state = AgentState.RENDEZVOUS
        if self.round is not None:
            self.round.close()
        # The job's first round as planned, if given; every later one is torch's (as is the
        # first of an agent started again on a host: ``attempt`` goes on from its rounds).
        if self.attempt < 0 and self._planned_round is not None:
            self._start_workers(self._planned_round())
        else:
            self._start_workers(
                rendezvous.join(
                    self.handler, self.spec.host, self.spec.host_addr, self.restart_count
                )
            )

    def _start_workers(self, round_: rendezvous.Round) -> None:
        self.round = round_
        self.restart_count = round_.restart_count
        self.attempt += 1
        record_round(self.spec, round_, self.attempt)
        entries = worker_entries(self.spec, round_, self.attempt, self.restart_count)
        self.group = WorkerGroup([start_worker(entry, self.pool) for entry in entries])
        if self.pool is not None:
            self.pool.workers_started()
        self.state = AgentState.RUNNING

    def _stop_workers(self, sig: signal.Signals) -> None:
        stop_telling(self.group, sig, self._stopping)
        self.crashed_at_exit += self.group.crashed_at_exit
        self.group = WorkerGroup([])

    def finished_then_crashed(self) -> list[WorkerFailure]:
        """Workers that finished their script, then crashed at exit: notes for the report."""
        return [*self.crashed_at_exit, *self.group.crashed_at_exit]
