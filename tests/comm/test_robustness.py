"""Failures of the tenter backend: timeouts, mismatched collectives, dead or interrupted
ranks, and that no shared-memory segment outlives a world however it ends."""

from __future__ import annotations

import os
import re
import signal
from typing import Any

import pytest
from comm_workers import (
    all_reduce_once,
    interrupted,
    killed_peer,
    mismatch,
    raise_after_collective,
    time_out,
)
from commworld import leftover_segments, run_world


def test_collective_raises_timeout_naming_missing_rank_if_peer_never_arrives() -> None:
    world = run_world(time_out, 2, collective_timeout_s=2)
    rank0, rank1 = world.values()
    assert rank1 == "waited"
    assert re.match(
        r"CommTimeoutError: tenter\.comm: all_reduce \(collective #0 of this group\) on "
        r"process group '0' did not complete within 2 s: rank\(s\) 1 never arrived\.",
        rank0,
    ), rank0
    assert leftover_segments(world.job_id) == []


@pytest.mark.parametrize(
    ("kind", "pattern"),
    [
        (
            "op",
            r"all_reduce\(dtype=torch\.float32, numel=4, op=SUM\) as collective #0 but rank 1 "
            r"called all_gather\(dtype=torch\.float32, numel=4\) as collective #0",
        ),
        (
            "size",
            r"all_reduce\(dtype=torch\.float32, numel=4, op=SUM\) as collective #0 but rank 1 "
            r"called all_reduce\(dtype=torch\.float32, numel=5, op=SUM\) as collective #0",
        ),
    ],
)
def test_collective_raises_mismatch_on_every_rank_if_ranks_disagree(
    kind: str, pattern: str
) -> None:
    world = run_world(mismatch, 2, args=(kind,))
    for message in world.values():
        first, later = message.split("\nLATER ")
        assert first.startswith("CollectiveMismatchError: tenter.comm: ranks called different")
        # each rank reports itself first and its peer second
        assert re.search(pattern, first) or re.search(_swap_ranks(pattern), first), first
        assert later.startswith("CommShutdownError: tenter.comm: all_reduce (collective #1)")
        assert "the group failed earlier" in later
    assert leftover_segments(world.job_id) == []


def _swap_ranks(pattern: str) -> str:
    """The same two calls reported by the other rank."""
    head, tail = pattern.split(" but rank 1 called ")
    return tail + " but rank 0 called " + head


def test_no_segment_left_if_world_ends_normally() -> None:
    world = run_world(all_reduce_once, 2)
    assert world.values() == ["ok", "ok"]
    assert leftover_segments(world.job_id) == []


def test_no_segment_left_if_a_rank_raises() -> None:
    world = run_world(raise_after_collective, 2, collective_timeout_s=20)
    assert "RuntimeError: boom" in (world.results[1].error or "")
    assert world.results[1].exitcode == 1
    assert leftover_segments(world.job_id) == []


def test_survivor_raises_peer_died_if_a_rank_is_sigkilled() -> None:
    world = run_world(killed_peer, 2, collective_timeout_s=60)
    assert world.results[1].exitcode == -signal.SIGKILL
    message = world.results[0].value
    # detected by the liveness check, long before the 60 s timeout
    assert re.match(
        r"CommPeerDiedError after \d+\.\ds: tenter\.comm: rank 1 \(pid \d+\) exited while "
        r"this rank waited for it in all_reduce \(collective #1 of this group\)",
        message,
    ), message
    assert float(message.split(" after ")[1].split("s:")[0]) < 30
    assert leftover_segments(world.job_id) == []


def test_ctrl_c_interrupts_a_rank_blocked_in_a_collective() -> None:
    def interrupt(procs: list[Any], store: Any) -> None:
        store.wait(["rank1_blocked"])
        os.kill(int(store.get("rank1_pid")), signal.SIGINT)

    world = run_world(interrupted, 2, on_started=interrupt)
    assert world.values() == ["ok", "interrupted"]
    assert leftover_segments(world.job_id) == []
