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

import logging
import os
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.metadata import TensorStorageMetadata
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_model_state_dict,
    set_state_dict,
)
from torch.distributed.checkpoint.stateful import Stateful
from torch.distributed.fsdp import FullyShardedDataParallel
from torch.distributed.tensor import DTensor
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler

from tenter.checkpoint import atomic
from tenter.checkpoint.errors import CheckpointError, check_model_fits
from tenter.checkpoint.state import rng_state, set_rng_state, snapshot
from tenter.checkpoint.writer import AsyncWriter
from tenter.goodput.records import record_checkpoint
from tenter.jobdir.layout import CHECKPOINTS_DIR
from tenter.parallel.pipeline import LocalStages, Pipeline, StageModule
from tenter.runtime import steps
from tenter.runtime.preemption import Preempted, Preemption

log = logging.getLogger(__name__)
T = TypeVar("T")

STATE_FILE = "state.pt"
"""Written by rank 0: step, scheduler, extras, and (replicated) model and optimizer."""
SHARDED_DIR = "sharded"
"""DCP's files: every rank's shard of the model and optimizer, plus DCP's metadata."""


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


def _rank_file(rank: int) -> str:
    return f"rank-{rank}.pt"


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


class Checkpointer:
    """Saves and restores a training run: model, optimizer, LR scheduler, data position,
    RNG states and ``extras``.

    Args:
        model: the module as trained: plain, DDP-wrapped, or sharded with ``fully_shard``;
            or a :class:`tenter.parallel.Pipeline` (or its ``module``), of which every rank
            saves and restores its own stages. Build the Checkpointer after wrapping it.
        optimizer: its optimizer, if any.
        scheduler: its LR scheduler, if any.
        sampler: this rank's data position: a :class:`ResumableSampler`, or any object with
            ``state_dict()``/``load_state_dict()``. Saved per rank.
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
    """

    def __init__(
        self,
        model: nn.Module | Pipeline,
        optimizer: Optimizer | None = None,
        scheduler: LRScheduler | None = None,
        *,
        sampler: Stateful | None = None,
        extras: dict[str, Any] | None = None,
        dir: str | os.PathLike[str] | None = None,
        every: int | None = None,
        keep: int | None = None,
        async_save: bool = False,
        sharded: bool | None = None,
    ) -> None:
        every = every if every is not None else _env_default("every")
        keep = keep if keep is not None else (_env_default("keep") or 3)
        if every is not None and every < 1:
            raise ValueError(f"every={every}: the save interval must be at least 1 step")
        if keep < 1:
            raise ValueError(f"keep={keep}: at least the latest checkpoint must be kept")
        if isinstance(model, Pipeline):
            model = model.module
        if sharded is False and is_pipelined(model):
            raise ValueError(
                "sharded=False would save rank 0's pipeline stages only: every rank holds "
                "its own stages, and saves them sharded; leave sharded unset"
            )
        self.model = model
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.sampler = sampler
        self.extras = extras if extras is not None else {}
        self.dir = Path(dir) if dir is not None else default_dir()
        self.every = every
        self.keep = keep
        self.sharded = is_sharded(model) if sharded is None else sharded
        self._distributed = dist.is_available() and dist.is_initialized()
        self._rank = dist.get_rank() if self._distributed else 0
        self._world = dist.get_world_size() if self._distributed else 1
        self._last_step: int | None = None
        self._writer = AsyncWriter() if async_save else None
        self._pending_step: int | None = None
        # DCP's background save runs collectives while the main thread runs its own (the
        # barriers here, the training's); on one process group they could interleave in a
        # different order on different ranks, so the background gets a group of its own.
        self._async_group = (
            dist.new_group(backend="gloo")
            if async_save and self.sharded and self._distributed
            else None
        )
        self._preemption = Preemption()
        self.preempted = False
        """A preemption's final checkpoint is saved: end the training loop (on every rank)."""
        self._check_dir()

    # -- the public API -------------------------------------------------------------------

    def resume(self) -> int:
        """Restore the latest complete checkpoint, if any, and return its step (0 if none):
        the number of steps already done, where the training loop continues."""
        self.wait()
        latest = self._broadcast(atomic.read_manifest(self.dir).latest if self._rank == 0 else None)
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
            self._load_sharded(path)
        else:
            self._load_replicated(path, common)
        if self.scheduler is not None:
            self.scheduler.load_state_dict(common["scheduler"])
        for key, value in common["extras"].items():
            current = self.extras.get(key)
            if isinstance(current, Stateful):
                current.load_state_dict(value)
            else:
                self.extras[key] = value
        own = self._own_rank_file(path, latest.world_size)
        if self.sampler is not None and own["sampler"] is not None:
            self.sampler.load_state_dict(own["sampler"])
        # Last, so that nothing above draws from the restored generators.
        set_rng_state(own["rng"])
        self._last_step = latest.step
        steps.resumed_at(latest.step)
        return latest.step

    def maybe_save(self, step: int) -> bool:
        """Save when ``step`` is a multiple of ``every``, or now if the job is being preempted
        (agreed by all ranks in one small all-reduce; the save is then complete on return and
        :attr:`preempted` True); return whether it saved.

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
            self._preemption.record(step, str(path))
            self.preempted = True
            return True
        if step % self.every:
            return False
        self.save(step)
        return True

    def save(self, step: int) -> Path:
        """Save everything as the checkpoint of ``step``, the number of steps done.

        Returns the checkpoint's folder; it is complete on return, or (with ``async_save``)
        once :meth:`wait` returns. Saving the step last saved or resumed does nothing.
        """
        start = time.time()  # waiting for the previous asynchronous save blocks too
        self.wait()
        name = atomic.checkpoint_name(step)
        if step == self._last_step:
            return self.dir / name
        tmp = self.dir / f"{atomic.TMP_PREFIX}{name}"
        tmp.mkdir(exist_ok=True)
        atomic.save_durable(self._own_state(), tmp / _rank_file(self._rank))
        common = self._common_state(step)
        dcp_future = self._save_sharded(tmp / SHARDED_DIR) if self.sharded else None
        if not self.sharded and self._rank == 0:
            common.update(self._state_dicts())
        entry = atomic.Entry(name, step, self._world, self.sharded)
        if self._writer is None:
            if self._rank == 0:
                atomic.save_durable(common, tmp / STATE_FILE)
            self._barrier()  # every rank's files are durable in tmp
            if self._rank == 0:
                atomic.commit(self.dir, tmp, entry, self.keep)
            self._barrier()
        else:
            if self._rank == 0:
                common = snapshot(common)
            self._barrier()  # every rank's own file is durable in tmp

            def finish() -> None:
                if dcp_future is not None:
                    dcp_future.result()
                if self._rank == 0:
                    atomic.save_durable(common, tmp / STATE_FILE)
                    atomic.commit(self.dir, tmp, entry, self.keep)

            self._writer.submit(finish)
            self._pending_step = step
        self._last_step = step
        job_dir = os.environ.get("TENTER_JOB_DIR")
        if job_dir:  # for the goodput ledger: the time training stood still for it
            host = os.environ.get("TENTER_HOST", "")
            record_checkpoint(job_dir, self._rank, host, step, start)
        return self.dir / name

    def wait(self) -> None:
        """Block until the last asynchronous save is complete and in the manifest; raise
        :class:`CheckpointError` on every rank if it failed on any."""
        if self._writer is None:
            return
        error: BaseException | None = None
        try:
            self._writer.wait()
        except Exception as e:
            error = e
        failures = self._gather(None if error is None else f"{type(error).__name__}: {error}")
        failed = {rank: msg for rank, msg in enumerate(failures) if msg is not None}
        step, self._pending_step = self._pending_step, None
        if failed:
            detail = "; ".join(f"rank {rank}: {msg}" for rank, msg in failed.items())
            message = f"the asynchronous save of step {step} failed: {detail}"
            raise CheckpointError(message) from error

    def close(self) -> None:
        """Finish the last asynchronous save and release the background thread."""
        try:
            self.wait()
        finally:
            self._preemption.close()
            if self._writer is not None:
                self._writer.close()
            if self._async_group is not None:
                dist.destroy_process_group(self._async_group)
                self._async_group = None

    # -- saving and loading ---------------------------------------------------------------

    def _own_state(self) -> dict[str, Any]:
        """What every rank saves for itself: its RNG states and data position."""
        return {
            "rng": rng_state(),
            "sampler": self.sampler.state_dict() if self.sampler is not None else None,
        }

    def _common_state(self, step: int) -> dict[str, Any]:
        """What rank 0 saves for all: the step, the scheduler, the extras."""
        return {
            "step": step,
            "scheduler": self.scheduler.state_dict() if self.scheduler is not None else None,
            "extras": {
                k: v.state_dict() if isinstance(v, Stateful) else v for k, v in self.extras.items()
            },
        }

    def _save_sharded(self, folder: Path) -> Future[Any] | None:
        """Every rank writes its shard of model and optimizer through DCP; asynchronously,
        the returned future completes on rank 0 once every rank's shard and DCP's metadata
        are written."""
        state = self._state_dicts()
        writer = dcp.FileSystemWriter(folder)
        if self._writer is None:
            # Without a process group DCP saves (and loads) as one process by itself; its
            # explicit `no_dist=` argument only exists from torch 2.7.
            dcp.save(state, storage_writer=writer)
            return None
        # Returns once the state is staged (copied to CPU); writes in DCP's own thread.
        future = dcp.async_save(state, storage_writer=writer, process_group=self._async_group)
        assert isinstance(future, Future), "DCP's default stager stages synchronously"
        return future

    def _state_dicts(self) -> dict[str, Any]:
        """``{"model": ..., "optimizer": ...}`` keyed by parameter names (DDP's ``module.``
        prefix removed), so that they load into the model however it is wrapped."""
        if self.optimizer is None:
            return {"model": get_model_state_dict(self.model, options=self._options())}
        model_state, optim_state = get_state_dict(
            self.model, self.optimizer, options=self._options()
        )
        return {"model": model_state, "optimizer": optim_state}

    def _set_state_dicts(self, state: dict[str, Any]) -> None:
        if self.optimizer is None:
            set_model_state_dict(self.model, state["model"], options=self._options())
        else:
            set_state_dict(
                self.model,
                self.optimizer,
                model_state_dict=state["model"],
                optim_state_dict=state["optimizer"],
                options=self._options(),
            )

    def _options(self) -> StateDictOptions:
        # Sharded, the optimizer's state and param groups are keyed per parameter name too:
        # pipeline ranks hold different parameters, and their param groups (lists of names)
        # would otherwise collide under one key in DCP, and not load into another layout.
        return StateDictOptions(flatten_optimizer_state_dict=self.sharded)

    def _load_replicated(self, path: Path, common: dict[str, Any]) -> None:
        check_model_fits(path, _shapes(common["model"]), _shapes(get_model_state_dict(self.model)))
        self._set_state_dicts(common)

    def _load_sharded(self, path: Path) -> None:
        reader = dcp.FileSystemReader(path / SHARDED_DIR)
        prefix = "model."
        saved = {
            key.removeprefix(prefix): tuple(meta.size)
            for key, meta in reader.read_metadata().state_dict_metadata.items()
            if key.startswith(prefix) and isinstance(meta, TensorStorageMetadata)
        }
        state = self._state_dicts()
        # DTensor shapes are global, as are DCP's: a world of another size compares equal.
        # Pipeline ranks hold different parameters: the model is what all ranks hold.
        model: dict[str, tuple[int, ...]] = {}
        for shapes in self._gather(_shapes(state["model"])):
            model.update(shapes)
        check_model_fits(path, saved, model)
        dcp.load(state, storage_reader=reader)
        self._set_state_dicts(state)

    # -- ranks ----------------------------------------------------------------------------

    def _own_rank_file(self, path: Path, saved_world: int) -> dict[str, Any]:
        """This rank's RNG states and data position; rank 0's when this rank did not exist
        when the checkpoint was saved (the world grew)."""
        own = path / _rank_file(self._rank)
        if not own.exists():
            log.warning(
                "checkpoint %s was saved by %d ranks: rank %d restores rank 0's RNG states "
                "and data position",
                path,
                saved_world,
                self._rank,
            )
            own = path / _rank_file(0)
        state: dict[str, Any] = torch.load(own, weights_only=False)
        return state

    def _check_dir(self) -> None:
        """Fail before training, on every rank, when some rank cannot write to ``dir``; and
        clear what crashed saves of an earlier run left there."""
        message = None
        try:
            atomic.check_writable(self.dir)
            if self._rank == 0:
                atomic.remove_stale(self.dir)
        except (CheckpointError, OSError) as e:
            message = str(e)
        failures = self._gather(message)
        failed = [rank for rank, msg in enumerate(failures) if msg is not None]
        if failed:
            first = failures[failed[0]]
            ranks = ", ".join(str(r) for r in failed)
            where = f" (on rank{'s' if len(failed) > 1 else ''} {ranks})"
            raise CheckpointError(f"{first}{where if self._world > 1 else ''}")

    def _barrier(self) -> None:
        if self._distributed:
            dist.barrier()

    def _gather(self, value: T) -> list[T]:
        if not self._distributed:
            return [value]
        values: list[Any] = [None] * self._world
        dist.all_gather_object(values, value)
        return values

    def _broadcast(self, entry: atomic.Entry | None) -> atomic.Entry | None:
        """Rank 0's choice, so that every rank loads the same checkpoint."""
        if not self._distributed:
            return entry
        box = [entry]
        dist.broadcast_object_list(box, src=0)
        return box[0]


def _shapes(state: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    return {k: tuple(v.shape) for k, v in state.items() if isinstance(v, torch.Tensor)}
