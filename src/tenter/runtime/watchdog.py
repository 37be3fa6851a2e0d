"""Per-rank progress record, read by the launcher to diagnose hangs.

Installed by the bootstrap when ``TENTER_WATCH_FILE`` is set. Every collective called
through ``torch.distributed`` (``all_reduce``, ``barrier``...) records on entry and on return
its name, sequence number and tensor sizes, and DistributedDataParallel's forward counts
steps, into a small memory-mapped file. Writing it costs a few microseconds and needs no
cooperation at read time: a rank blocked inside a collective, or sleeping, still shows
where it was. ``SIGUSR1`` makes faulthandler write every thread's Python stack to
``<stem>.stacks`` from C, which also works while the main thread is blocked in C++.

Collectives issued from C++ (DDP's gradient all-reduce) are not seen one by one here; the DDP
step count covers them, and torch's flight recorder, turned on here
(:mod:`tenter.runtime.flight_recorder`), records every one with its sequence number.

A rank that leaves (``destroy_process_group``, or the interpreter's exit) records ``exiting``:
the launcher neither counts a slow teardown as a hang nor asks it for stacks. At exit SIGUSR1 is
ignored from then on: once faulthandler is gone, its default action would kill the rank.
"""

from __future__ import annotations

import atexit
import faulthandler
import functools
import os
import signal
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from tenter.jobdir import layout
from tenter.runtime import flight_recorder
from tenter.runtime.progress_record import EXITING, ProgressRecord

COLLECTIVES = (
    "all_reduce",
    "all_gather",
    "all_gather_into_tensor",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "broadcast",
    "reduce",
    "all_to_all",
    "all_to_all_single",
    "barrier",
    "gather",
    "scatter",
    "send",
    "recv",
    "all_gather_object",
    "broadcast_object_list",
    "monitored_barrier",
)


def _sizes(args: tuple[Any, ...]) -> list[list[int]]:
    return [list(a.shape) for a in args if isinstance(a, torch.Tensor)][:4]


def _watched(record: ProgressRecord, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        record.seq += 1
        record.op, record.sizes = name, _sizes(args)
        record.write("entered")
        result = fn(*args, **kwargs)
        record.write("done")
        return result

    return wrapper


def install(path: str) -> None:
    job_dir = os.environ.get("TENTER_JOB_DIR")
    recorder = bool(job_dir) and flight_recorder.enable(
        layout.rank_stem(path, layout.WATCH_SUFFIX), str(job_dir)
    )
    record = ProgressRecord(path, recorder)
    for name in COLLECTIVES:
        if hasattr(dist, name):
            setattr(dist, name, _watched(record, name, getattr(dist, name)))
    ddp = torch.nn.parallel.DistributedDataParallel
    forward: Callable[..., Any] = ddp.forward

    @functools.wraps(forward)
    def counted_forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        record.step += 1
        record.write("step")
        return forward(self, *args, **kwargs)

    setattr(ddp, "forward", counted_forward)  # noqa: B010 (a method, replaced on the class)
    destroy: Callable[..., Any] = dist.destroy_process_group

    @functools.wraps(destroy)
    def leaving(*args: Any, **kwargs: Any) -> Any:
        record.write(EXITING)
        return destroy(*args, **kwargs)

    dist.destroy_process_group = leaving
    stem = layout.rank_stem(path, layout.WATCH_SUFFIX)
    stacks = open(layout.stacks_file(stem), "w")  # noqa: SIM115 (lives with the process)
    faulthandler.register(signal.SIGUSR1, file=stacks, all_threads=True)

    def at_exit() -> None:
        faulthandler.unregister(signal.SIGUSR1)
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)
        record.write(EXITING)

    atexit.register(at_exit)
