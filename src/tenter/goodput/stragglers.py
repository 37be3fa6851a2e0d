"""Stragglers: the rank that is persistently slower than the others, named from the step
times tenter already has, with no change to the training script.

In lock-step data parallelism every rank waits for the slowest at each all-reduce, so the
ranks' step *periods* are equal and say nothing. What differs is when each rank *arrives*: the
moment its own part of step k is done (its last gradient ready, as tenter counts DDP steps;
else its ``tenter.report`` of the step). A rank's **busy time** of step k is

    busy_r(k) = arrival_r(k) - max over ranks q of arrival_q(k - 1)

the time from the moment every rank had finished step k-1 (the earliest the all-reduce could
start, and so the earliest anyone could go on) to this rank's arrival at step k. A rank that
computes, loads data or sleeps longer than the others arrives later at every step: its busy
time is the whole period, the others' the period less their wait for it.

The rule (:class:`StragglerRule`, the job spec's ``stragglers``): over a window of ``window``
steps, a rank's median busy time is compared with the median of the other ranks' medians; it
is slow in that window when it is above ``ratio`` times that AND more than ``min_excess_s``
seconds above it (small steps jitter by scheduling alone). Slow in ``windows`` consecutive
windows, it is named. Medians make one late step (a checkpoint, a page fault) count for
nothing; the two thresholds and the consecutive windows make a balanced job stay unflagged.
Only the steps of the ranks' latest attempt count (a restart starts afresh). Ranks that do
not wait for one another (the others' busy time at or below zero) are never compared.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class StragglerRule:
    window: int = 5
    """Steps per window."""
    windows: int = 3
    """Consecutive slow windows before a rank is named."""
    ratio: float = 1.15
    """How many times the other ranks' median busy time a slow rank's is, at least."""
    min_excess_s: float = 0.01
    """How many seconds per step a slow rank's busy time is above the others', at least."""

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


@dataclass(frozen=True)
class Straggler:
    rank: int
    host: str
    step: int
    """The step at which the rule named it (the last of its slow windows)."""
    busy_s: float
    """Its median busy time per step, in the last window."""
    others_s: float
    """The other ranks' median busy time per step, in the same window."""

    @property
    def ratio(self) -> float:
        return self.busy_s / self.others_s if self.others_s > 0 else float("inf")

    @property
    def text(self) -> str:
        return (
            f"rank {self.rank} on {self.host} is {self.ratio:.2f}x slower than the other ranks "
            f"({1000 * self.busy_s:.1f} ms vs {1000 * self.others_s:.1f} ms per step, "
            f"up to step {self.step})"
        )

    def to_dict(self) -> dict[str, object]:
        return {**asdict(self), "ratio": round(self.ratio, 4), "text": self.text}


def _latest_attempt(reports: Sequence[tuple[float, int]]) -> dict[int, float]:
    """step -> arrival time, of the reports after the rank's last restart (a step number that
    did not rise)."""
    out: dict[int, float] = {}
    previous: int | None = None
    for time, step in reports:
        if previous is not None and step <= previous:
            out = {}
        out[step] = time
        previous = step
    return out


def _median_without(ordered: list[float], value: float) -> float:
    """The median of ``ordered`` (sorted) less one occurrence of ``value``, in O(log n): the
    other ranks' median for every rank of a window without sorting them again each time."""
    i = bisect.bisect_left(ordered, value)
    n = len(ordered) - 1

    def at(k: int) -> float:  # the k-th of the remaining values
        return ordered[k if k < i else k + 1]

    return at(n // 2) if n % 2 else (at(n // 2 - 1) + at(n // 2)) / 2


def busy_times(steps: Mapping[int, Sequence[tuple[float, int]]]) -> dict[int, dict[int, float]]:
    """step -> {rank: busy time}, for the steps every rank arrived at (and at the one
    before)."""
    arrivals = {rank: _latest_attempt(reports) for rank, reports in steps.items() if reports}
    if len(arrivals) < 2:
        return {}
    common = set.intersection(*(set(a) for a in arrivals.values()))
    out = {}
    for step in sorted(common):
        if step - 1 in common:
            ready = max(a[step - 1] for a in arrivals.values())
            out[step] = {rank: a[step] - ready for rank, a in arrivals.items()}
    return out


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    half = len(ordered) // 2
    return ordered[half] if len(ordered) % 2 else (ordered[half - 1] + ordered[half]) / 2


class StragglerWatch:
    """The rule over every rank's steps as they grow (each a list that a read appends to): an
    :meth:`update` reckons the steps added since the one before, each step's busy times once,
    each window judged once. A restart (a step number that did not rise) or a rank that
    starts reporting has it start afresh from the whole lists, as :func:`find_stragglers`
    reads them."""

    def __init__(self, rule: StragglerRule) -> None:
        self.rule = rule
        self._fed: dict[int, int] = {}
        """Each rank's steps reckoned so far."""
        self._arrivals: dict[int, dict[int, float]] = {}
        """step -> arrival, of each rank's steps not every rank arrived at yet (and the last
        step every rank arrived at)."""
        self._busy: list[tuple[int, dict[int, float]]] = []
        """The busy times of the steps not in a judged window yet."""
        self._streak: dict[int, int] = {}
        self.named: dict[int, Straggler] = {}

    def update(
        self, steps: Mapping[int, Sequence[tuple[float, int]]], hosts: Mapping[int, str]
    ) -> list[Straggler]:
        """The ranks named so far, the rank first."""
        steps = {rank: reports for rank, reports in steps.items() if reports}
        if not self._continues(steps):
            self._busy, self._streak, self.named = [], {}, {}
            self._arrivals = {rank: _latest_attempt(reports) for rank, reports in steps.items()}
        else:
            for rank, reports in steps.items():
                self._arrivals[rank].update((s, t) for t, s in reports[self._fed[rank] :])
        self._fed = {rank: len(reports) for rank, reports in steps.items()}
        if len(self._arrivals) >= 2:
            self._reckon_busy()
            self._judge(hosts)
        return sorted(self.named.values(), key=lambda s: s.rank)

    def _continues(self, steps: Mapping[int, Sequence[tuple[float, int]]]) -> bool:
        """Whether ``steps`` are the ones reckoned, each rank's followed by higher steps."""
        if steps.keys() != self._fed.keys():
            return False
        for rank, reports in steps.items():
            fed = self._fed[rank]
            if len(reports) < fed:
                return False
            last = reports[fed - 1][1] if fed else None
            for _, step in reports[fed:]:
                if last is not None and step <= last:
                    return False
                last = step
        return True

    def _reckon_busy(self) -> None:
        """Each step that every rank (and the step before) arrived at: its busy times; then
        the steps below the last are forgotten: no later step needs them, and the last, kept
        for the next, is not reckoned again (its step before is gone)."""
        arrivals = list(self._arrivals.values())
        common = sorted(set.intersection(*(set(a) for a in arrivals)))
        for step in common:
            if all(step - 1 in a for a in arrivals):
                ready = max(a[step - 1] for a in arrivals)
                self._busy.append((step, {r: a[step] - ready for r, a in self._arrivals.items()}))
        if common:  # new dicts: one that entries were deleted from keeps its size
            self._arrivals = {
                rank: {s: t for s, t in a.items() if s >= common[-1]}
                for rank, a in self._arrivals.items()
            }

    def _judge(self, hosts: Mapping[int, str]) -> None:
        rule, judged = self.rule, 0
        while len(self._busy) - judged >= rule.window:
            window = self._busy[judged : judged + rule.window]
            judged += rule.window
            medians = {rank: _median([b[rank] for _, b in window]) for rank in window[0][1]}
            ordered_medians = sorted(medians.values())
            for rank, mine in medians.items():
                others = _median_without(ordered_medians, mine)
                # The others' busy time at or below 0: they arrived before this rank had
                # finished the step before, so they do not wait for it (torchft's replica
                # groups training apart, a late group jumping to its peers' step): no lock-step,
                # nothing to compare.
                slow = (
                    others > 0 and mine > rule.ratio * others and mine - others > rule.min_excess_s
                )
                self._streak[rank] = self._streak.get(rank, 0) + 1 if slow else 0
                if self._streak[rank] >= rule.windows and rank not in self.named:
                    step = window[-1][0]
                    self.named[rank] = Straggler(rank, hosts.get(rank, "?"), step, mine, others)
        del self._busy[:judged]


def find_stragglers(
    steps: Mapping[int, Sequence[tuple[float, int]]],
    hosts: Mapping[int, str],
    rule: StragglerRule,
) -> list[Straggler]:
    """The ranks slow in ``rule.windows`` consecutive windows of steps, each as of the first
    step at which the rule named it (whenever the records are read, the same answer)."""
    return StragglerWatch(rule).update(steps, hosts)
