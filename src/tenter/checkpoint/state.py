"""The state beyond model and optimizer: RNGs, the data position, CPU snapshots.

RNG states are per rank (dropout masks differ between ranks), so every rank saves its own.
The data position comes from :class:`ResumableSampler`, which remembers how far into the
epoch the loader got, so that a job resumed mid-epoch sees exactly the batches it would
have seen without the interruption.
"""

from __future__ import annotations

import copy
import itertools
import random
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler, Sampler

from tenter.data import order

try:
    import numpy
except ImportError:  # numpy is optional for torch, and so for tenter
    numpy = None  # type: ignore[assignment]


def rng_state() -> dict[str, Any]:
    """The state of every RNG a training script may draw from: Python's, numpy's (when
    installed), torch's CPU generator and, when CUDA is present, this rank's GPU's."""
    state: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if numpy is not None:
        state["numpy"] = numpy.random.get_state()
    # Only the current device (tenter.init() sets it from the local rank): reading every
    # device's would create a CUDA context on every GPU, from every rank.
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`rng_state` returned; the next random numbers are the ones that
    followed it."""
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    if numpy is not None and "numpy" in state:
        numpy.random.set_state(state["numpy"])
    if torch.cuda.is_available() and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"])


def snapshot(obj: Any) -> Any:
    """A copy of a state dict that training can no longer change: tensors copied to the CPU,
    everything else deep-copied. What an asynchronous save writes while training goes on."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=True)
    if type(obj) is dict:
        return {k: snapshot(v) for k, v in obj.items()}
    if type(obj) in (list, tuple):
        return type(obj)(snapshot(v) for v in obj)
    return copy.deepcopy(obj)


class ResumableSampler(Sampler[int]):
    """Wraps a sampler (typically ``tenter.sampler(dataset)``, a ``DistributedSampler``) and
    counts the indices it hands out, so that a checkpoint records the epoch and the position
    within it and a resumed job skips the samples already trained on::

        sampler = ResumableSampler(tenter.sampler(train, seed=0))
        loader = DataLoader(train, batch_size=32, sampler=sampler)
        ckpt = Checkpointer(model, optimizer, sampler=sampler)
        step = ckpt.resume()
        for epoch in range(sampler.epoch, epochs):
            sampler.set_epoch(epoch)      # keeps the restored position for the resumed epoch
            for x, y in loader: ...

    Over a ``DistributedSampler`` the position is *global*: the samples the whole world has
    consumed in the epoch's permutation (:mod:`tenter.data.order`). A job resumed at another
    world size deals the rest of that permutation to its ranks, so that every sample of the
    epoch is trained on exactly once; a job that keeps its global batch size keeps the
    uninterrupted run's global batches. Any other sampler is resumed per rank: it must give
    the same order for the same epoch, and at another world size the position is scaled.
    The count is exact with ``num_workers=0``; worker processes fetch batches ahead of
    training, so with them checkpoint a loader that tracks its own position instead
    (torchdata's ``StatefulDataLoader``, as a Checkpointer extra).
    """

    def __init__(self, sampler: Sampler[int]) -> None:
        self.sampler = sampler
        self._epoch: int = getattr(sampler, "epoch", 0)
        self.index = 0
        """Indices this rank handed out since the epoch's iteration began (or resumed)."""
        self._start = 0
        """Where this epoch's iteration began: the global position, else this rank's."""
        self._done = False
        self._resume: tuple[int, int] | None = None
        """(epoch, position) restored by :meth:`load_state_dict`, for that epoch's iteration."""

    @property
    def epoch(self) -> int:
        """The epoch, as the wrapped sampler has it (``set_epoch`` on either sets both)."""
        epoch: int = getattr(self.sampler, "epoch", self._epoch)
        return epoch

    @property
    def position(self) -> int:
        """The samples all ranks together consumed in this epoch (over a ``DistributedSampler``,
        its dataset's size once the epoch is done)."""
        if not isinstance(self.sampler, DistributedSampler):
            return (self._start + self.index) * _replicas(self.sampler)
        size = len(self.sampler.dataset)  # type: ignore[arg-type]
        if self._done:
            return size
        return order.position_after(size, self._start, self.sampler.num_replicas, self.index)

    def set_epoch(self, epoch: int) -> None:
        self._epoch = epoch
        set_inner = getattr(self.sampler, "set_epoch", None)
        if set_inner is not None:
            set_inner(epoch)

    def _begin(self) -> int:
        """Where the iteration of the current epoch starts: the restored position if it was
        saved in this epoch, else its beginning."""
        resume = self._resume
        return resume[1] if resume is not None and resume[0] == self.epoch else 0

    def __iter__(self) -> Iterator[int]:
        start = self._begin()
        self._resume = None
        self._start, self.index, self._done = start, 0, False
        for i in self._indices(start):
            self.index += 1
            yield i
        self._done = True

    def _indices(self, start: int) -> Iterator[int]:
        inner = self.sampler
        if not isinstance(inner, DistributedSampler):
            return itertools.islice(iter(inner), start, None)
        dealt = order.share(
            global_order(inner), start, inner.num_replicas, inner.rank, inner.drop_last
        )
        return iter(dealt)

    def __len__(self) -> int:
        inner = self.sampler
        if not isinstance(inner, DistributedSampler):
            return len(inner) - self._begin()  # type: ignore[arg-type]
        size = len(inner.dataset)  # type: ignore[arg-type]
        return order.share_length(size, self._begin(), inner.num_replicas, inner.drop_last)

    def state_dict(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "position": self.position,
            "num_replicas": _replicas(self.sampler),
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.set_epoch(state_dict["epoch"])
        # A checkpoint saved before positions were global has this rank's count only: the
        # world's is that many times the old world's size, as ranks move in step.
        saved = state_dict.get("position", state_dict.get("index", 0) * state_dict["num_replicas"])
        if not isinstance(self.sampler, DistributedSampler):
            saved //= _replicas(self.sampler)  # this rank's share of what the world consumed
        self._resume = (state_dict["epoch"], saved)
        self._start, self.index, self._done = saved, 0, False


def global_order(sampler: DistributedSampler[Any]) -> list[int]:
    """The epoch's permutation that ``sampler`` deals from, as its own code draws it: the
    same sampler for a world of one (which neither pads nor drops)."""
    whole: DistributedSampler[Any] = DistributedSampler(
        sampler.dataset, num_replicas=1, rank=0, shuffle=sampler.shuffle, seed=sampler.seed
    )
    whole.set_epoch(sampler.epoch)
    return list(whole)


def track(loader: DataLoader[Any]) -> ResumableSampler:
    """The :class:`ResumableSampler` of ``loader``: its own if it has one, else one put around
    its ``DistributedSampler`` in its batch sampler, so that a script that built
    ``DataLoader(data, batch_size=B, sampler=DistributedSampler(data))`` resumes from the
    global position (``Checkpointer(..., sampler=loader)``). The ``DistributedSampler``
    stays the loader's ``sampler``: its ``set_epoch`` goes on working."""
    inner = loader.sampler
    if isinstance(inner, ResumableSampler):
        return inner
    batches = loader.batch_sampler
    if not (isinstance(batches, BatchSampler) and isinstance(inner, Sampler)) or (
        batches.sampler is not inner
    ):
        raise ValueError(
            "Checkpointer(sampler=loader): the loader draws its indices from neither a "
            "ResumableSampler nor a batch_size and a sampler of its own; build it with "
            "DataLoader(data, batch_size=B, sampler=ResumableSampler(sampler))"
        )
    tracked = ResumableSampler(inner)
    batches.sampler = tracked
    return tracked


def _replicas(sampler: Sampler[int]) -> int:
    replicas: int = getattr(sampler, "num_replicas", 1)
    return replicas
