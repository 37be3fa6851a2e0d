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
``productive / wall``. Nothing here reads a file or a clock: :mod:`tenter.goodput.keeper`
gathers the inputs from the job directory.
"""

from __future__ import annotations

import bisect
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import compress, count, islice
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


TIME, STEP = operator.itemgetter(0), operator.itemgetter(1)


def _reports_within(
    reports: Sequence[tuple[float, int]], launch: float, until: float
) -> Sequence[tuple[float, int]]:
    """The reports in ``[launch, until]``, in time order (those of one time in the order
    reported). Each pass over them here and in :func:`_breaks` is one of C, without lists of
    their times or steps: a long job's reports do not fit a core's cache, so every pass and
    every copy counts."""
    if not all(map(operator.le, map(TIME, reports), map(TIME, islice(reports, 1, None)))):
        reports = sorted(reports, key=TIME)
    lo = bisect.bisect_left(reports, launch, key=TIME)
    hi = bisect.bisect_right(reports, until, key=TIME)
    return reports if (lo, hi) == (0, len(reports)) else reports[lo:hi]


def _breaks(reports: Sequence[tuple[float, int]], fault_times: list[float]) -> list[int]:
    """The reports after the first that start a new attempt: their step number did not rise,
    or a fault fell in the gap before them. Between two, every report advances by one piece."""
    fell = (bisect.bisect_left(reports, t, key=TIME) for t in fault_times)
    steps = map(STEP, reports)
    rose = compress(count(1), map(operator.le, map(STEP, islice(reports, 1, None)), steps))
    return sorted({i for i in fell if 0 < i < len(reports)}.union(rose))


class Walk:
    """The state of the walk along one rank's reports, and the pieces laid so far (a piece
    that continues the previous one of its part extends it)."""

    def __init__(self, launch: float, done_before: int | None) -> None:
        self.segments: list[Segment] = []
        self.cursor = launch
        self.previous: int | None = None
        self.highest = done_before  # the highest step reached, all attempts so far
        self.redo_limit = done_before  # steps up to this one are computed again here
        self.productive = self.lost = 0

    def lay(self, end: float, part: str) -> None:
        last = self.segments[-1] if self.segments else None
        if last is not None and last.part == part and last.end == self.cursor:
            self.segments[-1] = Segment(last.start, end, part)
        else:
            self.segments.append(Segment(self.cursor, end, part))
        self.cursor = end

    def count(self, since_step: int, step: int) -> None:
        """The steps after ``since_step`` up to ``step``: computed again up to the redo
        limit, productive above it."""
        since = step - since_step
        again = 0 if self.redo_limit is None else min(max(self.redo_limit - since_step, 0), since)
        self.lost += again
        self.productive += since - again
        self.previous = step
        self.highest = step if self.highest is None else max(self.highest, step)

    def first(self, time: float, step: int, done_before: int | None) -> None:
        self.lay(time, "startup")
        # A script may report every k steps; a resumed run's first step: one.
        self.count(0 if done_before is None else step - 1, step)

    def resume(self, time: float, step: int, in_gap: Sequence[Fault]) -> None:
        self.redo_limit = self.highest  # a new attempt: what it computes up to there, it redoes
        for piece in _split_gap(self.cursor, time, in_gap):
            self.lay(piece.end, piece.part)
        self.count(step - 1, step)  # the step it resumed from is unknown: one

    def advance(self, reports: Sequence[tuple[float, int]], a: int, b: int) -> None:
        """Reports ``a`` to ``b - 1``, each a step above the one before and no fault between:
        those up to the redo limit computed again, the rest productive."""
        limit = self.redo_limit
        again = a if limit is None else bisect.bisect_right(reports, limit, a, b, key=STEP)
        if again > a:
            self.lay(reports[again - 1][0], "lost")
        if b > again:
            self.lay(reports[b - 1][0], "productive")
        assert self.previous is not None
        self.count(self.previous, reports[b - 1][1])


def walk_on(
    walk: Walk,
    reports: Sequence[tuple[float, int]],
    begin: int,
    faults: list[Fault],
    done_before: int | None,
) -> None:
    """Go on along ``reports[begin:]``, those before walked already (:mod:`.fold` goes on
    from one pass's last report): a resume at each break, and between two breaks the reports
    in one stride."""
    if begin >= len(reports):
        return
    fault_times = [f.time for f in faults]
    if begin == 0:
        walk.first(*reports[0], done_before)
    after = begin = max(begin, 1)
    news = reports[begin - 1 :] if begin > 1 else reports
    for i in [*(begin - 1 + b for b in _breaks(news, fault_times)), len(reports)]:
        if i > after:
            walk.advance(reports, after, i)
        if i < len(reports):
            time, step = reports[i]
            lo, hi = (bisect.bisect_right(fault_times, t) for t in (walk.cursor, time))
            walk.resume(time, step, faults[lo:hi])
        after = i + 1


def rank_faults(run: RunRecords, rank: int) -> list[Fault]:  # in time order
    return sorted((f for f in run.faults if f.hits(rank)), key=lambda f: f.time)


def rank_timeline(
    run: RunRecords, rank: int, until: float, done_before: int | None
) -> RankTimeline:
    """One rank's pieces over ``[run.launch, until]``. ``done_before``: the highest step a
    previous run reached (a step not above it is computed again). Linear in the rank's
    reports and saves."""
    faults = rank_faults(run, rank)
    reports = _reports_within(run.steps.get(rank, ()), run.launch, until)
    walk = Walk(run.launch, done_before)
    walk_on(walk, reports, 0, faults, done_before)
    return timeline_of(walk, run, rank, reports, until, faults)


def timeline_of(
    walk: Walk,
    run: RunRecords,
    rank: int,
    reports: Sequence[tuple[float, int]],
    until: float,
    faults: list[Fault],
) -> RankTimeline:
    """The time line of a rank whose ``reports`` were walked: its pieces (one a stretch of one
    part), what came after its last step, what a preemption lost, the saves carved out."""
    segments = walk.segments + _tail(run, rank, walk.cursor, until, bool(reports), faults)
    productive, lost = walk.productive, walk.lost
    saves = run.checkpoints.get(rank, ())
    if run.unsaved:
        saved = max((end for _, end in saves), default=run.launch)
        unsaved_steps = len(reports) - bisect.bisect_right(reports, saved, key=TIME)
        segments = _lost_after(segments, saved)
        moved = min(unsaved_steps, productive)
        productive, lost = productive - moved, lost + moved
    return RankTimeline(_carve_checkpoints(segments, saves), productive, lost, walk.highest)


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


def _union(saves: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """The moments inside any of ``saves``, as disjoint intervals in time order."""
    out: list[tuple[float, float]] = []
    for start, end in sorted(saves):
        if start >= end:
            continue
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def _carve_checkpoints(
    segments: list[Segment], saves: Sequence[tuple[float, float]]
) -> list[Segment]:
    """The same time line with every blocking save's time marked ``checkpoint``: one sweep
    along the pieces (in time order, end to end) and the saves' union."""
    blocks = _union(saves)
    if not blocks:
        return segments
    out: list[Segment] = []
    first = 0  # the first block that does not end before the piece at hand
    for s in segments:
        while first < len(blocks) and blocks[first][1] <= s.start:
            first += 1
        cursor, block = s.start, first
        while cursor < s.end and block < len(blocks) and blocks[block][0] < s.end:
            lo, hi = max(blocks[block][0], cursor), min(blocks[block][1], s.end)
            if cursor < lo:
                out.append(Segment(cursor, lo, s.part))
            out.append(Segment(lo, hi, "checkpoint"))
            cursor, block = hi, block + 1
        if cursor < s.end or s.start == s.end:
            out.append(Segment(cursor, s.end, s.part))
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
        out.append(timelines := run_timelines(run, now, done_before))
        done_before = highest_step(timelines, done_before)
    return out


def highest_step(timelines: Mapping[int, RankTimeline], before: int | None) -> int | None:
    """The highest step reached: ``before``, or by a rank of ``timelines``."""
    reached = [t.max_step for r, t in timelines.items() if r >= 0 and t.max_step is not None]
    return max([*reached, *([] if before is None else [before])], default=None)


def run_end(run: RunRecords, now: float) -> float:
    return max(run.launch, run.end if run.end is not None else now)


def build_ledger(runs: Sequence[RunRecords], now: float) -> Ledger:
    """The ledger of a job made of ``runs`` (a preempted run, then the runs resuming it, in
    launch order), at ``now`` for a run still going."""
    return ledger_of(runs, job_timelines(runs, now), now)


def ledger_of(
    runs: Sequence[RunRecords], timelines: Sequence[Mapping[int, RankTimeline]], now: float
) -> Ledger:
    """The ledger of ``runs`` whose rank time lines are ``timelines`` (:func:`job_timelines`)."""
    parts = dict.fromkeys(PARTS, 0.0)
    productive = lost = ranks = 0
    previous_end: float | None = None
    for run, lines in zip(runs, timelines, strict=True):
        if previous_end is not None and run.launch > previous_end:
            parts["preemption"] += run.launch - previous_end
        for line in lines.values():
            for s in line.segments:
                parts[s.part] += (s.end - s.start) / len(lines)
        reporting = [line for rank, line in lines.items() if rank >= 0]
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
