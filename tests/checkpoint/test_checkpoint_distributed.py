"""Two real ranks over gloo: DDP saved from rank 0 and loaded on all, FSDP2 saved and loaded
shard by shard through torch.distributed.checkpoint, synchronously and asynchronously; both
on a disk that one rank fills.

One world runs every scenario (starting ranks is the slow part); the tests check its parts.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from ckpt_workers import save_and_resume

from tests.world import run_world

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, list[dict[str, Any]]]]:
    root = tmp_path_factory.mktemp("checkpoint-world")
    disk = root / "ckpt" / "disk"  # a tmpfs of 3 MiB
    disk.mkdir(parents=True)
    mount = ["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(disk)]
    subprocess.run(mount, check=True, timeout=60)
    try:
        world = run_world(save_and_resume, 2, args=(root / "ckpt", disk), workdir=root / "world")
        results = world.values()
        assert list((root / "world" / "tmp").iterdir()) == []  # the ranks left no temp files
        yield root / "ckpt", results
    finally:
        subprocess.run(["umount", str(disk)], check=True, timeout=60)


def assert_equal(actual: list[torch.Tensor], expected: list[torch.Tensor]) -> None:
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected, strict=True):
        assert torch.equal(a, e)


def test_ddp_checkpoint_is_written_by_rank_0_and_restores_every_rank(
    world: tuple[Path, list[dict[str, Any]]],
) -> None:
    root, results = world
    for rank, result in enumerate(results):
        r = result["ddp"]
        assert r["step"] == 3
        assert_equal(r["restored"], r["saved"])
        assert_equal(r["continued"], r["expected"])
        # Each rank's share is 24 samples, 6 batches of 4; 5 batches are done: 3 before
        # the checkpoint and 2 after the restore: 2 ranks x 20 samples of the epoch's order.
        assert r["sampler"] == {"epoch": 0, "position": 40, "num_replicas": 2}, rank
    folder = root / "ddp" / "sync" / "step-00000003"
    assert sorted(p.name for p in folder.iterdir()) == [
        "digests.json",
        "rank-0.pt",
        "rank-1.pt",
        "state.pt",
    ]


def test_async_ddp_checkpoint_equals_the_synchronous_one(
    world: tuple[Path, list[dict[str, Any]]],
) -> None:
    root, _ = world
    sync, background = (
        torch.load(root / "ddp" / d / "step-00000003" / "state.pt", weights_only=False)
        for d in ("sync", "async")
    )
    assert sync["model"].keys() == background["model"].keys()
    for key, value in sync["model"].items():
        assert torch.equal(background["model"][key], value), key
    for name, state in sync["optimizer"]["state"].items():
        for key, value in state.items():
            assert torch.equal(background["optimizer"]["state"][name][key], value), key
    assert background["scheduler"] == sync["scheduler"]


def test_fsdp2_checkpoint_is_written_and_restored_shard_by_shard(
    world: tuple[Path, list[dict[str, Any]]],
) -> None:
    root, results = world
    for result in results:
        r = result["fsdp"]
        for name in ("sync", "async"):
            assert r[f"{name}_step"] == 2
            assert_equal(r[f"{name}_restored"], r["saved"])
            assert_equal(r[f"{name}_continued"], r["expected"])
    # The two ranks hold different halves, and each wrote its own file.
    assert not torch.equal(results[0]["fsdp"]["saved"][0], results[1]["fsdp"]["saved"][0])
    for name in ("sync", "async"):
        shards = root / "fsdp" / name / "step-00000002" / "sharded"
        assert sorted(p.name for p in shards.iterdir()) == [
            ".metadata",
            "__0_0.distcp",
            "__1_0.distcp",
        ]


@pytest.mark.parametrize("model", ["ddp", "fsdp"])
def test_a_save_one_rank_finds_no_space_for_is_skipped_on_every_rank_and_training_goes_on(
    world: tuple[Path, list[dict[str, Any]]], model: str
) -> None:
    root, results = world
    folder = root / "disk" / model
    saves = [folder / "step-00000001", None, folder / "step-00000003"]
    saves += [None] if model == "fsdp" else []  # rank 1 alone fails, DCP's shards written
    for result in results:
        assert result["full_disk"][model] == saves
    # The skipped save's files removed; the manifest lists the saves that succeeded.
    assert sorted(p.name for p in folder.iterdir()) == [
        "manifest.json",
        "step-00000001",
        "step-00000003",
    ]
