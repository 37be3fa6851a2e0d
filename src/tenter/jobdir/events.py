"""The job's events (``events.jsonl``): the one module that writes and reads them.

Several processes append to the file at once (the agents, the launcher, the ranks); each line
is one event, its kind under ``"event"`` and its wall-clock ``"time"``::

    {"event": "rendezvous", "host": "algo-1", "attempt": 0, "hosts": 2, ..., "time": 17.2}
    {"event": "checkpoint", "rank": 0, "host": "algo-1", "step": 50, "start": 17.2, "time": 17.9}

The kinds are :class:`EventKind`, each with the fields its writer adds. Kept free of torch,
like the rest of the job directory, so that the mpirun shim and the ranks can write here too.
"""

from __future__ import annotations

import os
import time
from enum import Enum
from pathlib import Path
from typing import Any

from tenter.jobdir.layout import EVENTS_FILE
from tenter.jobdir.line_files import JsonlFollower, append_line, read_lines

Event = dict[str, Any]
"""One line of the file, as read: ``"event"`` (an :class:`EventKind`'s value), ``"time"``
and the kind's own fields."""


class EventKind(str, Enum):
    """What an event says happened (written as the value; its writer's fields in brackets)."""

    RENDEZVOUS = "rendezvous"
    """A host's agent started its workers in a rendezvous round (host, group_rank, hosts,
    world_size, attempt, restarts_in_round, restart_count, planned)."""
    RESTART = "restart"
    """A host's agent stopped its workers to start them again (host, run_id, restart_count,
    used, remaining; failed_at: when its first worker failed, none where another host's
    failure asked for the restart; killed: a worker of its was killed by a signal)."""
    RANK_FAILED = "rank_failed"
    """A host's agent found a rank's failure of its own in its error file, not a peer's broken
    connection (host, rank)."""
    WORKERS_STORE = "workers_store"
    """The port of the workers' store (the plan's ``${master_port}``) as whoever serves it bound
    it: the group's rank 0 agent for each round, or mpi's launcher (host, attempt, port)."""
    STOPPED = "stopped"
    """A host's agent stopped its workers for a restart (host, restart_count); its restart
    event is when it began to."""
    CHECKPOINT = "checkpoint"
    """A rank's blocking checkpoint save ended (rank, host, step, start)."""
    CHECKPOINT_SKIPPED = "checkpoint_skipped"
    """A save failed for lack of space and was abandoned; training went on (host: rank 0's;
    step, path; failed: each failing rank's message, no_space and free_bytes; latest: the
    step of the checkpoint still the latest, None for none; in_a_row: failed saves in a row)."""
    RESUMED = "resumed"
    """A rank's ``Checkpointer.resume`` ended (rank, host, step: the checkpoint's, 0 for none;
    start: when it began; process_start: when the rank's process was created)."""
    STRAGGLER = "straggler"
    """The launcher named a straggler (rank, host, step, busy_s, others_s)."""
    HANG = "hang"
    """The launcher found the job hung (host: empty)."""
    REPLICA_HEALED = "replica_healed"
    """A replica group's rank 0 healed from a peer (group, step, source)."""
    REPLICA_LOST = "replica_lost"
    """The launcher lost a replica group (group, step, why)."""
    REPLICAS_AGREED = "replicas_agreed"
    """The data-parallel replicas' parameters were compared and agreed (host, step,
    replicas)."""
    REPLICAS_DIVERGED = "replicas_diverged"
    """A replica's parameters differ from the others' (host, step, ranks, text)."""
    KILL = "kill"
    """``tenter fault kill``: an isolated host's agent was killed (host)."""
    PARTITION = "partition"
    """``tenter fault partition``: an isolated host was cut off (host)."""
    HEAL = "heal"
    """``tenter fault heal``: a cut-off host is back (host, since)."""
    UNREACHABLE = "unreachable"
    """The launcher found an isolated host unreachable (host, since)."""


def events_path(job_dir: str | os.PathLike[str]) -> Path:
    return Path(job_dir) / EVENTS_FILE


def record_event(job_dir: str | os.PathLike[str], kind: EventKind, **fields: object) -> None:
    """Append one event of ``kind``, with ``fields``, timed now."""
    append_line(events_path(job_dir), {"event": kind.value, **fields, "time": time.time()})


def is_kind(event: Event, *kinds: EventKind) -> bool:
    """Whether ``event`` is of one of ``kinds``."""
    return event.get("event") in {k.value for k in kinds}


def read_events(job_dir: str | os.PathLike[str]) -> list[Event]:
    """Every complete event so far (none if the file is not there yet)."""
    return read_lines(events_path(job_dir))


class EventFollower(JsonlFollower):
    """Reads the events appended since the previous call."""

    def __init__(self, job_dir: str | os.PathLike[str]) -> None:
        super().__init__(events_path(job_dir))


def replica_checks(job_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """The replicas' comparisons (:mod:`tenter.runtime.replicas`): the steps at which they
    agreed, and each divergence (step, ranks, text); empty if none was made."""
    events = read_events(job_dir)
    agreed = [e["step"] for e in events if is_kind(e, EventKind.REPLICAS_AGREED)]
    diverged = [
        {k: e[k] for k in ("step", "ranks", "text")}
        for e in events
        if is_kind(e, EventKind.REPLICAS_DIVERGED)
    ]
    return {"agreed_steps": agreed, "diverged": diverged} if agreed or diverged else {}


def workers_store_ports(job_dir: str | os.PathLike[str]) -> list[int]:
    """The ports the job's workers' stores were served on, in the order they were."""
    return [int(e["port"]) for e in read_events(job_dir) if is_kind(e, EventKind.WORKERS_STORE)]


def hosts_in_rendezvous(job_dir: str | os.PathLike[str], hosts: list[str]) -> list[str]:
    """Of ``hosts``, those whose workers are not running: their agent starts or waits for a
    rendezvous round (it recorded none yet, or a restart after its last)."""
    latest: dict[str, str] = {}
    for event in read_events(job_dir):
        if is_kind(event, EventKind.RENDEZVOUS, EventKind.RESTART):
            latest[str(event["host"])] = str(event["event"])
    return [h for h in hosts if latest.get(h) != EventKind.RENDEZVOUS.value]
