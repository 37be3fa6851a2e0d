"""Every collective x dtype x op of the tenter backend against local references, in real
multi-process worlds over real shared memory, plus subgroups, DDP and FSDP2."""

from __future__ import annotations

import pytest
import torch
import torch.distributed.fsdp
from comm_workers import SMALL_CHUNKS, check_collectives, check_subgroups, train
from commworld import leftover_segments, run_world


@pytest.mark.parametrize("size", [2, 4])
def test_collectives_match_reference_if_chunked(size: int) -> None:
    # 4 KiB chunks send the larger tensors through the chunked, pipelined paths.
    world = run_world(check_collectives, size, env=SMALL_CHUNKS)
    values = world.values()
    assert len(values[0]["digests"]) == 220  # 44 dtype x op pairs x 5 sizes
    for rank, v in enumerate(values[1:], start=1):
        assert v["digests"] == values[0]["digests"], f"rank {rank} differs from rank 0"
    assert leftover_segments(world.job_id) == []


def test_collectives_match_reference_with_default_chunks() -> None:
    world = run_world(check_collectives, 2)
    values = world.values()
    assert values[0]["digests"] == values[1]["digests"]


def test_subgroups_and_device_mesh_reduce_within_their_ranks() -> None:
    assert run_world(check_subgroups, 4).values() == [True] * 4


def test_training_matches_gloo_if_wrapped_in_ddp_or_fsdp2() -> None:
    # FSDP2 runs on CPU from torch 2.6 on; older torch checks DDP only.
    wrappers = ["ddp", "fsdp"] if hasattr(torch.distributed.fsdp, "fully_shard") else ["ddp"]
    tenter = run_world(train, 2, args=(wrappers,)).values()
    gloo = run_world(train, 2, backend="gloo", args=(wrappers,)).values()
    for wrapper in wrappers:
        for name, value in gloo[0][wrapper].items():
            got = torch.tensor(tenter[0][wrapper][name])
            torch.testing.assert_close(got, torch.tensor(value), msg=f"{wrapper} {name}")
            same = tenter[0][wrapper][name] == tenter[1][wrapper][name]
            assert same, f"{wrapper} {name} differs across ranks"
