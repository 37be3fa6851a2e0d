"""The model's and optimizer's state in a checkpoint, replicated (``torch.save`` by rank 0) or
sharded (every rank's part through ``torch.distributed.checkpoint``, DCP), keyed by the whole
model's parameter names so that it loads however the model is wrapped or laid out."""

from __future__ import annotations

from concurrent.futures import Future
from pathlib import Path
from typing import Any

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
from torch.optim import Optimizer

from tenter.checkpoint.errors import check_model_fits
from tenter.checkpoint.ranks import Ranks
from tenter.runtime.replicas import replicas_of

SHARDED_DIR = "sharded"
"""Sharded: DCP's files (every rank's shard, and the metadata)."""


class ModelState:
    """The state of ``model`` and ``optimizer``, saved and loaded ``sharded`` or not."""

    def __init__(self, model: nn.Module, optimizer: Optimizer | None, sharded: bool) -> None:
        self.model, self.optimizer, self.sharded = model, optimizer, sharded

    def check_replicas(self, step: int) -> None:
        """Compare the replicas (:mod:`tenter.runtime.replicas`), so that a divergent one is
        caught before a save and after a load."""
        check = replicas_of(self.model, self.sharded)
        if check is not None:
            check.check(step)

    def state_dicts(self) -> dict[str, Any]:
        """``{"model": ..., "optimizer": ...}`` keyed by parameter names (DDP's ``module.``
        prefix removed), so that they load into the model however it is wrapped."""
        if self.optimizer is None:
            return {"model": get_model_state_dict(self.model, options=self._options())}
        model_state, optim_state = get_state_dict(
            self.model, self.optimizer, options=self._options()
        )
        return {"model": model_state, "optimizer": optim_state}

    def set_state_dicts(self, state: dict[str, Any]) -> None:
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

    def save_sharded(
        self, folder: Path, background: bool, group: dist.ProcessGroup | None
    ) -> Future[Any] | None:
        """Every rank writes its shard of model and optimizer through DCP; in the
        ``background`` (on ``group``), the returned future completes on rank 0 once every
        rank's shard and DCP's metadata are written."""
        state = self.state_dicts()
        writer = dcp.FileSystemWriter(folder / SHARDED_DIR)
        if not background:
            # Without a process group DCP saves (and loads) as one process by itself; its
            # explicit `no_dist=` argument only exists from torch 2.7.
            dcp.save(state, storage_writer=writer)
            return None
        # Returns once the state is staged (copied to CPU); writes in DCP's own thread.
        future = dcp.async_save(state, storage_writer=writer, process_group=group)
        assert isinstance(future, Future), "DCP's default stager stages synchronously"
        return future

    def load_replicated(self, path: Path, common: dict[str, Any]) -> None:
        check_model_fits(path, shapes(common["model"]), shapes(get_model_state_dict(self.model)))
        self.set_state_dicts(common)

    def load_sharded(self, path: Path, ranks: Ranks) -> None:
        reader = dcp.FileSystemReader(path / SHARDED_DIR)
        prefix = "model."
        saved = {
            key.removeprefix(prefix): tuple(meta.size)
            for key, meta in reader.read_metadata().state_dict_metadata.items()
            if key.startswith(prefix) and isinstance(meta, TensorStorageMetadata)
        }
        state = self.state_dicts()
        # DTensor shapes are global, as are DCP's: a world of another size compares equal.
        # Pipeline ranks hold different parameters: the model is what all ranks hold.
        model: dict[str, tuple[int, ...]] = {}
        for held in ranks.gather(shapes(state["model"])):
            model.update(held)
        check_model_fits(path, saved, model)
        dcp.load(state, storage_reader=reader)
        self.set_state_dicts(state)


def shapes(state: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    return {k: tuple(v.shape) for k, v in state.items() if isinstance(v, torch.Tensor)}
