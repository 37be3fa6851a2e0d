"""Run a function in a fresh world of processes joined by ``init_process_group``.

The parent hosts the TCPStore (port 0: no port races with other tests), starts one
spawned process per rank, and collects each rank's return value or traceback. Every
world gets its own ``TENTER_JOB_ID`` so its shared-memory segments are recognisable, and
:func:`leftover_segments` finds any it left behind. Processes are killed and joined in
all cases.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import queue
import traceback
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch.distributed as dist

SHM = Path("/dev/shm")


@dataclass
class RankResult:
    rank: int
    value: Any = None
    error: str | None = None
    exitcode: int | None = None


@dataclass
class World:
    job_id: str
    results: list[RankResult] = field(default_factory=list)

    def values(self) -> list[Any]:
        """Every rank's return value; fails with the ranks' tracebacks if any failed."""
        failed = [r for r in self.results if r.error is not None or r.value is None]
        if failed:
            report = "\n".join(f"--- rank {r.rank} (exit {r.exitcode}):\n{r.error}" for r in failed)
            raise AssertionError(f"ranks failed:\n{report}")
        return [r.value for r in self.results]


def leftover_segments(job_id: str) -> list[str]:
    return sorted(p.name for p in SHM.glob(f"tenter-{job_id}-*"))


def _entry(
    fn: Callable[..., Any],
    rank: int,
    size: int,
    port: int,
    backend: str,
    env: Mapping[str, str],
    timeout_s: float,
    args: tuple[Any, ...],
    out: Any,
) -> None:
    os.environ.update(env)
    import torch

    import tenter.comm  # noqa: F401  # registers "tenter"

    torch.set_num_threads(1)
    try:
        store = dist.TCPStore("127.0.0.1", port, size, is_master=False)
        dist.init_process_group(
            backend, store=store, rank=rank, world_size=size, timeout=timedelta(seconds=timeout_s)
        )
        value = fn(rank, size, *args)
        dist.destroy_process_group()
        out.put((rank, value, None))
    except BaseException:
        out.put((rank, None, traceback.format_exc()))
        raise SystemExit(1) from None


def run_world(
    fn: Callable[..., Any],
    size: int,
    *,
    backend: str = "tenter",
    env: Mapping[str, str] | None = None,
    rank_env: Callable[[int], Mapping[str, str]] | None = None,
    args: tuple[Any, ...] = (),
    collective_timeout_s: float = 60.0,
    deadline_s: float = 120.0,
    on_started: Callable[[list[Any], Any], None] | None = None,
) -> World:
    """Run ``fn(rank, size, *args)`` on ``size`` ranks and collect the results."""
    job_id = f"pytest{uuid.uuid4().hex[:10]}"
    store = dist.TCPStore("127.0.0.1", 0, size + 1, is_master=True, wait_for_workers=False)
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = []
    try:
        for rank in range(size):
            rank_vars = {
                "TENTER_JOB_ID": job_id,
                "TENTER_COMM_TEST_STORE_PORT": str(store.port),
                **(env or {}),
                **(rank_env(rank) if rank_env else {}),
            }
            p = ctx.Process(
                target=_entry,
                args=(
                    fn,
                    rank,
                    size,
                    store.port,
                    backend,
                    rank_vars,
                    collective_timeout_s,
                    args,
                    out,
                ),
                daemon=True,
            )
            p.start()
            procs.append(p)
        if on_started is not None:
            on_started(procs, store)
        results = {r: RankResult(r) for r in range(size)}
        pending = set(range(size))
        waited = 0.0
        while pending and waited < deadline_s:
            try:
                rank, value, error = out.get(timeout=0.5)
            except queue.Empty:
                waited += 0.5
                # a rank that died without reporting will never report
                if all(not procs[r].is_alive() for r in pending):
                    # A process flushes its queue before it exits: what it sent is in the
                    # pipe already, and nothing more will come.
                    with contextlib.suppress(queue.Empty):
                        while pending:
                            rank, value, error = out.get(timeout=0.2)
                            results[rank].value, results[rank].error = value, error
                            pending.discard(rank)
                    break
                continue
            results[rank].value, results[rank].error = value, error
            pending.discard(rank)
        for rank in pending:
            results[rank].error = "no result (killed, hung or crashed)"
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
                p.join()
    for rank, p in enumerate(procs):
        results[rank].exitcode = p.exitcode
    return World(job_id, [results[r] for r in range(size)])


def side_store() -> dist.TCPStore:
    """A client of the parent's store, for side-channel signalling inside a world."""
    port = int(os.environ["TENTER_COMM_TEST_STORE_PORT"])
    return dist.TCPStore("127.0.0.1", port, is_master=False)
