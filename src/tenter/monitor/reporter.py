"""``tenter.report(step=..., samples=..., loss=..., total_steps=..., **metrics)``.

Called by the training script, typically once per step::

    for step, (x, y) in enumerate(loader, 1):
        ...
        tenter.report(step=step, samples=len(x), loss=loss.item(), total_steps=total)

Rank-local: each rank appends to ``<job_dir>/metrics/rank-<N>.jsonl`` (the directory from
``TENTER_JOB_DIR``, which tenter gives every worker); the launcher's live view, ``tenter
report`` and ``tenter scale`` read those files. Outside tenter (plain ``python``, torchrun)
it does nothing. It is cheap: a call appends to an in-memory buffer (about a microsecond); a
background thread writes the buffer every 0.5 s, and at exit. It never imports torch and
never synchronises with the GPU: pass ``loss.item()`` (a number), not a CUDA tensor, if you
do not already call ``.item()``.

``samples`` is how many samples this rank processed since its previous report (the batch,
when reporting every step); ``step`` is a step counter that keeps rising across epochs;
``total_steps`` (the last step's number) lets the launcher show progress and an ETA. Other
keywords (``lr=...``, ``epoch=...``) are recorded as numbers too.
"""

from __future__ import annotations

import os
import time
from typing import SupportsFloat

from tenter.jobdir.layout import rank_file, worker_rank
from tenter.jobdir.line_files import BufferedLines as Reporter

_reporter: Reporter | None = None
_checked = False


def _this_rank() -> Reporter | None:
    global _reporter, _checked
    if not _checked:
        _checked = True
        job_dir = os.environ.get("TENTER_JOB_DIR")
        _reporter = Reporter(rank_file(job_dir, worker_rank(os.environ))) if job_dir else None
    return _reporter


def report(
    step: int | None = None,
    samples: int | None = None,
    loss: SupportsFloat | None = None,
    total_steps: int | None = None,
    **metrics: SupportsFloat,
) -> None:
    """Record this rank's progress; a no-op outside a tenter job. See the module docstring."""
    reporter = _this_rank()
    if reporter is None:
        return
    record: dict[str, object] = {"time": time.time()}
    if step is not None:
        record["step"] = int(step)
    if samples is not None:
        record["samples"] = int(samples)
    if loss is not None:
        record["loss"] = float(loss)
    if total_steps is not None:
        record["total_steps"] = int(total_steps)
    if metrics:
        record["metrics"] = {name: float(value) for name, value in metrics.items()}
    reporter.add(record)


def flush() -> None:
    """Write what this rank reported so far now (the background thread does it every 0.5 s)."""
    reporter = _this_rank()
    if reporter is not None:
        reporter.flush()
