"""A local job in torchft replica groups (``fault_tolerance``; docs/fault_tolerance.md).

Each group is its own elastic job: its hosts' agents join the group's own rendezvous (run id
``JOB-group-G`` on the launcher's store) and restart the group's workers on their own
(``elastic.max_restarts``), while the other groups train on; torchft's lighthouse, started
here, forms the quorum of the groups at every step, and a restarted group heals from a peer.
The job fails only when fewer than ``min_replicas`` groups can go on.

The workers report their progress (:mod:`tenter.runtime.ft`): the last step each group
committed, and a heal; this launcher turns a group's restart into a ``replica_lost`` event,
and both into console lines::

    tenter: replica group 1 lost at step 812 (algo-2: a worker failed; restarting it)
    tenter: replica group 1 healed at step 815 from group 0
"""

from __future__ import annotations

import signal
import threading

from tenter.contract.plan import Plan
from tenter.errors import TenterError
from tenter.jobdir import layout
from tenter.jobdir.events import Event, EventKind, is_kind, record_event
from tenter.jobdir.results import JobResult, JobState
from tenter.launch.backends.local.job import LocalJob
from tenter.launch.launcher.lighthouse import Lighthouse
from tenter.launch.shared.console import EventFeed, say
from tenter.launch.shared.processes import env_of, job_processes, kill_all


def last_step(job_dir: str, group: int) -> int | None:
    try:
        return int(
            (layout.logs_dir(job_dir) / layout.REPLICA_STEP_FILE.format(group=group)).read_text()
        )
    except (FileNotFoundError, ValueError):
        return None


def _lost(event: Event) -> str:
    step = event.get("step")
    at = f"at step {step}" if step is not None else "before its first step"
    return f"replica group {event['group']} lost {at} ({event['why']})"


class ReplicaEventFeed(EventFeed):
    """The agents' events, plus the replica groups': a group's restart is a lost replica."""

    def __init__(self, plan: Plan) -> None:
        super().__init__(plan.job_dir)
        self._plan = plan

    def record_lost(self, group: int, why: str) -> None:
        """A replica group lost (printed when the feed reads it back)."""
        step = last_step(self._plan.job_dir, group)
        record_event(self._plan.job_dir, EventKind.REPLICA_LOST, group=group, step=step, why=why)

    def _show(self, event: Event) -> None:
        if is_kind(event, EventKind.REPLICA_LOST):
            say(_lost(event))
        elif is_kind(event, EventKind.REPLICA_HEALED):
            source = event.get("source")
            peer = f" from group {source}" if source is not None else ""
            say(f"replica group {event['group']} healed at step {event['step']}{peer}")
        else:
            if is_kind(event, EventKind.RESTART):
                host = str(event["host"])
                group = next(h.replica_group for h in self._plan.hosts if h.name == host)
                self.record_lost(group, f"{host}: a worker failed; restarting the group")
            super()._show(event)


class ReplicaGroupsJob(LocalJob):
    a_rank_fails_the_job = False
    """A rank's failure fails its group, not the job: :meth:`check_processes` decides."""

    def __init__(self, plan: Plan) -> None:
        super().__init__(plan)
        self.feed = ReplicaEventFeed(plan)
        self.events = self.feed
        self.lighthouse = Lighthouse(
            plan.job_dir,
            plan.lighthouse.removeprefix("http://").rsplit(":", 1)[0],
            plan.min_replicas,
            plan.lighthouse_heartbeat_ms,
            env={"TENTER_JOB_ID": plan.job_id},
        )
        self.down: set[int] = set()
        """Groups that cannot go on (their restarts are spent, or an agent was killed)."""
        self._lighthouse_lost = False

    def start_processes(self) -> None:
        if self.network is not None:
            self.lighthouse.enter = self.network.enter_switch(self.plan.job_dir)
        self.lighthouse.start()
        address = self.lighthouse.address
        say(f"torchft lighthouse at {address}; {self.plan.replica_groups} replica groups")
        super().start_processes()

    def wait(self, stop: threading.Event) -> JobResult:
        try:
            return super().wait(stop)
        finally:
            self.lighthouse.stop()

    def group_hosts(self, group: int) -> list[int]:
        return [h.index for h in self.plan.hosts if h.replica_group == group]

    def check_processes(self) -> JobState:
        """running, succeeded or failed: per group, and the job fails only when fewer than
        ``min_replicas`` groups can go on."""
        if self._lighthouse_lost:
            return JobState.FAILED
        finished = 0
        for group in range(self.plan.replica_groups):
            if group in self.down:
                continue
            codes = [self.procs[i].poll() for i in self.group_hosts(group)]
            failed = next((c for c in codes if c not in (None, 0)), None)
            if failed is not None:
                self._lose_group(
                    group,
                    f"an agent was killed by {signal.Signals(-failed).name}"
                    if failed < 0
                    else "its restarts are spent",
                )
            elif all(c == 0 for c in codes):
                finished += 1
        going_on = self.plan.replica_groups - len(self.down)
        if going_on < self.plan.min_replicas:
            self.extra.append(
                f"{going_on} replica groups left, fewer than min_replicas {self.plan.min_replicas}"
            )
            return JobState.FAILED
        return JobState.SUCCEEDED if finished == going_on else JobState.RUNNING

    def _lose_group(self, group: int, why: str) -> None:
        self.down.add(group)
        names = [self.plan.hosts[i].name for i in self.group_hosts(group)]
        # Its other agents and its workers (in sessions of their own) go with it.
        for i in self.group_hosts(group):
            if self.procs[i].poll() is None:
                self.procs[i].kill()
                self.procs[i].wait()
        kill_all([p for p in job_processes(self.plan.job_id) if env_of(p, "TENTER_HOST") in names])
        self.lost.update(self.group_hosts(group))
        for name in names:
            self.lost_hosts[name] = f"replica group {group} stopped: {why}"
        self.feed.record_lost(group, why)

    def fence_host(self, index: int, why: str) -> None:
        """A host cut off by a partition: its replica group stops (its agents and workers, so
        that none comes back with stale state when the network does) and the other groups go
        on at once, without a restart or a roll-back: their connections to the host are
        closed, so a step they share with it fails now rather than at torchft's timeout
        (the Manager's, for a collective: 10 s in the example, 60 s by default) and is done
        again, and the lighthouse's next quorum leaves the group out (its heartbeats stopped
        with the partition). ``tenter fault heal`` brings the group back."""
        host = self.plan.hosts[index]
        self._lose_group(host.replica_group, f"{host.name} {why}")
        assert self.network is not None, "only isolated hosts are partitioned"
        try:
            self.network.drop_connections_to(host.name)
        except OSError as e:  # the kernel cannot: the others wait out torchft's timeout
            say(f"cannot close the connections to {host.name} ({e}); torchft's timeout will")

    def restart_agent(self, index: int) -> None:
        """A healed host's group starts again (every host of it) and heals from a peer."""
        group = self.plan.hosts[index].replica_group
        for i in self.group_hosts(group):
            super().restart_agent(i)
        self.down.discard(group)

    def on_tick(self) -> None:
        super().on_tick()  # hosts joining, and network faults
        try:
            self.lighthouse.keep_alive()
        except TenterError as e:  # its port was taken meanwhile: the groups cannot reach it
            self.extra.append(f"{e.what}; {e.fix}")
            self._lighthouse_lost = True
