"""The rest of a save once every rank wrote its own file: the model's state (sharded through
DCP, or rank 0's replicated copy), rank 0's shared state, and the commit into the manifest,
on every rank together, at once or in the background (``async_save``). Each point where the
ranks wait for one another also agrees on the outcome
(:class:`~tenter.checkpoint.failed_saves.FailedSaves`): a save that failed for lack of space
on any rank is abandoned on every rank."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch.distributed as dist

from tenter.checkpoint import atomic
from tenter.checkpoint.failed_saves import FailedSaves, attempt
from tenter.checkpoint.model_state import ModelState
from tenter.checkpoint.ranks import Ranks
from tenter.checkpoint.run_state import STATE_FILE
from tenter.checkpoint.state import snapshot
from tenter.checkpoint.writer import AsyncWriter

Common = Callable[[], dict[str, Any]]
"""What rank 0 writes beside the ranks' files (the step, scheduler, extras, and a replicated
model's state), asked for on rank 0 only."""


class Commits:
    def __init__(
        self,
        root: Path,
        keep: int,
        ranks: Ranks,
        state: ModelState,
        failures: FailedSaves,
        async_save: bool,
    ) -> None:
        self.root, self.keep, self.ranks = root, keep, ranks
        self.state, self.failures = state, failures
        self.writer = AsyncWriter() if async_save else None
        self.pending_step: int | None = None
        self.background_group = _background_group(async_save and state.sharded, ranks)

    def commit(self, step: int, tmp: Path, error: BaseException | None, common: Common) -> bool:
        """Finish the save of ``step`` whose ranks' own files are in ``tmp`` (``error``: this
        rank's, if its failed); whether it was saved, or (``async_save``) started."""
        if self.writer is None:
            return self._now(step, tmp, error, common)
        # Before the background starts writing: every rank's own file is durable in tmp.
        if not self.failures.agree(step, tmp, error):
            return False
        self._in_background(step, tmp, common, self.writer)
        return True

    def wait(self) -> bool:
        """Wait for the save in the background, if any; False if it was abandoned (raises
        :class:`~tenter.checkpoint.errors.CheckpointError` on every rank if it failed for
        another reason than a lack of space)."""
        if self.writer is None:
            return True
        step, self.pending_step = self.pending_step, None
        error = attempt(self.writer.wait)
        if step is None:  # nothing pending on any rank: saves are collective
            return True
        tmp = self.root / f"{atomic.TMP_PREFIX}{atomic.checkpoint_name(step)}"
        if not self.failures.agree(step, tmp, error):
            return False
        self.failures.saved()
        return True

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        if self.background_group is not None:
            dist.destroy_process_group(self.background_group)
            self.background_group = None

    def _entry(self, step: int) -> atomic.Entry:
        name = atomic.checkpoint_name(step)
        return atomic.Entry(name, step, self.ranks.world, self.state.sharded)

    def _now(self, step: int, tmp: Path, error: BaseException | None, common: Common) -> bool:
        if self.state.sharded:  # collective: every rank takes part, even one whose file failed
            shards_error = attempt(lambda: self.state.save_sharded(tmp, False, None))
            error = error or shards_error
        if self.ranks.rank == 0 and error is None:
            error = attempt(lambda: atomic.save_durable(common(), tmp / STATE_FILE))
        # Every rank's files are durable in tmp, or the save is abandoned on every rank.
        if not self.failures.agree(step, tmp, error):
            return False
        if self.ranks.rank == 0:
            error = attempt(lambda: atomic.commit(self.root, tmp, self._entry(step), self.keep))
        if not self.failures.agree(step, tmp, error):
            return False
        self.failures.saved()
        return True

    def _in_background(self, step: int, tmp: Path, common: Common, writer: AsyncWriter) -> None:
        """Start writing the rest (the state as it is now) and committing it; :meth:`wait`
        waits for it."""
        sharded = self.state.sharded
        dcp_future = self.state.save_sharded(tmp, True, self.background_group) if sharded else None
        shared = snapshot(common()) if self.ranks.rank == 0 else None
        entry = self._entry(step)

        def finish() -> None:
            if dcp_future is not None:
                dcp_future.result()
            if shared is not None:
                atomic.save_durable(shared, tmp / STATE_FILE)
                atomic.commit(self.root, tmp, entry, self.keep)

        writer.submit(finish)
        self.pending_step = step


def _background_group(sharded_async: bool, ranks: Ranks) -> dist.ProcessGroup | None:
    """DCP's background save runs collectives while the main thread runs its own (the
    barriers here, the training's); on one process group they could interleave in a
    different order on different ranks, so the background gets a group of its own."""
    return dist.new_group(backend="gloo") if sharded_async and ranks.distributed else None
