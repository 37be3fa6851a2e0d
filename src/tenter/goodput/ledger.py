"""The goodput ledger: where a job's wall time went, computed from its records by one pure
function, :func:`build_ledger`.

Every rank's time line, from the run's launch to its end (or now), is cut at the moments the
rank reported a step (``tenter.report``, or the DDP steps tenter counts itself) and each piece
gets one part:

- ``startup``: launch to the rank's first step (imports, rendezvous, data, a checkpoint load);
- ``productive``: a step that advanced training (its number is above any reached before);
- ``checkpoint``: a blocking checkpoint save (carved out of whatever piece it fell in);
- ``fault``: detection and recovery after a fault: from the last step before it (a restart, a
  rejoin, a torchft heal, a failed run's end) to the first step after;
- ``lost``: steps computed again after a resume (their number was reached before), and the
  steps since the last checkpoint of a run that was preempted without a final one;
- ``hang``: from the last step to the hang's detection (or to the end of a run stopped for it);
- ``preemption``: from the last step of a preempted run to its end, and the time until the
  run that resumes it (same job name and checkpoint directory) was launched;
- ``teardown``: from the last step of a run that ended otherwise to its end.

The job's ledger is the mean over the ranks that reported of each part, summed over the runs
of a preempted job and its resumes, so the parts add up to the wall time exactly; goodput is
``productive / wall``. Nothing here reads a file or a clock: :mod:`tenter.goodput.records`
gathers the inputs from the job directory.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tenter.spec.errors import counted

PARTS = (
    "startup",
    "productive",
    "checkpoint",
    "fault",
    "lost",
    "hang",
    "preemption",
    "teardown",
)
"""The ledger's parts, in the order they are shown."""

HANG, RESTART = "hang", "restart"
"""The kinds of :class:`Fault` the ledger tells apart (any other kind is a restart's like)."""

END_PART = {"hang": "hang", "preempted": "preemption", "failed": "fault"}
"""What the time after a finished run's last step is, by the run's state; else teardown."""


@dataclass(frozen=True)
class Fault:
    """A moment that splits a rank's steps: its workers were restarted, rejoined, healed, or
    the job was found hung."""

    time: float
    kind: str
    ranks: frozenset[int] | None = None
    """The ranks it stopped; None: every rank."""

    def hits(self, rank: int) -> bool:
        return self.ranks is None or rank in self.ranks


@dataclass(frozen=True)
class RunRecords:
    """What one run of a job left in its job directory, as the ledger needs it."""

    job_id: str
    launch: float
    end: float | None
    """When the run ended; None while it runs."""
    state: str
    """``running``, or the run's outcome (``succeeded``, ``failed``, ``preempted``, ``hang``...)."""
    steps: Mapping[int, Sequence[tuple[float, int]]]
    """Each rank's reported steps: (time, step number), in the order reported."""
    checkpoints: Mapping[int, Sequence[tuple[float, float]]] = field(default_factory=dict)
    """Each rank's blocking checkpoint saves: (start, end)."""
    faults: Sequence[Fault] = ()
    unsaved: bool = False
    """The run was preempted without a final checkpoint: each rank's steps since its last
    checkpoint (all of them, with none) are lost."""


@dataclass(frozen=True, slots=True)
class Segment:
    start: float
    end: float
    part: str


@dataclass(frozen=True)
class Ledger:
    wall_s: float
    parts: dict[str, float]
    """Seconds per part (the mean over the reporting ranks); they add up to ``wall_s``."""
    productive_steps: int
    lost_steps: int
    """Steps computed again after a resume."""
    runs: list[str]
    """The job ids of the runs counted, the first launched first."""
    ranks: int
    """Ranks whose reports the ledger is made of (0: none reported a step yet)."""

    @property
    def goodput(self) -> float:
        return self.parts["productive"] / self.wall_s if self.wall_s > 0 else 0.0

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Ledger:
        parts = dict.fromkeys(PARTS, 0.0) | {k: float(v) for k, v in data["parts"].items()}
        return cls(
            wall_s=float(data["wall_s"]),
            parts=parts,
            productive_steps=int(data["productive_steps"]),
            lost_steps=int(data["lost_steps"]),
            runs=list(data["runs"]),
            ranks=int(data["ranks"]),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "goodput": round(self.goodput, 6),
            "wall_s": round(self.wall_s, 6),
            "parts": {name: round(seconds, 6) for name, seconds in self.parts.items()},
            "productive_steps": self.productive_steps,
            "lost_steps": self.lost_steps,
            "runs": self.runs,
            "ranks": self.ranks,
        }


@dataclass(frozen=True)
class RankTimeline:
    segments: list[Segment]
    productive_steps: int
    lost_steps: int
    max_step: int | None


def _split_gap(start: float, end: float, faults: Sequence[Fault]) -> list[Segment]:
    """The pieces of a gap between two steps that a fault fell in: the wait for a hang's
    detection, then the recovery."""
    hangs = [f.time for f in faults if f.kind == HANG and start < f.time < end]
    if hangs:
        return [Segment(start, hangs[0], "hang"), Segment(hangs[0], end, "fault")]
    return [Segment(start, end, "fault")]


def rank_timeline(
    run: RunRecords, rank: int, until: float, done_before: int | None
) -> RankTimeline:
    """One rank's pieces over ``[run.launch, until]``. ``done_before``: the highest step a
    previous run reached (a step not above it is computed again)."""
    faults = sorted((f for f in run.faults if f.hits(rank)), key=lambda f: f.time)
    segments: list[Segment] = []
    cursor = run.launch
    previous: int | None = None
    highest = done_before  # the highest step reached, all attempts so far
    redo_limit = done_before  # steps up to this one are computed again in this attempt
    productive = lost = 0
    reports = sorted(
        ((t, s) for t, s in run.steps.get(rank, ()) if run.launch <= t <= until),
        key=lambda r: r[0],
    )
    for time, step in reports:
        in_gap = [f for f in faults if cursor < f.time <= time] if faults else []
        resumed = previous is not None and (step <= previous or bool(in_gap))
        if previous is None:
            segments.append(Segment(cursor, time, "startup"))
        elif resumed:
            redo_limit = highest  # a new attempt: what it computes up to there, it redoes
            segments += _split_gap(cursor, time, in_gap)
        else:
            again = redo_limit is not None and step <= redo_limit
            segments.append(Segment(cursor, time, "lost" if again else "productive"))
        # Steps since the previous report (a script may report every k steps); after a
        # resume the step it resumed from is unknown: one.
        first = 0 if previous is None and done_before is None else step - 1
        since = step - (previous if previous is not None and not resumed else first)
        again_steps = 0 if redo_limit is None else min(max(redo_limit - (step - since), 0), since)
        lost += again_steps
        productive += since - again_steps
        previous, cursor = step, time
        highest = step if highest is None else max(highest, step)
    segments += _tail(run, rank, cursor, until, previous is not None, faults)
    saves = run.checkpoints.get(rank, ())
    if run.unsaved:
        saved = max((end for _, end in saves), default=run.launch)
        unsaved_steps = sum(1 for t, _ in reports if t > saved)
        segments = _lost_after(segments, saved)
        moved = min(unsaved_steps, productive)
        productive, lost = productive - moved, lost + moved
    return RankTimeline(_carve_checkpoints(segments, saves), productive, lost, highest)


def _lost_after(segments: list[Segment], moment: float) -> list[Segment]:
    """The same time line with every productive piece after ``moment`` marked ``lost``."""
    out = []
    for s in segments:
        if s.part != "productive" or s.end <= moment:
            out.append(s)
        elif s.start >= moment:
            out.append(Segment(s.start, s.end, "lost"))
        else:
            out += [Segment(s.start, moment, s.part), Segment(moment, s.end, "lost")]
    return out


def _tail(
    run: RunRecords, rank: int, cursor: float, until: float, stepped: bool, faults: list[Fault]
) -> list[Segment]:
    """After the rank's last step: the step in progress, or how the run ended."""
    if cursor >= until:
        return []
    if not stepped:
        return [Segment(cursor, until, "startup")]
    in_tail = [f for f in faults if cursor < f.time <= until]
    if run.end is not None and run.state == HANG:
        return [Segment(cursor, until, "hang")]  # stopped for it: detection, report and stop
    if in_tail:
        return _split_gap(cursor, until, in_tail)
    if run.end is None:
        return [Segment(cursor, until, "productive")]  # the step it is computing
    return [Segment(cursor, until, END_PART.get(run.state, "teardown"))]


def _carve_checkpoints(
    segments: list[Segment], saves: Sequence[tuple[float, float]]
) -> list[Segment]:
    """The same time line with every blocking save's time marked ``checkpoint``."""
    out = segments
    for start, end in sorted(saves):
        carved: list[Segment] = []
        for s in out:
            lo, hi = max(s.start, start), min(s.end, end)
            if lo >= hi or s.part == "checkpoint":
                carved.append(s)
                continue
            if s.start < lo:
                carved.append(Segment(s.start, lo, s.part))
            carved.append(Segment(lo, hi, "checkpoint"))
            if hi < s.end:
                carved.append(Segment(hi, s.end, s.part))
        out = carved
    return out


def run_timelines(run: RunRecords, now: float, done_before: int | None) -> dict[int, RankTimeline]:
    """Every reporting rank's time line in ``run`` (one of no rank when none reported)."""
    until = run_end(run, now)
    ranks = sorted(r for r, steps in run.steps.items() if steps) or [-1]
    return {rank: rank_timeline(run, rank, until, done_before) for rank in ranks}


def job_timelines(runs: Sequence[RunRecords], now: float) -> list[dict[int, RankTimeline]]:
    """Every run's rank time lines, each run knowing the highest step the runs before it
    reached."""
    out = []
    done_before: int | None = None
    for run in runs:
        timelines = run_timelines(run, now, done_before)
        reached = [t.max_step for r, t in timelines.items() if r >= 0 and t.max_step is not None]
        if reached:
            done_before = max(reached) if done_before is None else max(done_before, *reached)
        out.append(timelines)
    return out


def run_end(run: RunRecords, now: float) -> float:
    return max(run.launch, run.end if run.end is not None else now)


def build_ledger(runs: Sequence[RunRecords], now: float) -> Ledger:
    """The ledger of a job made of ``runs`` (a preempted run, then the runs resuming it, in
    launch order), at ``now`` for a run still going."""
    parts = dict.fromkeys(PARTS, 0.0)
    productive = lost = ranks = 0
    previous_end: float | None = None
    for run, timelines in zip(runs, job_timelines(runs, now), strict=True):
        if previous_end is not None and run.launch > previous_end:
            parts["preemption"] += run.launch - previous_end
        for line in timelines.values():
            for s in line.segments:
                parts[s.part] += (s.end - s.start) / len(timelines)
        reporting = [line for rank, line in timelines.items() if rank >= 0]
        if reporting:
            productive += max(line.productive_steps for line in reporting)
            lost += max(line.lost_steps for line in reporting)
            ranks = max(ranks, len(reporting))
        previous_end = run_end(run, now)
    wall = (previous_end - runs[0].launch) if runs and previous_end is not None else 0.0
    return Ledger(wall, parts, productive, lost, [r.job_id for r in runs], ranks)


NO_STEPS = "no rank reported a step: call tenter.report, or train with DDP"


def summary_line(ledger: Ledger, why_no_steps: str = NO_STEPS) -> str:
    """``goodput 87.3 %: productive 52.1 s of 59.7 s; startup 4.2 s, checkpoint 1.1 s...``;
    ``why_no_steps`` ends the line where no rank reported a step."""
    others = ", ".join(
        f"{name} {seconds:.1f} s"
        for name, seconds in ledger.parts.items()
        if name != "productive" and seconds >= 0.05
    )
    line = (
        f"goodput {100 * ledger.goodput:.1f} %: productive {ledger.parts['productive']:.1f} s "
        f"of {ledger.wall_s:.1f} s"
    )
    if others:
        line += f"; {others}"
    if ledger.lost_steps:
        line += f"; {counted(ledger.lost_steps, 'step')} computed again"
    if len(ledger.runs) > 1:
        line += f" ({len(ledger.runs)} runs)"
    if not ledger.ranks:
        line += f" ({why_no_steps})"
    return line
