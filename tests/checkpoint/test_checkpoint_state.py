"""The data position (ResumableSampler), CPU snapshots, and the manifest's failure modes."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.utils.data import DistributedSampler

from tenter.checkpoint import CheckpointError, ResumableSampler
from tenter.checkpoint.atomic import read_manifest
from tenter.checkpoint.state import snapshot

DATA = list(range(20))


def sampler(replicas: int = 1, rank: int = 0) -> ResumableSampler:
    return ResumableSampler(DistributedSampler(DATA, num_replicas=replicas, rank=rank, seed=5))


def epoch_order(epoch: int) -> list[int]:
    inner = DistributedSampler(DATA, num_replicas=1, rank=0, seed=5)
    inner.set_epoch(epoch)
    return list(inner)


def test_sampler_resumed_mid_epoch_yields_the_rest_of_that_epoch_in_order() -> None:
    original = sampler()
    original.set_epoch(3)
    epoch = iter(original)
    seen = [next(epoch) for _ in range(7)]
    resumed = sampler()
    resumed.load_state_dict(original.state_dict())
    assert resumed.epoch == 3
    assert len(resumed) == 13
    resumed.set_epoch(3)  # what the training loop does; keeps the position
    assert seen + list(resumed) == epoch_order(3)
    resumed.set_epoch(4)  # the next epoch is whole
    assert list(resumed) == epoch_order(4)


def test_sampler_resumed_in_a_new_epoch_starts_it_from_the_beginning() -> None:
    original = sampler()
    original.set_epoch(1)
    epoch = iter(original)
    next(epoch)
    resumed = sampler()
    resumed.load_state_dict(original.state_dict())
    resumed.set_epoch(2)
    assert list(resumed) == epoch_order(2)


def test_sampler_resumed_by_a_smaller_world_takes_the_rest_of_the_global_order() -> None:
    ranks = [sampler(replicas=2, rank=r) for r in range(2)]
    for s in ranks:
        epoch = iter(s)
        for _ in range(4):
            next(epoch)
    alone = sampler()
    alone.load_state_dict(ranks[0].state_dict())
    # 2 ranks x 4 samples were consumed: the first 8 of the epoch's order.
    assert alone.state_dict()["position"] == 8
    assert list(alone) == epoch_order(0)[8:]


def test_snapshot_copies_tensors_so_that_later_updates_do_not_show() -> None:
    weight = torch.zeros(3)
    state = {"model": {"w": weight}, "steps": [weight, 1], "lr": 0.1}
    copied = snapshot(state)
    weight.add_(1.0)
    assert torch.equal(copied["model"]["w"], torch.zeros(3))
    assert torch.equal(copied["steps"][0], torch.zeros(3))
    assert copied["steps"][1] == 1 and copied["lr"] == 0.1


@pytest.mark.parametrize(
    ("content", "error"),
    [
        ("{", r"^cannot read the checkpoint manifest .*manifest\.json: "),
        (
            '{"format": 2, "latest": null, "checkpoints": []}',
            r"^the checkpoint manifest .*manifest\.json has format 2; this version of tenter "
            r"reads format 1$",
        ),
    ],
)
def test_read_manifest_names_the_file_if_it_is_unreadable(
    tmp_path: Path, content: str, error: str
) -> None:
    (tmp_path / "manifest.json").write_text(content)
    with pytest.raises(CheckpointError, match=error):
        read_manifest(tmp_path)
