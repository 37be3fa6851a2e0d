"""Requests to a running job's ranks, and their answers, through the job directory::

    <job_dir>/control/preempt              a preemption was requested: when, by whom, the grace
    <job_dir>/control/stopping-<host>      that host's agent is stopping its workers itself
    <job_dir>/control/lost-<host>          the launcher went on without that host (its agent
                                           was killed, or it was cut off and fenced)
    <job_dir>/control/preempted-rank-<N>   rank N stopped for the preemption: step, checkpoint
    <job_dir>/control/flight-recorder      a hang: every rank writes torch's flight recorder to
                                           <log stem>.fr.pkl (when newer than its last dump)
    <job_dir>/control/join-<id>            ``tenter join``: one more host, please
    <job_dir>/control/fault-<id>.json      ``tenter fault``: a fault to inject, and its answer,
    <job_dir>/control/reply-<id>.json      (:mod:`tenter.launch.launcher.isolation.faults`)
    <job_dir>/control/kill-rank-<N>        ``tenter fault JOB kill --rank N``: the agent running
    <job_dir>/control/killed-rank-<N>      rank N SIGKILLs it, and says which process it was
    <job_dir>/control/hang-<SIGNAL>.json   a Slurm job's hang watch: signal these ranks' pids
                                           (:mod:`tenter.launch.diagnosis.rank_signals`)
    <job_dir>/control/hang-stop            ... and stop the job (``on_hang: stop``): when

Files rather than signals: the launcher of a local job does not signal its workers (they run
in sessions of their own, under their agents), a file is seen by every simulated host and, on
Slurm, by every node (the job directory is on a shared file system), and a rank checks one
at a step boundary for the cost of a ``stat``.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

from tenter.jobdir.layout import CONTROL_DIR, write_atomic

PREEMPT_REQUEST = "preempt"
STOPPING_PREFIX = "stopping-"
LOST_PREFIX = "lost-"
PREEMPTED_PREFIX = "preempted-rank-"
FLIGHT_RECORDER_REQUEST = "flight-recorder"
JOIN_PREFIX = "join-"
FAULT_PREFIX = "fault-"
KILL_RANK_PREFIX = "kill-rank-"
KILLED_RANK_PREFIX = "killed-rank-"
REPLY_PREFIX = "reply-"
HANG_STOP = "hang-stop"


def flight_recorder_dump(stem: str) -> Path:
    """Where the rank of log stem ``stem`` writes its flight recorder when asked."""
    return Path(f"{stem}.fr.pkl")


def control_dir(job_dir: str | Path) -> Path:
    return Path(job_dir) / CONTROL_DIR


def made_control_dir(job_dir: str | Path) -> Path:
    """:func:`control_dir`, created if it is not there yet (by the first request)."""
    folder = control_dir(job_dir)
    folder.mkdir(exist_ok=True)
    return folder


def request_join(job_dir: str | Path) -> None:
    """``tenter join``: ask the job's launcher for one more host."""
    # The launcher takes each request file; a unique name keeps them apart.
    (made_control_dir(job_dir) / f"{JOIN_PREFIX}{uuid.uuid4().hex}").write_text("")


def join_requests(job_dir: str | Path) -> list[Path]:
    """The join requests not taken yet."""
    return sorted(control_dir(job_dir).glob(f"{JOIN_PREFIX}*"))


def fault_request(job_dir: str | Path, request_id: str) -> Path:
    return control_dir(job_dir) / f"{FAULT_PREFIX}{request_id}.json"


def fault_reply(job_dir: str | Path, request_id: str) -> Path:
    return control_dir(job_dir) / f"{REPLY_PREFIX}{request_id}.json"


def fault_requests(job_dir: str | Path) -> list[Path]:
    return sorted(control_dir(job_dir).glob(f"{FAULT_PREFIX}*.json"))


def rank_kill_request(job_dir: str | Path, rank: int) -> Path:
    """Present while ``tenter fault JOB kill --rank N`` waits for rank N's agent."""
    return control_dir(job_dir) / f"{KILL_RANK_PREFIX}{rank}"


def rank_kill_reply(job_dir: str | Path, rank: int) -> Path:
    """What the agent that killed rank N says: ``{"host": ..., "pid": ...}``."""
    return control_dir(job_dir) / f"{KILLED_RANK_PREFIX}{rank}"


def request_hang_stop(job_dir: str | Path) -> None:
    """A Slurm job's hang watch ends the job: every agent stops its workers and ends."""
    write_atomic(made_control_dir(job_dir) / HANG_STOP, json.dumps({"time": time.time()}))


def hang_stopped_at(job_dir: str | Path) -> float | None:
    """When :func:`request_hang_stop` asked, or None."""
    try:
        return float(json.loads((control_dir(job_dir) / HANG_STOP).read_text())["time"])
    except (OSError, ValueError, KeyError):
        return None


def request_preemption(job_dir: str | Path, grace_s: float, by: str) -> dict[str, Any]:
    """Ask every rank to stop at its next step boundary after a final checkpoint; returns
    the request in force (the first one: a repeated SIGTERM does not move its time)."""
    existing = preemption_request(job_dir)
    if existing is not None:
        return existing
    request = {"time": time.time(), "grace_s": grace_s, "by": by}
    write_atomic(made_control_dir(job_dir) / PREEMPT_REQUEST, json.dumps(request))
    return request


def preemption_requested(job_dir: str | Path) -> bool:
    """Whether a preemption was requested (one ``stat``: an agent asks at every look)."""
    return (control_dir(job_dir) / PREEMPT_REQUEST).exists()


def preemption_request(job_dir: str | Path) -> dict[str, Any] | None:
    try:
        data: dict[str, Any] = json.loads((control_dir(job_dir) / PREEMPT_REQUEST).read_text())
    except (OSError, ValueError):
        return None
    return data


def stopping_marker(job_dir: str | Path, host: str) -> Path:
    """Present while ``host``'s agent stops its workers (a failure, a restart, a cancel):
    a worker's SIGTERM then means "stop now", not "preempted"."""
    return control_dir(job_dir) / f"{STOPPING_PREFIX}{host}"


def declare_lost(job_dir: str | Path, host: str) -> None:
    """The launcher goes on without ``host``: the other hosts' agents restart without
    waiting for it (:mod:`tenter.launch.agent.in_round`)."""
    (made_control_dir(job_dir) / f"{LOST_PREFIX}{host}").write_text("")


def declare_found(job_dir: str | Path, host: str) -> None:
    """``host`` is back (a fresh agent after a partition healed): no longer lost."""
    (control_dir(job_dir) / f"{LOST_PREFIX}{host}").unlink(missing_ok=True)


def lost_hosts(job_dir: str | Path) -> set[str]:
    """The hosts the launcher declared lost (one ``listdir``)."""
    folder = control_dir(job_dir)
    if not folder.is_dir():
        return set()
    return {p.name.removeprefix(LOST_PREFIX) for p in folder.glob(f"{LOST_PREFIX}*")}


def record_preempted(
    job_dir: str | Path, rank: int, step: int | None, checkpoint: str | None
) -> None:
    """Rank ``rank`` stopped for the preemption (after the checkpoint of ``step``, if any)."""
    folder = made_control_dir(job_dir)
    record = {"rank": rank, "step": step, "checkpoint": checkpoint, "time": time.time()}
    write_atomic(folder / f"{PREEMPTED_PREFIX}{rank}", json.dumps(record))


def preempted_ranks(job_dir: str | Path) -> list[dict[str, Any]]:
    """What :func:`record_preempted` recorded, by rank."""
    out = []
    for path in sorted(control_dir(job_dir).glob(f"{PREEMPTED_PREFIX}*")):
        try:
            out.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    return sorted(out, key=lambda r: int(r["rank"]))
