"""The Checkpointer's settings that a ``tenter run`` job spec gives: where checkpoints go, how
often, how many are kept."""

from __future__ import annotations

import os
from pathlib import Path

from tenter.jobdir.layout import CHECKPOINTS_DIR


def default_dir() -> Path:
    """``$TENTER_CHECKPOINT_DIR`` (``tenter run`` sets it from the job spec's
    ``checkpoint.dir``: by default one folder for the whole job, which every simulated host
    sees and which survives restarts), else ``$TENTER_JOB_DIR/checkpoints``, else
    ``./checkpoints``."""
    checkpoint_dir = os.environ.get("TENTER_CHECKPOINT_DIR")
    if checkpoint_dir:
        return Path(checkpoint_dir)
    job_dir = os.environ.get("TENTER_JOB_DIR")
    return Path(job_dir) / CHECKPOINTS_DIR if job_dir else Path(CHECKPOINTS_DIR)


def _env_default(arg: str) -> int | None:
    """The default of the Checkpointer's ``every`` or ``keep``: what ``tenter run`` passes
    from the job spec's ``checkpoint.<arg>`` as ``TENTER_CHECKPOINT_<ARG>``; None if unset."""
    name = f"TENTER_CHECKPOINT_{arg.upper()}"
    value = os.environ.get(name)
    if not value:
        return None
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise ValueError(
            f"{name}={value!r} is not a whole number of at least 1 (the Checkpointer's default "
            f"{arg}, from the job spec's checkpoint.{arg}); fix or unset it, or pass "
            f"Checkpointer({arg}=N)"
        )
    return number


def interval(every: int | None, keep: int | None) -> tuple[int | None, int]:
    """``every`` and ``keep``, or their defaults from the job spec (see the class)."""
    every = every if every is not None else _env_default("every")
    keep = keep if keep is not None else (_env_default("keep") or 3)
    if every is not None and every < 1:
        raise ValueError(f"every={every}: the save interval must be at least 1 step")
    if keep < 1:
        raise ValueError(f"keep={keep}: at least the latest checkpoint must be kept")
    return every, keep
