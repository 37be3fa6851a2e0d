"""Run a function on a fresh world of spawned processes joined over gloo.

The parent hosts the TCPStore on a kernel-chosen port, so parallel test runs never race for
one. Every process is joined, and killed if it outlives the deadline, whatever happens.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import traceback
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

import psutil
import torch.distributed as dist


def _entry(
    fn: Callable[..., Any],
    rank: int,
    size: int,
    port: int,
    env: Mapping[str, str],
    args: tuple[Any, ...],
    out: Any,
) -> None:
    os.environ.update(env)
    import torch

    # Several worlds share two cores with other work: one thread per rank avoids
    # oversubscription (and makes the CPU kernels' summation order fixed).
    torch.set_num_threads(1)
    try:
        store = dist.TCPStore("127.0.0.1", port, size, is_master=False)
        dist.init_process_group(
            "gloo", store=store, rank=rank, world_size=size, timeout=timedelta(seconds=90)
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
    args: tuple[Any, ...] = (),
    env: Mapping[str, str] | None = None,
    deadline_s: float = 150.0,
) -> list[Any]:
    """``fn(rank, size, *args)`` on ``size`` ranks: every rank's return value, or an
    AssertionError carrying the failed ranks' tracebacks."""
    store = dist.TCPStore("127.0.0.1", 0, size + 1, is_master=True, wait_for_workers=False)
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [
        ctx.Process(
            target=_entry, args=(fn, r, size, store.port, dict(env or {}), args, out), daemon=True
        )
        for r in range(size)
    ]
    results: dict[int, tuple[Any, str | None]] = {}
    try:
        for p in procs:
            p.start()
        while len(results) < size:
            try:
                rank, value, error = out.get(timeout=deadline_s)
            except queue.Empty:
                break
            results[rank] = (value, error)
            if error is not None:
                break  # the other ranks would wait on the dead one until their timeout
    finally:
        for p in procs:
            p.join(timeout=5 if len(results) < size else 60)
            if p.is_alive():
                p.kill()
                p.join()
    errors = {
        r: results.get(r, (None, "no result (killed, hung or crashed)"))[1] for r in range(size)
    }
    failed = {r: e for r, e in errors.items() if e is not None}
    if failed:
        report = "\n".join(f"--- rank {r}:\n{e}" for r, e in failed.items())
        raise AssertionError(f"ranks failed:\n{report}")
    return [results[r][0] for r in range(size)]


def leftover_workers() -> list[psutil.Process]:
    """This process's children other than multiprocessing's resource tracker (which lives as
    long as the test process, by design)."""
    return [
        p
        for p in psutil.Process().children(recursive=True)
        if "resource_tracker" not in " ".join(p.cmdline())
    ]
