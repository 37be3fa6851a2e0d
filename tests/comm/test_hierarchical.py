"""Two simulated hosts x two ranks, as tenter's local launcher sets them up: each host has
its own TENTER_HOST and loopback TENTER_HOST_ADDR, so all_reduce goes shm -> gloo between
host leaders -> shm, and the other collectives use gloo across hosts."""

from __future__ import annotations

from comm_workers import SMALL_CHUNKS, topology_and_hierarchical
from commworld import leftover_segments, run_world


def _host_env(rank: int) -> dict[str, str]:
    host = rank // 2
    return {"TENTER_HOST": f"algo-{host + 1}", "TENTER_HOST_ADDR": f"127.{100 + host}.0.1"}


def test_all_reduce_is_hierarchical_if_ranks_are_on_two_hosts() -> None:
    world = run_world(topology_and_hierarchical, 4, env=SMALL_CHUNKS, rank_env=_host_env)
    values = world.values()
    assert values[0]["hosts"] == [[0, 1], [2, 3]]
    for rank, v in enumerate(values):
        assert v["digests"] == values[0]["digests"], f"rank {rank} differs from rank 0"
    assert leftover_segments(world.job_id) == []
