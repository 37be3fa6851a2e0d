"""The global sample order across a change of world size: the pure arithmetic
(tenter.data.order) and ResumableSampler walking real DistributedSamplers through resizes."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader, DistributedSampler

from tenter.checkpoint import Checkpointer, ResumableSampler
from tenter.data import order

SEED = 7


def whole_order(size: int, epoch: int) -> list[int]:
    whole = DistributedSampler(range(size), num_replicas=1, rank=0, seed=SEED)
    whole.set_epoch(epoch)
    return list(whole)


def world(size: int, replicas: int, drop_last: bool, epoch: int) -> list[ResumableSampler]:
    samplers = []
    for rank in range(replicas):
        inner = DistributedSampler(
            range(size), num_replicas=replicas, rank=rank, seed=SEED, drop_last=drop_last
        )
        samplers.append(ResumableSampler(inner))
        samplers[-1].set_epoch(epoch)
    return samplers


def walk(size: int, stages: list[tuple[int, int]], drop_last: bool) -> list[list[int]]:
    """One epoch through worlds of ``stages`` (replicas, steps of one index per rank; the last
    stage runs to the epoch's end), each resumed from the one before's checkpoint (rank 0's
    state, as a grown world's new ranks read): the global batches, step by step."""
    batches: list[list[int]] = []
    state = None
    for n, (replicas, steps) in enumerate(stages):
        ranks = world(size, replicas, drop_last, epoch=2)
        if state is not None:
            for s in ranks:
                s.load_state_dict(state)
                s.set_epoch(2)  # what the training loop does: keeps the restored position
        iters = [iter(s) for s in ranks]
        last = n == len(stages) - 1
        lengths = {len(s) for s in ranks}
        assert len(lengths) == 1  # ranks move in step: the same number of batches
        length = lengths.pop()
        for _ in range(length if last else min(steps, length)):
            batches.append([next(i) for i in iters])
        if last:
            for i in iters:
                assert next(i, None) is None
        state = ranks[0].state_dict()
    return batches


@settings(max_examples=60, deadline=None)
@given(
    size=st.integers(1, 40),
    replicas=st.integers(1, 6),
    drop_last=st.booleans(),
    start=st.integers(0, 45),
)
def test_share_from_the_start_is_what_distributed_sampler_deals(
    size: int, replicas: int, drop_last: bool, start: int
) -> None:
    epoch_order = whole_order(size, 3)
    for rank in range(replicas):
        inner = DistributedSampler(
            range(size), num_replicas=replicas, rank=rank, seed=SEED, drop_last=drop_last
        )
        inner.set_epoch(3)
        assert order.share(epoch_order, 0, replicas, rank, drop_last) == list(inner)
        dealt = order.share(epoch_order, start, replicas, rank, drop_last)
        assert len(dealt) == order.share_length(size, start, replicas, drop_last)


@settings(max_examples=80, deadline=None)
@given(
    size=st.integers(1, 40),
    stages=st.lists(st.tuples(st.integers(1, 5), st.integers(0, 6)), min_size=1, max_size=4),
    drop_last=st.booleans(),
)
def test_every_sample_once_through_any_resizes(
    size: int, stages: list[tuple[int, int]], drop_last: bool
) -> None:
    batches = walk(size, stages, drop_last)
    seen = [i for batch in batches for i in batch]
    epoch_order = whole_order(size, 2)
    widest = max(replicas for replicas, _ in stages)  # the tail is the last dealing world's
    counts = Counter(seen)
    if drop_last:  # only an uneven tail is left out: never a sample twice
        assert max(counts.values(), default=1) == 1
        assert size - len(seen) < widest
        assert seen == epoch_order[: len(seen)]  # and in the global order
    else:  # every sample; the last global batch padded with the epoch's first ones
        assert set(seen) == set(range(size))
        padding = len(seen) - size
        assert 0 <= padding < widest
        assert seen[:size] == epoch_order
        assert seen[size:] == (epoch_order * widest)[:padding]


def test_4_then_2_then_3_ranks_keep_the_uninterrupted_global_batches() -> None:
    """Global batch 12 throughout (4 x 3, 2 x 6, 3 x 4 indices per rank): the global
    batches, as sets, are those of the uninterrupted 4-rank run."""
    size = 72
    uninterrupted = walk(size, [(4, 0)], drop_last=False)
    # in indices per rank: 3 steps of 3, then 2 steps of 6, then the last step, of 4
    resized = walk(size, [(4, 9), (2, 12), (3, 0)], drop_last=False)
    flat = [i for batch in resized for i in batch]
    assert [i for batch in uninterrupted for i in batch] == flat
    global_batches = [sorted(flat[k : k + 12]) for k in range(0, size, 12)]
    expected = [sorted(whole_order(size, 2)[k : k + 12]) for k in range(0, size, 12)]
    assert global_batches == expected


def test_a_resumed_epoch_after_its_end_is_empty_and_the_next_one_whole() -> None:
    (one,) = world(10, 1, drop_last=True, epoch=2)
    assert len(list(one)) == 10
    state = one.state_dict()
    assert state["position"] == 10
    grown = world(10, 3, drop_last=True, epoch=0)
    for s in grown:
        s.load_state_dict(state)
        assert s.epoch == 2 and len(s) == 0 and list(s) == []
        s.set_epoch(3)
        assert len(list(s)) == 3


def test_checkpointer_tracks_a_dataloader_of_a_distributed_sampler(tmp_path: Path) -> None:
    inner = DistributedSampler(range(12), num_replicas=1, rank=0, seed=SEED)
    loader = DataLoader(range(12), batch_size=4, sampler=inner)
    model = torch.nn.Linear(1, 1)
    ckpt = Checkpointer(model, sampler=loader, dir=str(tmp_path))
    assert isinstance(ckpt.sampler, ResumableSampler) and loader.sampler is inner
    inner.set_epoch(1)  # the user's call, on their own sampler
    batches = iter(loader)
    first = next(batches).tolist()
    ckpt.save(1)
    resumed_inner = DistributedSampler(range(12), num_replicas=1, rank=0, seed=SEED)
    resumed_loader = DataLoader(range(12), batch_size=4, sampler=resumed_inner)
    resumed = Checkpointer(model, sampler=resumed_loader, dir=str(tmp_path))
    assert resumed.resume() == 1 and resumed_inner.epoch == 1
    rest = [i for batch in resumed_loader for i in batch.tolist()]
    assert first + rest == whole_order(12, 1)


def test_checkpointer_refuses_a_bare_distributed_sampler(tmp_path: Path) -> None:
    inner = DistributedSampler(range(12), num_replicas=1, rank=0)
    with pytest.raises(ValueError, match=r"DistributedSampler keeps no position; pass the Data"):
        Checkpointer(torch.nn.Linear(1, 1), sampler=inner, dir=str(tmp_path))  # type: ignore[arg-type]


def test_checkpointer_names_the_fix_for_a_loader_without_a_batch_size(tmp_path: Path) -> None:
    inner = DistributedSampler(range(12), num_replicas=1, rank=0)
    loader = DataLoader(range(12), batch_size=None, sampler=inner)
    with pytest.raises(ValueError, match=r"sampler=ResumableSampler\(sampler\)\)$"):
        Checkpointer(torch.nn.Linear(1, 1), sampler=loader, dir=str(tmp_path))
