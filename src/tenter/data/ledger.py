"""The sample ledger: which samples of each epoch a job trained on, and how often.

A training script logs, after each step, the dataset indices this rank trained on
(:class:`SampleLog`, one line per step in ``<job_dir>/metrics/samples/rank-<N>.jsonl``)::

    {"attempt": "<run id>/<restart>/<port>", "step": 7, "epoch": 1, "indices": [5, 17], "time": ...}

:func:`sample_ledger` reads them back: a step that a restart did again (from an earlier
checkpoint) counts once, in the attempt that did it last, since the model of the rolled-back
attempt is gone; then, per epoch, the indices trained on twice or more (duplicates) and the
dataset's indices never trained on (gaps). Torch-free, so that benchmarks and the launcher side
can read it.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tenter.jobdir.layout import RANK_DIR, SAMPLES_DIR, rank_samples_file
from tenter.jobdir.line_files import append_line, read_lines


@dataclass(frozen=True)
class SampleRecord:
    """One step of one rank: the dataset indices it trained on."""

    rank: int
    attempt: str
    step: int
    epoch: int
    indices: tuple[int, ...]
    time: float


@dataclass
class EpochLedger:
    """One epoch's count: ``seen`` indices trained on (padding included), ``duplicates`` the
    indices trained on more than once (index -> times), ``gaps`` those never trained on."""

    epoch: int
    seen: int = 0
    duplicates: dict[int, int] = field(default_factory=dict)
    gaps: list[int] = field(default_factory=list)


class SampleLog:
    """A rank's log of the samples it trained on. Each ``write`` is one appended line (some
    ten microseconds), at once: a rank killed a moment later has logged every step it did."""

    def __init__(
        self,
        job_dir: str | os.PathLike[str] | None = None,
        rank: int | None = None,
        attempt: str | None = None,
    ):
        """``attempt``: :func:`attempt_of` the worker's environment where None; one for every
        record of a job whose steps are never done again (torchft's committed steps)."""
        job_dir = job_dir if job_dir is not None else os.environ["TENTER_JOB_DIR"]
        self.rank = rank if rank is not None else int(os.environ.get("RANK", "0"))
        self.path = rank_samples_file(job_dir, self.rank)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.attempt = attempt if attempt is not None else attempt_of(os.environ)

    def write(self, step: int, epoch: int, indices: Sequence[int]) -> None:
        """Step ``step`` (the steps done, this one included) of ``epoch`` trained on ``indices``."""
        record = {"attempt": self.attempt, "step": step, "epoch": epoch}
        append_line(self.path, {**record, "indices": list(indices), "time": time.time()})


def attempt_of(environ: Mapping[str, str]) -> str:
    """The workers' attempt (``environ``: a worker's): the same on every rank of one start of
    the workers, another at every restart. ``TORCHELASTIC_RESTART_COUNT`` alone is not: a
    restart that lets a joining host in leaves it unchanged. Under tenter each rendezvous
    round's workers meet at a new ``MASTER_PORT`` (group rank 0's fresh store); under
    torchrun's c10d rendezvous the port stays (its store is shared) but a join changes
    ``WORLD_SIZE``. Not told apart: a torchrun round that loses a host and takes in another
    at once."""
    run, restart = environ.get("TORCHELASTIC_RUN_ID", ""), environ.get("TORCHELASTIC_RESTART_COUNT")
    world, port = environ.get("WORLD_SIZE", ""), environ.get("MASTER_PORT", "")
    return f"{run}/{restart or '0'}/{world}/{port}"


def read_sample_log(job_dir: str | os.PathLike[str]) -> list[SampleRecord]:
    """Every rank's records, in the order each rank wrote them."""
    records = []
    for path in sorted((Path(job_dir) / RANK_DIR / SAMPLES_DIR).glob("rank-*.jsonl")):
        rank = int(path.stem.removeprefix("rank-"))
        for line in read_lines(path):
            indices = tuple(line["indices"])
            fields = (line["attempt"], line["step"], line["epoch"], indices, line["time"])
            records.append(SampleRecord(rank, *fields))
    return records


def effective(records: Iterable[SampleRecord]) -> list[SampleRecord]:
    """The records whose steps the job kept: an attempt's steps after the step a later attempt
    resumed from were done again there (or lost), and count in the later one only."""
    by_attempt: dict[str, list[SampleRecord]] = {}
    for record in records:
        by_attempt.setdefault(record.attempt, []).append(record)
    attempts = sorted(by_attempt.values(), key=lambda rs: min(r.time for r in rs))
    kept: list[SampleRecord] = []
    redone_after = None  # the earliest step any later attempt did again
    for attempt in reversed(attempts):
        kept += [r for r in attempt if redone_after is None or r.step < redone_after]
        first = min(r.step for r in attempt)
        redone_after = first if redone_after is None else min(redone_after, first)
    return kept


def sample_ledger(records: Iterable[SampleRecord], dataset_size: int) -> dict[int, EpochLedger]:
    """Per epoch (by number): the duplicates and gaps of the steps the job kept
    (:func:`effective`) among the dataset's ``dataset_size`` indices."""
    counts: dict[int, Counter[int]] = {}
    for record in effective(records):
        counts.setdefault(record.epoch, Counter()).update(record.indices)
    ledgers = {}
    for epoch, seen in sorted(counts.items()):
        duplicates = {i: n for i, n in sorted(seen.items()) if n > 1}
        gaps = [i for i in range(dataset_size) if i not in seen]
        ledgers[epoch] = EpochLedger(epoch, sum(seen.values()), duplicates, gaps)
    return ledgers
