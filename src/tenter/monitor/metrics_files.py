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
from pathlib import Path
from typing import Any

from tenter.jobdir.layout import METRICS_FILE, rank_file
from tenter.jobdir.line_files import JsonlFollower
from tenter.jobdir.progress import Sample, read_progress

__all__ = [
    "JsonlFollower",
    "Sample",
    "rank_file",
    "read_metrics",
    "read_rank_samples",
]


def read_rank_samples(job_dir: str | os.PathLike[str]) -> dict[int, list[Sample]]:
    """Every rank's reported samples, by rank, in the order they were reported."""
    return {rank: p.reports for rank, p in read_progress(job_dir).items() if p.reports}


def read_metrics(job_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The launcher's samples (``metrics.jsonl``); empty if the job ran without them."""
    return JsonlFollower(Path(job_dir) / METRICS_FILE).read_new()
