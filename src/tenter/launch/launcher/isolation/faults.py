"""Network faults on a running job's isolated hosts: ``tenter fault JOB partition|heal|kill HOST``.

::

    from tenter.launch.launcher.isolation import faults
    faults.partition(job_dir, "algo-2")   # returns once the launcher has cut algo-2 off
    faults.heal(job_dir, "algo-2")
    faults.kill(job_dir, "algo-2")        # SIGKILL its agent and workers: a lost host

The requester writes a request into the job's ``control/`` directory (as ``tenter join``
does) and waits for the launcher's reply; the launcher applies it with the
:class:`~tenter.launch.launcher.isolation.network.HostNetwork` it holds. The launcher, not the
requester, applies it because the fault is only half of the story: the launcher must know that a
host was cut off, and when, to tell a partition from a crash and to react as a cluster would.

What the launcher does (:class:`NetworkFaults`, driven by the local job's loop):

- ``partition``: the host's bridge port goes down. Once the host has missed the rendezvous
  heartbeats by which torch elastic declares a node dead (``keep_alive_s`` x 3), the launcher
  says ``host algo-2 unreachable since HH:MM:SS``. An elastic job (``min_hosts`` below the
  hosts left, restarts allowed) goes on without it: the host is *fenced* (its agent and
  workers killed, so no stale worker comes back with the network) and the other hosts'
  workers, blocked in a collective with it for gloo's 30-minute timeout, are restarted into a
  rendezvous round without it. A static job stops, with the partition as its one root cause.
  A partition healed before the heartbeats ran out is a blip the job does not notice (TCP
  retransmits what was lost).
- ``heal``: the port comes back up; a fenced host gets a fresh agent, which enters at the next
  rendezvous round (as a ``tenter join`` does).
- ``kill``: SIGKILL the host's agent and workers; the job handles it as any lost host.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol

from tenter.contract.plan import Plan
from tenter.errors import TenterError
from tenter.jobdir import control, layout
from tenter.jobdir.events import EventKind, record_event
from tenter.jobdir.lookup import is_running
from tenter.jobdir.results import Failure
from tenter.launch.diagnosis import root_cause
from tenter.launch.launcher.isolation.network import HostNetwork
from tenter.launch.launcher.isolation.running import running_local_job
from tenter.launch.shared.console import say
from tenter.spec.errors import counted

ACTIONS = {
    "partition": "cut HOST off the network (its bridge port down)",
    "heal": "plug a partitioned HOST back in",
    "kill": "SIGKILL HOST's agent and workers (a lost host)",
}
NEEDS_ISOLATION = ("partition", "heal")
"""``kill`` needs no network of its own: it works on any local job."""
REPLY_TIMEOUT_S = 30.0
"""The launcher takes requests on every poll (50 ms); this is for a launcher that died."""
HEARTBEAT_MISSES = 3
"""torch elastic's ``keep_alive_max_attempt``: a node missing this many heartbeats is dead."""


@dataclass(frozen=True)
class FaultRequest:
    action: str
    host: str
    id: str


@dataclass(frozen=True)
class FaultReply:
    ok: bool
    message: str


# ---- the requesting side (CLI, tests, benchmarks) ----


def partition(job: str | Path, host: str) -> str:
    """Cut ``host`` off the network; returns the launcher's reply once it is done."""
    return request(job, "partition", host)


def heal(job: str | Path, host: str) -> str:
    return request(job, "heal", host)


def kill(job: str | Path, host: str) -> str:
    return request(job, "kill", host)


RANK_KILL_TIMEOUT_S = 10.0
"""An agent looks at its requests every 0.1 s; a rank between two starts takes longer."""
RANK_KILL_BACKENDS = ("local", "slurm")
"""Whose agents take a rank's kill from the job directory (a Slurm job's nodes share it)."""


def kill_rank(job: str | Path, rank: int, timeout_s: float = RANK_KILL_TIMEOUT_S) -> str:
    """SIGKILL the worker of ``rank`` (a crash of one worker, not of its host): the agent
    that runs it does it at its next look, and says which process it was."""
    job_dir, plan = running_local_job(job, "kill a rank of", False, RANK_KILL_BACKENDS)
    ranks = (len(plan.hosts) + len(plan.spare_hosts)) * plan.procs_per_host
    if not 0 <= rank < ranks:
        raise TenterError(
            "--rank", f"job {plan.job_id} has ranks 0 to {ranks - 1}, not {rank}", "name one"
        )
    control.made_control_dir(job_dir)
    request_file = control.rank_kill_request(job_dir, rank)
    request_file.write_text("")
    reply_file = control.rank_kill_reply(job_dir, rank)
    deadline = time.monotonic() + timeout_s
    while not reply_file.exists():
        if not is_running(job_dir) or time.monotonic() > deadline:
            request_file.unlink(missing_ok=True)
            raise TenterError(
                "--rank",
                f"no agent of job {plan.job_id} took the kill of rank {rank} within "
                f"{timeout_s:g} s: the rank is not running now (finished, or restarting)",
                "check the job with `tenter status JOB`, then try again",
            )
        time.sleep(0.05)  # the agents look every 0.1 s: a file has no change event here
    reply = json.loads(reply_file.read_text())
    reply_file.unlink()
    return f"killed rank {rank} (pid {reply['pid']}) on {reply['host']}"


def check_request(job: str | Path, action: str, host: str) -> tuple[Path, Plan]:
    """The job's directory and plan, or the error a user sees (nothing written)."""
    job_dir, plan = running_local_job(job, action, isolated=action in NEEDS_ISOLATION)
    names = [h.name for h in plan.hosts]
    if host not in names:
        raise TenterError(
            "HOST",
            f"job {plan.job_id} has no host '{host}'; its hosts: {', '.join(names)}",
            "name one of them",
        )
    return job_dir, plan


def request(job: str | Path, action: str, host: str, timeout_s: float = REPLY_TIMEOUT_S) -> str:
    """Ask the job's launcher to apply ``action`` to ``host``; its reply, once applied.
    TenterError if the request is wrong, refused or never taken."""
    if action not in ACTIONS:
        raise TenterError("ACTION", f"unknown fault '{action}'", f"choose {', '.join(ACTIONS)}")
    job_dir, plan = check_request(job, action, host)
    ask = FaultRequest(action, host, uuid.uuid4().hex)
    control.made_control_dir(job_dir)
    request_file = control.fault_request(job_dir, ask.id)
    layout.write_atomic(request_file, json.dumps(asdict(ask)))
    reply_file = control.fault_reply(job_dir, ask.id)
    deadline = time.monotonic() + timeout_s
    while not reply_file.exists():
        if not is_running(job_dir) or time.monotonic() > deadline:
            request_file.unlink(missing_ok=True)
            why = (
                "has finished" if not is_running(job_dir) else f"did not answer in {timeout_s:g} s"
            )
            raise TenterError(
                "JOB",
                f"job {plan.job_id} {why}: the {action} of {host} was not applied",
                "check the job with `tenter status JOB`",
            )
        time.sleep(0.05)  # the launcher's own poll interval: a file has no change event here
    reply = FaultReply(**json.loads(reply_file.read_text()))
    reply_file.unlink()
    if not reply.ok:
        raise TenterError("HOST", reply.message, "see `tenter status JOB` for the hosts' state")
    return reply.message


# ---- the launcher's side ----


def clock(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t))


class FaultableJob(Protocol):
    """What faults need of the job they act on (the local backend's ``LocalJob``): its hosts'
    agents and network. A protocol, so that the launcher's isolation does not import a backend."""

    plan: Plan
    lost: set[int]
    network: HostNetwork | None
    host_failures: list[Failure]

    @property
    def hosts_running(self) -> int: ...
    def kill_host(self, index: int) -> None: ...
    def fence_host(self, index: int, why: str) -> None: ...
    def restart_agent(self, index: int) -> None: ...
    def agent_log(self, index: int) -> str: ...


class NetworkFaults:
    """Takes the fault requests of one local job and makes the job react to them."""

    def __init__(self, job: FaultableJob) -> None:
        self.job = job
        self.cut: dict[str, float] = {}
        """Partitioned hosts -> since when."""
        self.declared: set[str] = set()
        """Partitioned hosts the job has noticed (their heartbeats ran out)."""
        self.fenced: set[str] = set()
        """Hosts an elastic job went on without after a partition (not those killed)."""
        self.stop_job = False
        """A static job lost a host to a partition: the launcher must stop it."""

    @property
    def plan(self) -> Plan:
        return self.job.plan

    def on_tick(self) -> None:
        for path in control.fault_requests(self.plan.job_dir):
            ask = FaultRequest(**json.loads(path.read_text()))
            path.unlink()
            try:
                reply = FaultReply(True, self._apply(ask))
            except (OSError, ValueError) as e:
                reply = FaultReply(False, f"{ask.action} {ask.host} failed: {e}")
            layout.write_atomic(
                control.fault_reply(self.plan.job_dir, ask.id), json.dumps(asdict(reply))
            )
        self._notice_unreachable()

    def _event(self, kind: EventKind, host: str, **fields: object) -> None:
        record_event(self.plan.job_dir, kind, host=host, **fields)

    def _index(self, host: str) -> int:
        return next(h.index for h in self.plan.hosts if h.name == host)

    def _apply(self, ask: FaultRequest) -> str:
        host, index = ask.host, self._index(ask.host)
        if ask.action == "kill":
            if index in self.job.lost:
                raise ValueError(f"host {host} is already lost")
            self.job.kill_host(index)
            self._event(EventKind.KILL, host)
            say(f"fault: host {host} killed (its agent and workers, SIGKILL)")
            return f"killed host {host}"
        network = self.job.network
        if network is None:
            raise ValueError("the job's hosts are not isolated")
        if ask.action == "partition":
            if host in self.cut:
                raise ValueError(f"host {host} is partitioned since {clock(self.cut[host])}")
            network.partition(host)
            self.cut[host] = time.time()
            self._event(EventKind.PARTITION, host)
            say(f"fault: host {host} partitioned (its network link is down)")
            return f"partitioned host {host}"
        if host not in self.cut:
            raise ValueError(f"host {host} is not partitioned")
        network.heal(host)
        since = self.cut.pop(host)
        self._event(EventKind.HEAL, host, since=since)
        self.declared.discard(host)
        if host in self.fenced:
            self.fenced.discard(host)
            self.job.restart_agent(index)
            say(f"host {host} reachable again; it rejoins at the next rendezvous")
        else:
            say(f"host {host} reachable again after {time.time() - since:.1f} s")
        return f"healed host {host}"

    def _notice_unreachable(self) -> None:
        """Hosts cut off for longer than the heartbeats allow: the job notices them now."""
        patience = self.plan.keep_alive_s * HEARTBEAT_MISSES
        for host, since in self.cut.items():
            if host in self.declared or time.time() - since < patience:
                continue
            self.declared.add(host)
            self._event(EventKind.UNREACHABLE, host, since=since)
            index = self._index(host)
            active = self.job.hosts_running
            if index in self.job.lost:
                continue  # lost before (a kill): nothing left to react to
            why = f"unreachable since {clock(since)} (network partition)"
            if active - 1 >= self.plan.min_hosts and self.plan.max_restarts:
                self.job.fence_host(index, why)
                self.fenced.add(host)
                say(
                    f"host {host} {why}; going on with {counted(active - 1, 'host')} "
                    f"(`tenter fault {self.plan.job_id} heal {host}` brings it back)"
                )
            else:
                say(f"host {host} {why}; the job cannot go on without it")
                self.job.host_failures.append(
                    root_cause.host_unreachable(
                        self.plan.hosts[index], since, self.job.agent_log(index)
                    )
                )
                self.stop_job = True
