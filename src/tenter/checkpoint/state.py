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
from torch.utils.data import Sampler

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

    The wrapped sampler must give the same order for the same epoch (``DistributedSampler``
    draws it from ``seed + epoch``). The count is exact with ``num_workers=0``; worker
    processes fetch batches ahead of training, so with them checkpoint a loader that tracks
    its own position instead (torchdata's ``StatefulDataLoader``, as a Checkpointer extra).
    """

    def __init__(self, sampler: Sampler[int]) -> None:
        self.sampler = sampler
        self.epoch: int = getattr(sampler, "epoch", 0)
        self.index = 0
        """Indices handed out so far in this epoch (on this rank)."""
        self._start = 0

    def set_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:
            self._start = 0
        self.epoch = epoch
        set_inner = getattr(self.sampler, "set_epoch", None)
        if set_inner is not None:
            set_inner(epoch)

    def __iter__(self) -> Iterator[int]:
        start, self._start = self._start, 0
        self.index = start
        for i in itertools.islice(iter(self.sampler), start, None):
            self.index += 1
            yield i

    def __len__(self) -> int:
        return len(self.sampler) - self._start  # type: ignore[arg-type]

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "index": self.index, "num_replicas": _replicas(self.sampler)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.set_epoch(state_dict["epoch"])
        # A world of another size splits the data differently: what the old world consumed,
        # index x old replicas samples, is this many of this rank's share.
        self._start = state_dict["index"] * state_dict["num_replicas"] // _replicas(self.sampler)
        self.index = self._start


def _replicas(sampler: Sampler[int]) -> int:
    replicas: int = getattr(sampler, "num_replicas", 1)
    return replicas
