"""The ledger's inputs, read from the job directory, and the ledger kept there
(``goodput.json``).

Everything comes from files that every backend's job directory has, whichever agent runs the
hosts: ``plan.json``, ``membership.jsonl`` (its launch line is the launch, and the plan's
joined hosts), ``summary.json`` (the outcome; its time of writing is the end), the ranks' step
reports (``metrics/rank-<N>.jsonl``, or the DDP steps tenter counted itself,
``metrics/steps/rank-<N>.jsonl``), ``logs/index.jsonl`` (which rank ran on which host) and
``events.jsonl``: restarts and rendezvous rounds (the agents), torchft heals, hangs (the
launcher) and blocking checkpoint saves (the ranks)::

    {"event": "checkpoint", "rank": 0, "host": "algo-1", "step": 50, "start": 17.2, "time": 17.9}
    {"event": "hang", "time": 31.0}

A preempted job resumed by a new run (same job name, same checkpoint directory, launched after
the preempted run ended) continues its ledger: the earlier runs are found beside it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import psutil

from tenter.contract.plan import read_plan
from tenter.goodput.fold import RunFold
from tenter.goodput.ledger import (
    HANG,
    RESTART,
    Fault,
    Ledger,
    RunRecords,
    highest_step,
    job_timelines,
    ledger_of,
)
from tenter.goodput.stragglers import Straggler, StragglerRule, StragglerWatch
from tenter.jobdir import control
from tenter.jobdir.events import Event, EventFollower, EventKind, is_kind, record_event
from tenter.jobdir.layout import (
    GOODPUT_FILE,
    INDEX_FILE,
    PROGRESS_FILE,
    SUMMARY_FILE,
    logs_dir,
    write_atomic,
)
from tenter.jobdir.line_files import JsonlFollower
from tenter.jobdir.membership import launch_time
from tenter.jobdir.progress import ProgressReader, ProgressSummary, RankProgress
from tenter.jobdir.results import JobState, read_result


def record_checkpoint(job_dir: str, rank: int, host: str, step: int, start: float) -> None:
    """A rank's blocking checkpoint save of ``step``, which began at ``start``, just ended."""
    record_event(job_dir, EventKind.CHECKPOINT, rank=rank, host=host, step=step, start=start)


def record_resume(job_dir: str, rank: int, host: str, step: int, start: float) -> None:
    """A rank's resume from the checkpoint of ``step`` (0: none), which began at ``start``,
    just ended (for the timeline of a recovery, with when the rank's process started)."""
    process_start = psutil.Process().create_time()
    record_event(
        job_dir,
        EventKind.RESUMED,
        rank=rank,
        host=host,
        step=step,
        start=start,
        process_start=process_start,
    )


def record_straggler(job_dir: str, straggler: Straggler) -> None:
    record_event(job_dir, EventKind.STRAGGLER, **straggler.to_dict())


def named_stragglers(events: list[Event]) -> list[Straggler]:
    """The stragglers the launcher named (:func:`record_straggler`) among ``events``."""
    return [
        Straggler(int(e["rank"]), str(e["host"]), int(e["step"]), e["busy_s"], e["others_s"])
        for e in events
        if is_kind(e, EventKind.STRAGGLER)
    ]


def record_hang(job_dir: str) -> None:
    """The launcher found the job hung (the ledger's hang part ends here)."""
    record_event(job_dir, EventKind.HANG, host="")


class RunReader:
    """One run's records, read again as they grow (only the lines added since the last call)."""

    def __init__(self, job_dir: Path) -> None:
        self.job_dir = job_dir
        self.plan = read_plan(job_dir)
        self.launch = launch_time(job_dir)
        self._followers: dict[Path, JsonlFollower] = {}
        self._events_follower = EventFollower(job_dir)
        self._progress = ProgressReader(job_dir, keep_reports=False)
        self.progress: dict[int, RankProgress] = {}
        """Each rank's progress as of the last :meth:`read`."""
        self._checkpoints: dict[int, list[tuple[float, float]]] = defaultdict(list)
        self._events: list[dict[str, Any]] = []
        self._hosts: dict[int, str] = {}

    def _new_lines(self, path: Path) -> list[dict[str, Any]]:
        follower = self._followers.setdefault(path, JsonlFollower(path))
        return follower.read_new()

    def read(self) -> RunRecords:
        self.progress = self._progress.read()
        for entry in self._new_lines(logs_dir(self.job_dir) / INDEX_FILE):
            self._hosts[int(entry["rank"])] = str(entry["host"])
        for event in self._events_follower.read_new():
            if is_kind(event, EventKind.CHECKPOINT):
                self._checkpoints[int(event["rank"])].append((event["start"], event["time"]))
            else:
                self._events.append(event)
        result = read_result(self.job_dir)
        end = os.stat(self.job_dir / SUMMARY_FILE).st_mtime if result is not None else None
        return RunRecords(
            job_id=self.plan.job_id,
            launch=self.launch,
            end=end,
            state=result.state if result is not None else JobState.RUNNING,
            # The lists the reads append to, not copies: a pass costs O(ranks) before the
            # ledger's reckoning, not O(steps).
            steps={r: p.steps for r, p in self.progress.items() if p.steps},
            checkpoints=dict(self._checkpoints),
            faults=self._faults(),
            unsaved=result is not None and self.unsaved(result.state),
        )

    def unsaved(self, state: str) -> bool:
        """Whether a run that ended in ``state`` lost its steps since its last checkpoint: a
        preemption that ended it as interrupted made no final checkpoint."""
        return state == JobState.INTERRUPTED and control.preemption_requested(self.job_dir)

    @property
    def arrivals(self) -> dict[int, list[tuple[float, int]]]:
        """Each rank's steps for the straggler rule (as of the last :meth:`read`; the lists
        the next read appends to)."""
        return {r: p.arrivals for r, p in self.progress.items() if p.arrivals}

    @property
    def hosts(self) -> dict[int, str]:
        """Each rank's host (in its latest attempt)."""
        return dict(self._hosts)

    def _ranks_on(self, hosts: set[str]) -> frozenset[int]:
        return frozenset(r for r, h in self._hosts.items() if h in hosts)

    def _faults(self) -> list[Fault]:
        """Restarts and rejoins (an agent's new rendezvous round after its first), heals and
        hangs, each with the ranks it stopped."""
        groups: dict[int, set[str]] = defaultdict(set)
        for host in self.plan.hosts:
            groups[host.replica_group].add(host.name)
        out = []
        for e in self._events:
            rejoined = is_kind(e, EventKind.RENDEZVOUS) and int(e.get("attempt", 0)) > 0
            if is_kind(e, EventKind.HANG):
                out.append(Fault(float(e["time"]), HANG))
            elif rejoined or is_kind(e, EventKind.RESTART):
                out.append(Fault(float(e["time"]), RESTART, self._ranks_on({str(e["host"])})))
            elif is_kind(e, EventKind.REPLICA_HEALED):
                hosts = groups.get(int(e.get("group") or 0), set())
                healed = EventKind.REPLICA_HEALED.value
                out.append(Fault(float(e["time"]), healed, self._ranks_on(hosts)))
        return out


def _job_name(job_id: str) -> str:
    """``digits-20260101-120000-ab12`` -> ``digits`` (see tenter.contract.plan.new_job_id)."""
    parts = job_id.rsplit("-", 3)
    return parts[0] if len(parts) == 4 else job_id


def earlier_runs(reader: RunReader) -> list[Path]:
    """The preempted runs this run resumes, the first first: beside it, with its job name and
    checkpoint directory, each ended (preempted) before the next was launched."""
    name, checkpoints = _job_name(reader.plan.job_id), reader.plan.checkpoint_dir
    candidates = []
    for path in reader.job_dir.parent.glob(f"{name}-*"):
        if path == reader.job_dir or not (path / SUMMARY_FILE).is_file():
            continue
        try:
            plan = read_plan(path)
        except (OSError, ValueError, TypeError, KeyError):
            continue
        if _job_name(plan.job_id) == name and plan.checkpoint_dir == checkpoints:
            candidates.append((os.stat(path / SUMMARY_FILE).st_mtime, path))
    chain: list[Path] = []
    before = reader.launch
    for ended, path in sorted(candidates, reverse=True):
        result = read_result(path)
        if ended > before:
            continue
        if result is None or result.state != JobState.PREEMPTED:
            break
        chain.insert(0, path)
        before = launch_time(path)
    return chain


class LedgerKeeper:
    """Keeps a job's ledger in its job directory: the earlier runs read once, this run's
    records followed as they grow."""

    def __init__(self, job_dir: str | Path) -> None:
        self.reader = RunReader(Path(job_dir))
        self._earlier = [RunReader(path).read() for path in earlier_runs(self.reader)]
        # Over: their time lines are reckoned once, and this run's folded pass by pass.
        self._earlier_lines = job_timelines(self._earlier, time.time())
        done_before = None
        for lines in self._earlier_lines:
            done_before = highest_step(lines, done_before)
        self._fold = RunFold(done_before)
        self.latest: RunRecords | None = None
        """This run's records as the last ledger saw them."""
        self._watches: dict[StragglerRule, StragglerWatch] = {}

    def runs(self, now: float, final_state: str | None = None) -> list[RunRecords]:
        """The runs' records; ``final_state``: this run as it ends at ``now`` in that state
        (its launcher computes the ledger before it writes the summary)."""
        run = self.latest = self.reader.read()
        if final_state is not None:
            run = dataclasses.replace(
                run, end=now, state=final_state, unsaved=self.reader.unsaved(final_state)
            )
        return [*self._earlier, run]

    def ledger(self, now: float | None = None, final_state: str | None = None) -> Ledger:
        now = time.time() if now is None else now
        runs = self.runs(now, final_state)
        return ledger_of(runs, [*self._earlier_lines, self._fold.timelines(runs[-1], now)], now)

    def stragglers(self, rule: StragglerRule) -> list[Straggler]:
        """The stragglers in this run's steps as of the last :meth:`ledger` (what
        :func:`find_stragglers` names), reckoning only the steps read since the call before."""
        watch = self._watches.setdefault(rule, StragglerWatch(rule))
        return watch.update(self.reader.arrivals, self.reader.hosts)

    def write(self, now: float | None = None, final_state: str | None = None) -> Ledger:
        """Recompute the ledger and replace ``goodput.json`` with it, and ``progress.json``
        with the ranks' progress it read (``tenter status`` reads these two files, not every
        rank's records, while the launcher runs)."""
        ledger = self.ledger(now, final_state)
        job_dir = self.reader.job_dir
        progress = ProgressSummary.of(self.reader.progress)
        write_atomic(job_dir / PROGRESS_FILE, json.dumps(progress.to_dict()))
        write_atomic(job_dir / GOODPUT_FILE, json.dumps(ledger.to_dict(), indent=2))
        return ledger
