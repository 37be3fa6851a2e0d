"""Saves that fail: every rank's part agreed on at once, and a save that failed for lack of
space (``ENOSPC``, ``EDQUOT``, on any rank, in any file, DCP's included) abandoned so that
training goes on from the previous checkpoint; any other failure ends the job as before.

A save is collective, so its outcome is too: each rank's error (or None) is gathered at the
points where the save already waited for every rank, so that no rank goes on believing it
saved while another failed, and none waits for a rank that gave up.
"""

from __future__ import annotations

import dataclasses
import errno
import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from torch.distributed.checkpoint import CheckpointException

from tenter.checkpoint import atomic
from tenter.checkpoint.errors import CheckpointError
from tenter.checkpoint.ranks import Ranks
from tenter.jobdir.events import EventKind, record_event

log = logging.getLogger(__name__)

NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
MAX_FAILED_SAVES = 3
"""The default of the Checkpointer's ``max_failed_saves``."""


def lacks_space(error: BaseException) -> bool:
    """Whether ``error`` (or what caused it) is a write refused for lack of space or quota;
    DCP's own exception when every rank's failure in it is."""
    if isinstance(error, CheckpointException):
        return bool(error.failures) and all(
            lacks_space(failure) for failure, _ in error.failures.values()
        )
    if isinstance(error, OSError) and error.errno in NO_SPACE:
        return True
    cause = error.__cause__ or error.__context__
    return cause is not None and lacks_space(cause)


def attempt(write: Callable[[], object]) -> BaseException | None:
    """Run ``write``; its exception, if any, kept for :meth:`FailedSaves.agree`."""
    try:
        write()
    except (Exception, CheckpointException) as e:  # DCP's is a BaseException
        return e
    return None


@dataclasses.dataclass(frozen=True)
class Failure:
    """One rank's failed part of a save, as every rank learns it."""

    message: str
    no_space: bool
    free_bytes: int | None
    """What the checkpoint directory's file system had free just after."""


def free_bytes(folder: Path) -> int | None:
    try:
        stat = os.statvfs(folder)
    except OSError:
        return None
    return stat.f_bavail * stat.f_frsize


class FailedSaves:
    """Agrees on each save's outcome; abandons one that failed for lack of space, up to
    ``limit`` in a row, after which (or on any other failure) it raises on every rank."""

    def __init__(self, root: Path, ranks: Ranks, limit: int) -> None:
        if limit < 0:
            raise ValueError(
                f"max_failed_saves={limit}: how many saves in a row may fail for lack of "
                "space before the job stops; 0 stops it at the first, which is the least"
            )
        self.root, self.ranks, self.limit = root, ranks, limit
        self.in_a_row = 0

    def agree(self, step: int, tmp: Path, error: BaseException | None) -> bool:
        """Whether every rank's part of the save of ``step`` (``error``: this rank's) so far
        succeeded. If not, every rank returns False (then the save is abandoned: its files
        removed, the previous checkpoint the latest) or raises :class:`CheckpointError`."""
        mine = None
        if error is not None:
            mine = Failure(_described(error), lacks_space(error), free_bytes(self.root))
        failed = {r: f for r, f in enumerate(self.ranks.gather(mine)) if f is not None}
        if not failed:
            return True
        if self.ranks.rank == 0:
            abandon(self.root, tmp)
        detail = "; ".join(
            f"rank {rank}: {f.message} ({_free(f.free_bytes)})" for rank, f in failed.items()
        )
        where = f"the save of step {step} to {self.root / atomic.checkpoint_name(step)} failed"
        if not all(f.no_space for f in failed.values()):
            raise CheckpointError(f"{where}: {detail}") from error
        self.in_a_row += 1
        if self.in_a_row > self.limit:
            raise CheckpointError(
                f"{where} for lack of space, {self.in_a_row} saves in a row (more than "
                f"max_failed_saves={self.limit}): {detail}; stopping rather than train on "
                "without checkpoints. Free space in the checkpoint directory, or lower keep"
            ) from error
        self._report(step, failed, detail)
        return False

    def saved(self) -> None:
        self.in_a_row = 0

    def _report(self, step: int, failed: dict[int, Failure], detail: str) -> None:
        """One console line and one event (``checkpoint_skipped``), from rank 0."""
        if self.ranks.rank != 0:
            return
        latest = atomic.read_manifest(self.root).latest
        previous = f"the latest is still {latest.name}" if latest else "there is none yet"
        log.warning(
            "the checkpoint of step %s in %s is skipped for lack of space (%s); training "
            "goes on (%s; %s of max_failed_saves=%s failed in a row)",
            step,
            self.root,
            detail,
            previous,
            self.in_a_row,
            self.limit,
        )
        job_dir = os.environ.get("TENTER_JOB_DIR")
        if job_dir:
            record_event(
                job_dir,
                EventKind.CHECKPOINT_SKIPPED,
                host=os.environ.get("TENTER_HOST", ""),
                step=step,
                path=str(self.root),
                failed={str(rank): dataclasses.asdict(f) for rank, f in failed.items()},
                latest=latest.step if latest else None,
                in_a_row=self.in_a_row,
            )


def _described(error: BaseException) -> str:
    """``error`` in one line; DCP's (one per rank, each with its traceback) as its first."""
    if isinstance(error, CheckpointException) and error.failures:
        first, _ = next(iter(error.failures.values()))
        return _described(first)
    return f"{type(error).__name__}: {error}"


def _free(free: int | None) -> str:
    return "free space unknown" if free is None else f"{free} bytes free"


def abandon(root: Path, tmp: Path) -> None:
    """Remove what a failed save left: its temporary folder, and its folder if the commit
    renamed it but the manifest does not list it."""
    shutil.rmtree(tmp, ignore_errors=True)
    final = root / tmp.name.removeprefix(atomic.TMP_PREFIX)
    listed = {e.name for e in atomic.read_manifest(root).checkpoints}
    if final.name not in listed:
        shutil.rmtree(final, ignore_errors=True)
