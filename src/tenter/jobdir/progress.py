"""A rank's progress, as every reader of it sees it: the live view, ``tenter status``, ``tenter
report`` and the goodput ledger.

Two records hold it. ``metrics/rank-<N>.jsonl``: what the script reported with
``tenter.report`` (a :class:`Sample` a call: step, samples, loss...). ``metrics/steps/rank-<N>
.jsonl``: the DDP steps tenter counted itself (:mod:`tenter.runtime.steps`), ``{"time": t,
"step": k}`` when the rank's gradients of step k were ready, for every script that trains with
DDP, whether it calls ``tenter.report`` or not. A rank's **steps** are its reported steps where
it reported any (the script's own count), else the counted ones; its **arrivals** (for the
straggler rule) are the counted ones where there are any (when its own work was done, before
the all-reduce's wait), else its reported steps.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tenter.jobdir.layout import PROGRESS_FILE, RANK_DIR, RANK_PREFIX, STEPS_DIR, rank_of
from tenter.jobdir.line_files import JsonlFollower

Step = tuple[float, int]
"""(time, step number)."""


@dataclass(frozen=True)
class Sample:
    """One ``tenter.report`` call."""

    time: float
    step: int | None = None
    samples: int | None = None
    loss: float | None = None
    total_steps: int | None = None
    metrics: dict[str, float] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Sample:
        return cls(
            time=float(data["time"]),
            step=data.get("step"),
            samples=data.get("samples"),
            loss=data.get("loss"),
            total_steps=data.get("total_steps"),
            metrics=data.get("metrics", {}),
        )


@dataclass
class RankProgress:
    """What one rank recorded so far: its reports and counted steps (all of them, or the last
    ``window_s`` seconds' of each, see :class:`ProgressReader`), and totals over all of them."""

    reports: list[Sample] = field(default_factory=list)
    reported: list[Step] = field(default_factory=list)
    """The reports that carry a step."""
    counted: list[Step] = field(default_factory=list)
    samples: int = 0
    """Samples reported in all."""
    loss: float | None = None
    """The last loss reported."""
    total_steps: int | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    """The last value reported of each other metric."""

    @property
    def steps(self) -> list[Step]:
        return self.reported or self.counted

    @property
    def arrivals(self) -> list[Step]:
        return self.counted or self.reported

    @property
    def step(self) -> int | None:
        """The rank's last step."""
        return self.steps[-1][1] if self.steps else None

    @property
    def counted_only(self) -> bool:
        """Its steps are the DDP steps tenter counted: the script does not report them."""
        return not self.reported and bool(self.counted)

    def add(
        self, reports: list[dict[str, Any]], counted: list[dict[str, Any]], keep_reports: bool
    ) -> None:
        for data in reports:
            sample = Sample.from_json(data)
            if keep_reports:
                self.reports.append(sample)
            if sample.step is not None:
                self.reported.append((sample.time, int(sample.step)))
            self.samples += sample.samples or 0
            self.loss = sample.loss if sample.loss is not None else self.loss
            self.total_steps = sample.total_steps or self.total_steps
            self.metrics.update(sample.metrics)
        self.counted += [(float(d["time"]), int(d["step"])) for d in counted]

    def forget_before(self, window_s: float) -> None:
        """Keep the records of the last ``window_s`` seconds of each kind (two at least)."""
        for records in (self.reports, self.reported, self.counted):
            cut = 0
            while len(records) - cut > 2 and _time(records[-1]) - _time(records[cut]) > window_s:
                cut += 1
            del records[:cut]

    def samples_per_s(self) -> float | None:
        """Over the reports kept: the samples reported after the first, over the time since
        (the first report's samples were processed before it)."""
        if len(self.reports) < 2:
            return None
        span = self.reports[-1].time - self.reports[0].time
        count = sum(s.samples or 0 for s in self.reports[1:])
        return count / span if span > 0 and count > 0 else None

    def step_time_s(self) -> float | None:
        """Over the steps kept: seconds per step."""
        if len(self.steps) < 2:
            return None
        (t0, step0), (t1, step1) = self.steps[0], self.steps[-1]
        return (t1 - t0) / (step1 - step0) if step1 > step0 and t1 > t0 else None


def _time(record: Sample | Step) -> float:
    return record.time if isinstance(record, Sample) else record[0]


class ProgressReader:
    """Every rank's progress in a job directory, read again as it grows (the lines added since
    the last :meth:`read` only). ``window_s``: keep only the last that many seconds of each
    rank's records (a live view's rates), not the whole run's; ``keep_reports``: False keeps
    the reports' steps and totals only (the ledger's needs, in a fraction of the memory)."""

    def __init__(
        self,
        job_dir: str | os.PathLike[str],
        window_s: float | None = None,
        keep_reports: bool = True,
    ) -> None:
        self._reports = Path(job_dir) / RANK_DIR
        self._counted = self._reports / STEPS_DIR
        self._window_s = window_s
        self._keep_reports = keep_reports
        self._followers: dict[Path, JsonlFollower] = {}
        self.ranks: dict[int, RankProgress] = {}

    def read(self) -> dict[int, RankProgress]:
        """Every rank that recorded anything, by rank."""
        reports, counted = self._new_lines(self._reports), self._new_lines(self._counted)
        for rank in reports.keys() | counted.keys():
            progress = self.ranks.setdefault(rank, RankProgress())
            progress.add(reports.get(rank, []), counted.get(rank, []), self._keep_reports)
            if self._window_s is not None:
                progress.forget_before(self._window_s)
        self.ranks = dict(sorted(self.ranks.items()))
        return self.ranks

    def _new_lines(self, folder: Path) -> dict[int, list[dict[str, Any]]]:
        if not folder.is_dir():
            return {}
        out = {}
        for path in folder.glob(f"{RANK_PREFIX}*.jsonl"):
            rank = rank_of(path)
            if rank is not None:
                out[rank] = self._followers.setdefault(path, JsonlFollower(path)).read_new()
        return out


def read_progress(job_dir: str | os.PathLike[str]) -> dict[int, RankProgress]:
    """Every rank's progress in a job directory, now."""
    return ProgressReader(job_dir).read()


@dataclass(frozen=True)
class ProgressSummary:
    """The job's progress in a line's worth of figures: what ``tenter status`` prints, kept
    by the launcher in ``progress.json`` beside its ledger so that ``status`` reads one file,
    not every rank's records."""

    ranks: int = 0
    """Ranks that finished a step."""
    low: int | None = None
    high: int | None = None
    """The lowest and highest rank's last step."""
    total_steps: int | None = None
    counted_only: bool = False
    """No rank reports its steps: they are the DDP steps tenter counted."""

    @classmethod
    def of(cls, ranks: Mapping[int, RankProgress]) -> ProgressSummary:
        at = [p.step for p in ranks.values() if p.step is not None]
        if not at:
            return cls()
        totals = [p.total_steps for p in ranks.values() if p.total_steps]
        return cls(
            ranks=len(at),
            low=min(at),
            high=max(at),
            total_steps=max(totals) if totals else None,
            counted_only=all(p.counted_only for p in ranks.values() if p.step is not None),
        )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProgressSummary:
        return cls(**{f.name: data[f.name] for f in dataclasses.fields(cls)})

    def line(self) -> str:
        """``progress: 4 ranks at steps 56-57 of 100``, and ``; DDP steps counted by
        tenter...`` where no rank reports its steps."""
        if not self.ranks:
            return "progress: no rank has finished a step yet"
        low, high = self.low, self.high
        text = (
            f"progress: {self.ranks} ranks at step{f' {low}' if low == high else f's {low}-{high}'}"
        )
        if self.total_steps:
            text += f" of {self.total_steps}"
        if self.counted_only:
            text += "; DDP steps counted by tenter (the script does not call tenter.report)"
        return text


def kept_progress(job_dir: Path) -> ProgressSummary | None:
    """The progress the launcher last kept (``progress.json``); None before its first pass."""
    try:
        return ProgressSummary.from_dict(json.loads((job_dir / PROGRESS_FILE).read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None
