"""The running job's rank time lines, folded pass by pass: each rank's walk
(:func:`tenter.goodput.ledger.walk_on`) goes on from the last report the pass before reached,
so that a launcher's ledger pass costs O(new steps, faults and saves), not O(steps so far).
A rank's pieces of one part, end to end, are one piece: what the walk holds grows with the
faults, not the steps. The ledger is the same as :func:`~tenter.goodput.ledger.build_ledger`'s
(tests/goodput/test_fold.py): faults and saves are recorded before the steps that follow them,
so none lands among the steps a pass already walked; a rank's reports out of time order, or
before the launch, are walked again from the first."""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import islice

from tenter.goodput.ledger import (
    TIME,
    RankTimeline,
    RunRecords,
    Walk,
    rank_faults,
    rank_timeline,
    run_end,
    timeline_of,
    walk_on,
)


@dataclass
class _RankWalk:
    walk: Walk
    reports: Sequence[tuple[float, int]]
    """The list the reader appends to (the walk's reports are its first ``walked``)."""
    walked: int
    in_order: bool = True
    """Whether every report so far came in time order, after the launch (else the rank's
    time line is reckoned from all of them, each pass)."""


class RunFold:
    """One run's rank time lines, each rank's reports walked once."""

    def __init__(self, done_before: int | None) -> None:
        """``done_before``: the highest step the runs before it reached (they are over)."""
        self._done_before = done_before
        self._ranks: dict[int, _RankWalk] = {}

    def timelines(self, run: RunRecords, now: float) -> dict[int, RankTimeline]:
        """What :func:`~tenter.goodput.ledger.run_timelines` gives for ``run`` at ``now``."""
        until = run_end(run, now)
        ranks = sorted(r for r, steps in run.steps.items() if steps)
        if not ranks:
            return {-1: rank_timeline(run, -1, until, self._done_before)}
        return {rank: self._timeline(run, rank, until) for rank in ranks}

    def _timeline(self, run: RunRecords, rank: int, until: float) -> RankTimeline:
        reports = run.steps[rank]
        state = self._ranks.get(rank)
        if state is None or state.reports is not reports or state.walked > len(reports):
            state = self._ranks[rank] = _RankWalk(Walk(run.launch, self._done_before), reports, 0)
            state.in_order = reports[0][0] >= run.launch
        state.in_order = state.in_order and _in_order(reports, max(state.walked - 1, 0))
        if not state.in_order or reports[-1][0] > until:
            return rank_timeline(run, rank, until, self._done_before)  # sorts and clips them
        faults = rank_faults(run, rank)
        walk_on(state.walk, reports, state.walked, faults, self._done_before)
        state.walked = len(reports)
        return timeline_of(state.walk, run, rank, reports, until, faults)


def _in_order(reports: Sequence[tuple[float, int]], begin: int) -> bool:
    """Whether ``reports[begin:]`` are in time order."""
    times = list(map(TIME, reports[begin:]))
    return all(map(operator.le, times, islice(times, 1, None)))
