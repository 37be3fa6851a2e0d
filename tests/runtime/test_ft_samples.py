"""tenter.runtime.ft.SampleDealer's arithmetic: replica groups that go down, come back and heal,
train alone or together, and steps that do not commit, over several epochs. The groups'
torchft Managers are stood in for by :class:`Quorum` (the four Manager methods the dealer
calls, set as torchft's quorum and commit set them); the real Manager's job is
tests/launch/test_torchft.py's."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DistributedSampler

from tenter.data import order
from tenter.runtime import ft

SEED = 3


@dataclass
class Quorum:
    """One replica group's view of torchft's Manager for the current step."""

    step: int = 0
    rank: int | None = None
    participants: int = 0
    load: Callable[[Any], None] = field(default=lambda state: None)
    save: Callable[[], Any] = field(default=dict)

    def current_step(self) -> int:
        return self.step

    def participating_rank(self) -> int | None:
        return self.rank

    def num_participants(self) -> int:
        return self.participants

    def register_state_dict_fn(self, key: str, load: Callable[[Any], None], save: Any) -> None:
        assert key == ft.STATE_KEY
        self.load, self.save = load, save


@dataclass
class Group:
    quorum: Quorum = field(default_factory=Quorum)
    dealer: ft.SampleDealer | None = None


def started(size: int, batch: int) -> Group:
    """A group's (re)started process: step 0, the epoch's beginning."""
    group = Group()
    group.dealer = ft.SampleDealer(group.quorum, size, batch, seed=SEED)
    return group


def train_step(groups: list[Group], up: list[int], commits: bool) -> list[int]:
    """One torchft step of the groups ``up``: those at the highest step take part (ranked by
    group), the others heal from the first of them (its state received at the quorum, applied
    at the commit); all commit or none. The committed step's global batch, in rank order."""
    top = max(groups[g].quorum.step for g in up)
    part = [g for g in up if groups[g].quorum.step == top]
    sent = groups[part[0]].quorum.save()
    dealt = {}
    for g in up:
        q = groups[g].quorum
        q.step, q.participants = top, len(part)  # a healing group jumps to its peers' step
        q.rank = part.index(g) if g in part else None
        dealt[g] = groups[g].dealer.indices()  # type: ignore[union-attr]
    for g in up:
        if g not in part:
            groups[g].quorum.load(sent)
        groups[g].quorum.step += commits
        groups[g].dealer.step()  # type: ignore[union-attr]
    return [i for g in part for i in dealt[g]] if commits else []


steps_strategy = st.lists(
    st.tuples(
        st.sets(st.integers(0, 2), min_size=1),  # the groups up
        st.booleans(),  # the step commits
        st.sets(st.integers(0, 2)),  # the groups whose process dies after it
    ),
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(size=st.integers(1, 40), batch=st.integers(1, 6), steps=steps_strategy)
def test_the_committed_steps_take_each_epochs_samples_once_in_its_global_order(
    size: int, batch: int, steps: list[tuple[set[int], bool, set[int]]]
) -> None:
    groups = [started(size, batch) for _ in range(3)]
    trained: list[int] = []
    for up, commits, killed in steps:
        # A group at the job's newest step takes part and lives on: otherwise the groups
        # would train on from an older state (torchft has none newer to heal from).
        newest = max(range(3), key=lambda g: groups[g].quorum.step)
        trained += train_step(groups, sorted(up | {newest}), commits)
        killed.discard(newest)
        for g in killed:
            groups[g] = started(size, batch)
    # Epoch after epoch, each epoch's permutation exactly, in order: nothing twice, no gap.
    epochs = -(-len(trained) // size)
    whole = [i for e in range(epochs) for i in ft.epoch_order(size, SEED, e)]
    assert trained == whole[: len(trained)]


def test_the_epochs_order_is_distributed_samplers() -> None:
    sampler = DistributedSampler(range(50), num_replicas=1, rank=0, seed=SEED)
    sampler.set_epoch(4)
    assert ft.epoch_order(50, SEED, 4) == list(sampler)
    assert ft.epoch_order(5, SEED, 4, shuffle=False) == [0, 1, 2, 3, 4]


def test_an_epochs_last_step_is_split_in_near_equal_chunks() -> None:
    assert order.step_length(10, 4, batch=4, participants=2) == 6
    assert [order.step_share(4, 6, 2, r) for r in (0, 1)] == [range(4, 7), range(7, 10)]
    assert order.step_share(0, 1, 2, 0) == range(0, 0)  # fewer samples than participants
    with pytest.raises(ValueError, match="participant 2 is not among 2"):
        order.step_share(0, 8, 2, 2)


def test_the_ranks_of_a_replica_group_split_its_share(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TENTER_JOB_DIR", raising=False)
    monkeypatch.setenv("WORLD_SIZE", "2")
    shares = []
    for rank in (0, 1):
        monkeypatch.setenv("RANK", str(rank))
        dealer = ft.SampleDealer(Quorum(rank=1, participants=2), 20, 4, seed=SEED)
        shares.append(dealer.indices())
    group_share = ft.epoch_order(20, SEED, 0)[4:8]  # the second participant's 4 samples
    assert shares == [group_share[0::2], group_share[1::2]]
