"""``tenter report JOB --trace``: each recovery of a job, phase by phase and rank by rank, on
one clock, as a Chrome Trace Event Format file (Perfetto and chrome://tracing open it).

A recovery is a group restart (the agents' ``restart`` events of one restart count). It begins
at the fault: the earliest failure its hosts' agents saw (an exception's error file is stamped
when it was raised; a killed worker when its agent saw it gone). Each rank's recovery ends at
its first step after the restart, and is cut at the moments the job directory records::

    detection   the fault -> its host's agent began the restart (``restart`` event)
    stop        -> the agent's workers were stopped (``stopped``)
    rendezvous  -> the host's new round began (``rendezvous``)
    restart     -> the rank's new process was created (``resumed``: process_start)
    init        -> the script called Checkpointer.resume (imports, process group)
    checkpoint load -> resume returned (``resumed``)
    first step  -> the rank's first step after (its step records)

A moment a rank did not record (a script without tenter's checkpointer) merges its phase into
the next, so the phases of a rank add up to its recovery exactly. Tracks: one process per host
(its agent's thread and one per rank) and one for the launcher (the faults, the job's end);
the blocking checkpoint saves are on the ranks' tracks too.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tenter.jobdir.events import Event, EventKind, is_kind, read_events
from tenter.jobdir.layout import rank_steps_file, write_atomic
from tenter.jobdir.line_files import read_lines
from tenter.jobdir.membership import launch_time
from tenter.jobdir.progress import ProgressReader
from tenter.launch.shared.console import read_index

PHASES = ("detection", "stop", "rendezvous", "restart", "init", "checkpoint load", "first step")
"""A rank's phases of a recovery, in order; each ends where the next begins."""
AGENT_PHASES = PHASES[:3]
"""The phases its host's agent goes through (shown on the agent's track too)."""
TRACE_FILE = "recovery.trace.json"


@dataclass(frozen=True)
class Phase:
    name: str
    start: float
    end: float

    @property
    def seconds(self) -> float:
        return self.end - self.start


@dataclass(frozen=True)
class RankRecovery:
    rank: int
    host: str
    phases: list[Phase]

    @property
    def seconds(self) -> float:
        """From the fault to the rank's first step after it."""
        return self.phases[-1].end - self.phases[0].start if self.phases else 0.0


@dataclass(frozen=True)
class Recovery:
    number: int
    """The job's group restart it is (1: the first)."""
    fault: float
    ranks: list[RankRecovery]

    @property
    def seconds(self) -> float:
        """From the fault to the last rank's first step after it."""
        return max((r.seconds for r in self.ranks), default=0.0)


def _first(events: Sequence[Event], after: float, **fields: object) -> Event | None:
    return next(
        (
            e
            for e in events
            if float(e["time"]) >= after and all(e.get(k) == v for k, v in fields.items())
        ),
        None,
    )


def chain(moments: Sequence[tuple[str, float | None]], end: float) -> list[Phase]:
    """Phases from ``moments`` (each phase's name and start, None where not recorded: the phase
    before runs on), the last ending at ``end``; a start before the one before (clocks a few
    milliseconds apart) is taken as that one, so the phases tile their span."""
    starts: list[tuple[str, float]] = []
    for name, start in moments:
        if start is not None:
            starts.append((name, max(start, starts[-1][1]) if starts else start))
    ends = [s for _, s in starts[1:]] + [max(end, starts[-1][1])] if starts else []
    return [Phase(name, s, e) for (name, s), e in zip(starts, ends, strict=True)]


def recoveries(
    events: Sequence[Event],
    index: Sequence[Mapping[str, Any]],
    steps: Mapping[int, Sequence[tuple[float, int]]],
) -> list[Recovery]:
    """Each group restart in ``events`` with its ranks' phases (``index``: the worker log
    index, which rank ran on which host in which attempt; ``steps``: each rank's (time,
    step) records). A rank that made no step after a restart has no recovery from it."""
    by_count: dict[int, list[Event]] = defaultdict(list)
    for event in events:
        if is_kind(event, EventKind.RESTART) and event.get("used", True):
            by_count[int(event["restart_count"])].append(event)
    out = []
    for number, restarts in sorted(by_count.items()):
        stamps = [float(e.get("failed_at") or e["time"]) for e in restarts]
        fault = min(stamps)
        ranks = [
            rank
            for restart in restarts
            for rank in _host_recovery(restart, fault, events, index, steps)
        ]
        out.append(Recovery(number, fault, sorted(ranks, key=lambda r: r.rank)))
    return out


def _host_recovery(
    restart: Event,
    fault: float,
    events: Sequence[Event],
    index: Sequence[Mapping[str, Any]],
    steps: Mapping[int, Sequence[tuple[float, int]]],
) -> list[RankRecovery]:
    host, began = str(restart["host"]), float(restart["time"])
    stopped = _first(events, began, event=EventKind.STOPPED.value, host=host)
    rdzv = _first(events, began, event=EventKind.RENDEZVOUS.value, host=host)
    if rdzv is None:
        return []
    out = []
    for entry in index:
        if entry["host"] != host or entry["attempt"] != rdzv["attempt"]:
            continue
        rank = int(entry["rank"])
        resumed = _first(events, float(rdzv["time"]), event=EventKind.RESUMED.value, rank=rank)
        after = float(resumed["time"]) if resumed else float(rdzv["time"])
        first_step = next((t for t, _ in steps.get(rank, ()) if t > after), None)
        if first_step is None:
            continue
        moments = [
            ("detection", fault),
            ("stop", began),
            ("rendezvous", float(stopped["time"]) if stopped else None),
            ("restart", float(rdzv["time"])),
            ("init", float(resumed["process_start"]) if resumed else None),
            ("checkpoint load", float(resumed["start"]) if resumed else None),
            ("first step", after if resumed else None),
        ]
        out.append(RankRecovery(rank, host, chain(moments, first_step)))
    return out


def _us(seconds: float, origin: float) -> int:
    return round((seconds - origin) * 1e6)


def trace_events(
    recovered: Sequence[Recovery],
    hosts: Sequence[str],
    checkpoints: Sequence[Event],
    origin: float,
) -> list[dict[str, Any]]:
    """The Trace Event Format's events: processes 0 (the launcher) and 1.. (``hosts``), in
    each thread 0 (the agent) and rank + 1; times in microseconds since ``origin``."""
    pids = {host: i + 1 for i, host in enumerate(hosts)}
    out = [_meta("process_name", 0, 0, "launcher"), _meta("thread_name", 0, 0, "faults")]
    for host, pid in pids.items():
        out += [_meta("process_name", pid, 0, host), _meta("thread_name", pid, 0, "agent")]
    ranks = {(r.host, r.rank) for rec in recovered for r in rec.ranks}
    ranks |= {(str(e["host"]), int(e["rank"])) for e in checkpoints}
    out += [_meta("thread_name", pids[h], rank + 1, f"rank {rank}") for h, rank in sorted(ranks)]
    for rec in recovered:
        out.append(_instant(f"fault (recovery {rec.number})", _us(rec.fault, origin)))
        out += _recovery_slices(rec, pids, origin)
    for e in checkpoints:
        saved = Phase("checkpoint save", float(e["start"]), float(e["time"]))
        track = (pids[str(e["host"])], int(e["rank"]) + 1)
        out.append(_slice(saved.name, track, [saved], origin, {"step": e["step"]}))
    return out


def _recovery_slices(rec: Recovery, pids: Mapping[str, int], origin: float) -> list[dict[str, Any]]:
    """On each rank's track the recovery and its phases within; on each agent's, the phases
    it went through."""
    out, agents = [], set()
    for ranked in rec.ranks:
        pid, args = pids[ranked.host], {"recovery": rec.number, "rank": ranked.rank}
        track = (pid, ranked.rank + 1)
        out.append(_slice(f"recovery {rec.number}", track, ranked.phases, origin, args))
        out += [_slice(p.name, track, [p], origin, args) for p in ranked.phases]
        if ranked.host not in agents:
            agents.add(ranked.host)
            mine = [p for p in ranked.phases if p.name in AGENT_PHASES]
            out += [_slice(p.name, (pid, 0), [p], origin, args) for p in mine]
    return out


def _meta(kind: str, pid: int, tid: int, name: str) -> dict[str, Any]:
    return {"ph": "M", "name": kind, "pid": pid, "tid": tid, "args": {"name": name}}


def _instant(name: str, ts: int) -> dict[str, Any]:
    return {"ph": "i", "s": "g", "name": name, "cat": "fault", "pid": 0, "tid": 0, "ts": ts}


def _slice(
    name: str,
    track: tuple[int, int],
    span: Sequence[Phase],
    origin: float,
    args: dict[str, Any],
) -> dict[str, Any]:
    """A complete event over ``span`` on ``track`` (pid, tid)."""
    start, end = _us(span[0].start, origin), _us(span[-1].end, origin)
    return {
        "ph": "X",
        "name": name,
        "cat": "recovery",
        "pid": track[0],
        "tid": track[1],
        "ts": start,
        "dur": end - start,
        "args": args,
    }


def job_recoveries(job_dir: Path) -> list[Recovery]:
    """The recoveries of the job in ``job_dir``, from its records."""
    progress = ProgressReader(job_dir, keep_reports=False).read()
    steps = {rank: p.reported or _counted_ends(job_dir, rank) for rank, p in progress.items()}
    return recoveries(read_events(job_dir), read_index(str(job_dir)), steps)


def _counted_ends(job_dir: Path, rank: int) -> list[tuple[float, int]]:
    """The steps tenter counted on ``rank``, each at its arrival but a process's first step,
    at its end (:mod:`tenter.runtime.steps`)."""
    lines = read_lines(rank_steps_file(job_dir, rank))
    return [(float(line.get("done", line["time"])), int(line["step"])) for line in lines]


def write_trace(job_dir: Path, path: Path | None = None) -> tuple[Path, list[Recovery]]:
    """Write the job's recovery trace (by default ``<job_dir>/report/recovery.trace.json``)."""
    events = read_events(job_dir)
    recovered = job_recoveries(job_dir)
    hosts = sorted({str(e["host"]) for e in read_index(str(job_dir))})
    saves = [e for e in events if is_kind(e, EventKind.CHECKPOINT) and e.get("host") in hosts]
    trace = {
        "traceEvents": trace_events(recovered, hosts, saves, launch_time(job_dir)),
        "displayTimeUnit": "ms",
    }
    path = path if path is not None else job_dir / "report" / TRACE_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(trace))
    return path, recovered


def summary_lines(recovered: Sequence[Recovery]) -> list[str]:
    """One line per recovery: its time and each phase's, the slowest rank's."""
    lines = []
    for rec in recovered:
        slowest = max(rec.ranks, key=lambda r: r.seconds, default=None)
        phases = ", ".join(f"{p.name} {p.seconds:.2f} s" for p in slowest.phases) if slowest else ""
        lines.append(f"recovery {rec.number}: {rec.seconds:.2f} s ({phases})")
    return lines
