"""The files observability writes in the job directory, and their readers::

<job_dir>/metrics/rank-<N>.jsonl   what rank N's script reported (tenter.report), one line each
<job_dir>/metrics.jsonl            the launcher's samples of every rank (LiveView), one line
                                   per rank per interval

A rank file's line: ``{"time": 1732.5, "step": 12, "samples": 64, "loss": 0.41,
"total_steps": 276, "metrics": {"epoch": 1}}`` (``samples``: processed since the previous
report; only what the script passed is present). A restarted rank appends to the same file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tenter.jobdir.layout import METRICS_FILE, RANK_DIR, rank_file
from tenter.jobdir.records import JsonlFollower

__all__ = [
    "JsonlFollower",
    "Sample",
    "rank_file",
    "read_metrics",
    "read_rank_samples",
]


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


def read_rank_samples(job_dir: str | os.PathLike[str]) -> dict[int, list[Sample]]:
    """Every rank's reported samples, by rank, in the order they were reported."""
    out: dict[int, list[Sample]] = {}
    directory = Path(job_dir) / RANK_DIR
    if not directory.is_dir():
        return out
    for path in directory.glob("rank-*.jsonl"):
        rank = int(path.stem.removeprefix("rank-"))
        out[rank] = [Sample.from_json(d) for d in JsonlFollower(path).read_new()]
    return dict(sorted(out.items()))


def read_metrics(job_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The launcher's samples (``metrics.jsonl``); empty if the job ran without them."""
    return JsonlFollower(Path(job_dir) / METRICS_FILE).read_new()
