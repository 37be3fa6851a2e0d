"""The Checkpointer: save everything a training run needs to continue, and resume from it.

::

    ckpt = Checkpointer(model, optimizer, scheduler, sampler=sampler, every=50, keep=3)
    start = ckpt.resume()             # 0 on a fresh start, else the saved step; restores all
    for step in range(start, total):
        ...
        ckpt.maybe_save(step + 1)     # saves when step + 1 is a multiple of `every`
        if ckpt.preempted:            # SIGTERM: a final checkpoint was saved; stop here
            break
    ckpt.close()                      # the last asynchronous save is durable

Two ways of saving, chosen from the model:

- **Replicated** (a plain module or ``DistributedDataParallel``): rank 0 writes the model,
  optimizer, scheduler and extras with ``torch.save``; the other ranks wait at a barrier.
- **Sharded** (parameters are DTensors, as after FSDP2's ``fully_shard``, or FSDP1 modules;
  a :class:`tenter.parallel.Pipeline`, whose ranks hold different stages; or
  ``sharded=True``): every rank writes its own part of the model and optimizer through
  ``torch.distributed.checkpoint`` (DCP), keyed by the whole model's parameter names, which
  can also load them into a world of another size or layout.

In both, every rank also writes its own RNG states and data position, and the commit
protocol of :mod:`tenter.checkpoint.atomic` makes the checkpoint appear all at once.
Every method is collective under ``torch.distributed``: all ranks call it, in the same order.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import torch
from torch import nn
from torch.distributed.checkpoint.stateful import Stateful
from torch.distributed.fsdp import FullyShardedDataParallel
from torch.distributed.tensor import DTensor
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler
from torch.utils.data import DataLoader, Sampler

from tenter.checkpoint import atomic
from tenter.checkpoint.commits import Commits
from tenter.checkpoint.errors import CheckpointError
from tenter.checkpoint.failed_saves import MAX_FAILED_SAVES, FailedSaves, attempt
from tenter.checkpoint.model_state import ModelState
from tenter.checkpoint.ranks import Ranks
from tenter.checkpoint.run_state import (
    STATE_FILE,
    common_state,
    own_state,
    rank_file,
    read_own,
    restore_common,
)
from tenter.checkpoint.settings import default_dir, interval
from tenter.checkpoint.state import set_rng_state, track
from tenter.goodput.keeper import record_checkpoint, record_resume
from tenter.parallel.pipeline import LocalStages, Pipeline, StageModule
from tenter.runtime import steps
from tenter.runtime.preemption import Preempted, Preemption

log = logging.getLogger(__name__)
T = TypeVar("T")


def is_pipelined(model: nn.Module) -> bool:
    """Whether ``model`` is a pipeline's part on this rank (other ranks hold other stages)."""
    return isinstance(model, LocalStages | StageModule)


def is_sharded(model: nn.Module) -> bool:
    """Whether ``model``'s parameters are spread over the ranks (FSDP2, FSDP1, pipeline)."""
    return (
        is_pipelined(model)
        or any(isinstance(p, DTensor) for p in model.parameters())
        or any(isinstance(m, FullyShardedDataParallel) for m in model.modules())
    )


def _recorded(resume: Callable[[Checkpointer], int]) -> Callable[[Checkpointer], int]:
    """``resume``, recorded in the job's events when it runs in a tenter job: the timeline of
    a recovery shows when each rank loaded its checkpoint."""

    @functools.wraps(resume)
    def timed(self: Checkpointer) -> int:
        start = time.time()
        step = resume(self)
        _record(record_resume, self._rank, step, start)
        return step

    return timed


def _newest_intact(root: Path) -> atomic.Entry | None:
    """The checkpoint to resume from: the newest that is not damaged, saying why a newer
    one is skipped."""
    entry, skipped = atomic.newest_intact(root)
    for why in skipped:
        resumed = f"resuming from {entry.name}" if entry else "no intact checkpoint: starting over"
        log.warning("%s; %s instead", why, resumed)
    return entry


def _record(
    record: Callable[[str, int, str, int, float], None], rank: int, step: int, start: float
) -> None:
    """``record`` a save or a resume of ``step`` begun at ``start`` in the job's events (for
    the goodput ledger and the timeline of a recovery), in a tenter job."""
    job_dir = os.environ.get("TENTER_JOB_DIR")
    if job_dir:
        record(job_dir, rank, os.environ.get("TENTER_HOST", ""), step, start)


class Checkpointer:
    """Saves and restores a training run: model, optimizer, LR scheduler, data position,
    RNG states and ``extras``.

    Args:
        model: the module as trained: plain, DDP-wrapped, or sharded with ``fully_shard``;
            or a :class:`tenter.parallel.Pipeline` (or its ``module``), of which every rank
            saves and restores its own stages. Build the Checkpointer after wrapping it.
        optimizer: its optimizer, if any.
        scheduler: its LR scheduler, if any.
        sampler: the data position: a :class:`ResumableSampler`, a ``DataLoader`` to put one
            in (:func:`track`), or any ``state_dict()``/``load_state_dict()``. Per rank.
        extras: a dict you keep: values with ``state_dict()``/``load_state_dict()`` (an EMA
            model, a grad scaler) are saved through them; other values (numbers, tensors,
            lists) as they are, and ``resume()`` puts the saved values back into the dict.
            Saved from rank 0.
        dir: where checkpoints go (see :func:`default_dir`). Checked at construction: every
            rank must be able to write there.
        every: :meth:`maybe_save` saves when the step is a multiple of this. By default
            ``$TENTER_CHECKPOINT_EVERY`` (the job spec's ``checkpoint.every``), else none:
            only :meth:`save` saves.
        keep: how many complete checkpoints to keep, newest first. By default
            ``$TENTER_CHECKPOINT_KEEP`` (the job spec's ``checkpoint.keep``), else 3.
        async_save: write in a background thread while training goes on; the next save,
            :meth:`wait` and :meth:`close` wait for it.
        sharded: force sharded (True) or replicated (False) saving; by default, sharded
            exactly when the model's parameters are (a pipeline's always are).
        max_failed_saves: how many saves in a row may fail for lack of space (``ENOSPC``,
            ``EDQUOT``, on any rank) and be skipped while training goes on; the next one
            that fails raises :class:`CheckpointError` on every rank. 0: the first does.
    """

    def __init__(
        self,
        model: nn.Module | Pipeline,
        optimizer: Optimizer | None = None,
        scheduler: LRScheduler | None = None,
        *,
        sampler: Stateful | DataLoader[Any] | None = None,
        extras: dict[str, Any] | None = None,
        dir: str | os.PathLike[str] | None = None,
        every: int | None = None,
        keep: int | None = None,
        async_save: bool = False,
        sharded: bool | None = None,
        max_failed_saves: int = MAX_FAILED_SAVES,
    ) -> None:
        every, keep = interval(every, keep)
        model = _trained_model(model, sharded)
        self.model = model
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.sampler = _data_position(sampler)
        self.extras = extras if extras is not None else {}
        self.dir = Path(dir) if dir is not None else default_dir()
        self.every = every
        self.keep = keep
        self.sharded = is_sharded(model) if sharded is None else sharded
        self._ranks = Ranks()
        self._rank = self._ranks.rank
        self._state = ModelState(model, optimizer, self.sharded)
        self._last_step: int | None = None
        failures = FailedSaves(self.dir, self._ranks, max_failed_saves)
        self._commits = Commits(self.dir, keep, self._ranks, self._state, failures, async_save)
        self._preemption = Preemption()
        self.preempted = False
        """A preemption's final checkpoint is saved: end the training loop (on every rank)."""
        check_dir(self.dir, self._ranks)

    @_recorded
    def resume(self) -> int:
        """Restore the latest complete checkpoint, if any, and return its step (0 if none):
        the number of steps already done, where the training loop continues."""
        self.wait()
        latest = self._ranks.broadcast(_newest_intact(self.dir) if self._rank == 0 else None)
        if latest is None:
            return 0
        if latest.sharded != self.sharded:
            saved, now = ("sharded", "replicated") if latest.sharded else ("replicated", "sharded")
            raise CheckpointError(
                f"checkpoint {self.dir / latest.name} was saved {saved} but this model is "
                f"{now}; pass Checkpointer(sharded={latest.sharded}) or start a new directory"
            )
        path = self.dir / latest.name
        # The job's own files, written by this code: as trusted as the script itself.
        common = torch.load(path / STATE_FILE, map_location="cpu", weights_only=False)
        if self.sharded:
            self._state.load_sharded(path, self._ranks)
        else:
            self._state.load_replicated(path, common)
        restore_common(common, self.scheduler, self.extras)
        own = read_own(path, self._rank, latest.world_size)
        if self.sampler is not None and own["sampler"] is not None:
            self.sampler.load_state_dict(own["sampler"])
        # Last, so that nothing above draws from the restored generators.
        set_rng_state(own["rng"])
        self._last_step = latest.step
        self._state.check_replicas(latest.step)
        steps.resumed_at(latest.step)
        return latest.step

    def maybe_save(self, step: int) -> bool:
        """Save when ``step`` is a multiple of ``every``, or now if the job is being preempted
        (agreed by all ranks in one small all-reduce; the save is then complete on return and
        :attr:`preempted` True); return whether it saved (False for a save skipped for lack
        of space: see :meth:`save`).

        Called again after the preemption's final checkpoint (the loop did not stop on
        :attr:`preempted`), it ends the rank: it raises :class:`Preempted` (exit status 75)
        rather than save again and run out the grace period."""
        if self.every is None:
            raise ValueError(
                "maybe_save() needs the interval: pass Checkpointer(..., every=N) or set the "
                "job spec's checkpoint.every"
            )
        if self.preempted:
            if self._rank == 0:
                log.warning(
                    "the job was preempted and its final checkpoint saved at step %s: "
                    "maybe_save(%s) stops the rank (end the loop on ckpt.preempted)",
                    self._last_step,
                    step,
                )
            self.close()
            raise Preempted(step)
        if self._preemption.agreed():
            path = self.save(step)
            self.wait()
            saved = path is not None and self._last_step == step
            self._preemption.record(step, str(path) if saved else None)
            self.preempted = True
            return True
        if step % self.every:
            return False
        return self.save(step) is not None

    def save(self, step: int) -> Path | None:
        """Save everything as the checkpoint of ``step``, the number of steps done.

        Returns the checkpoint's folder; it is complete on return, or (with ``async_save``)
        once :meth:`wait` returns. Saving the step last saved or resumed does nothing.

        A save that fails for lack of space (on any rank) is abandoned on every rank, its
        files removed, and returns None (with ``async_save``, :meth:`wait` abandons it):
        the previous checkpoint stays the latest and training goes on, up to
        ``max_failed_saves`` such saves in a row. Any other failure raises
        :class:`CheckpointError` on every rank.
        """
        start = time.time()  # waiting for the previous asynchronous save blocks too
        self.wait()
        name = atomic.checkpoint_name(step)
        if step == self._last_step:
            return self.dir / name
        self._state.check_replicas(step)  # a divergent replica is never saved
        tmp = self.dir / f"{atomic.TMP_PREFIX}{name}"
        error = attempt(lambda: self._write_own(tmp))
        if not self._commits.commit(step, tmp, error, lambda: self._common(step)):
            return None
        self._last_step = step
        _record(record_checkpoint, self._rank, step, start)  # the time training stood still
        return self.dir / name

    def _write_own(self, tmp: Path) -> None:
        """This rank's own file: its RNG states and data position."""
        tmp.mkdir(exist_ok=True)
        atomic.save_durable(own_state(self.sampler), tmp / rank_file(self._rank))

    def _common(self, step: int) -> dict[str, Any]:
        """What rank 0 writes: the step, scheduler, extras (and replicated, the model's)."""
        common = common_state(step, self.scheduler, self.extras)
        if not self.sharded:
            common.update(self._state.state_dicts())
        return common

    def wait(self) -> None:
        """Block until the last asynchronous save is complete and in the manifest; raise
        :class:`CheckpointError` on every rank if it failed on any (abandon it if it failed
        for lack of space: see :meth:`save`)."""
        if not self._commits.wait():
            self._last_step = None  # not saved: a save of that step is no longer a no-op

    def close(self) -> None:
        """Finish the last asynchronous save and release the background thread."""
        try:
            self.wait()
        finally:
            self._preemption.close()
            self._commits.close()


def check_dir(folder: Path, ranks: Ranks) -> None:
    """Fail before training, on every rank, when some rank cannot write to ``folder``; and
    clear what crashed saves of an earlier run left there."""
    message = None
    try:
        atomic.check_writable(folder)
        if ranks.rank == 0:
            atomic.remove_stale(folder)
    except (CheckpointError, OSError) as e:
        message = str(e)
    failed = ranks.failures(message)
    if failed:
        first = next(iter(failed.values()))
        which = ", ".join(str(r) for r in failed)
        where = f" (on rank{'s' if len(failed) > 1 else ''} {which})"
        raise CheckpointError(f"{first}{where if ranks.world > 1 else ''}")


def _data_position(sampler: Stateful | DataLoader[Any] | None) -> Stateful | None:
    """What saves and restores the data position, from the Checkpointer's ``sampler``."""
    if isinstance(sampler, DataLoader):
        return track(sampler)
    if isinstance(sampler, Sampler) and not isinstance(sampler, Stateful):
        raise ValueError(
            f"Checkpointer(sampler=...): a {type(sampler).__name__} keeps no position; pass "
            "the DataLoader that uses it (sampler=loader), or wrap it: ResumableSampler(sampler)"
        )
    return sampler


def _trained_model(model: nn.Module | Pipeline, sharded: bool | None) -> nn.Module:
    """The module whose state is saved: a pipeline's stages on this rank."""
    if isinstance(model, Pipeline):
        model = model.module
    if sharded is False and is_pipelined(model):
        raise ValueError(
            "sharded=False would save rank 0's pipeline stages only: every rank holds "
            "its own stages, and saves them sharded; leave sharded unset"
        )
    return model
