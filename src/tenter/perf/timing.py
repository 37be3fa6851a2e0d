"""Timing one row half: ``-n`` iterations of ``-m`` calls each, under the ``-z`` blocking
mode, with ``-I`` per-iteration times (nccl-tests' ``BenchTime``).

The reported time is wall clock from the first call to the device synchronisation after
the last, divided by the calls made (nccl-tests' default, non-graph timing); ``-C`` stops
the clock before that synchronisation (the time to launch the calls); ``-z 3`` adds up only
the iterations, leaving the barriers between them out. Per-iteration times come from CUDA
events on the current stream (which torch makes wait for the collective) or, on the CPU,
from the wall clock (a CPU collective returns when it is done).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from tenter.perf.options import PerfOptions


@dataclass(frozen=True)
class Timed:
    """One rank's times, in seconds per call."""

    seconds: float
    cpu_seconds: float
    per_iter: list[float] | None
    """``-I 1``: each iteration's time per call (None without -I)."""


class _Marks:
    """Points in time on the device's timeline: CUDA events, or the wall clock."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.points: list[torch.cuda.Event | float] = []

    def mark(self) -> int:
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            event.record()
            self.points.append(event)
        else:
            self.points.append(time.perf_counter())
        return len(self.points) - 1

    def seconds(self, start: int, stop: int) -> float:
        """Only after the device is synchronised (CUDA events)."""
        a, b = self.points[start], self.points[stop]
        if isinstance(a, torch.cuda.Event) and isinstance(b, torch.cuda.Event):
            return float(a.elapsed_time(b)) / 1e3
        assert isinstance(a, float) and isinstance(b, float)
        return b - a


def time_calls(
    call: Callable[[], None],
    opts: PerfOptions,
    device: torch.device,
    sync: Callable[[], None],
    barrier: Callable[[], None],
) -> Timed:
    """Run and time the half's iterations on this rank (the ranks start together)."""
    if not opts.blocking and not opts.per_iter_timing:
        return _time_back_to_back(call, opts.iters * opts.agg_iters, sync)
    marks = _Marks(device) if opts.per_iter_timing else None
    paired = opts.blocking == 3  # -z 3: each iteration has its own stop, before the barrier
    starts: list[int] = []
    stops: list[int] = []
    iteration_seconds = 0.0
    start = time.perf_counter()
    for _ in range(opts.iters):
        began = time.perf_counter()
        if marks:
            starts.append(marks.mark())
            if not paired and len(starts) > 1:
                stops.append(starts[-1])  # iterations share boundaries otherwise
        for _ in range(opts.agg_iters):
            call()
            if opts.blocking:
                sync()
            if opts.blocking == 1:
                barrier()
        if paired:
            if marks:
                stops.append(marks.mark())
            iteration_seconds += time.perf_counter() - began
            barrier()
    if marks and not paired:
        stops.append(marks.mark())
    calls = opts.iters * opts.agg_iters
    cpu = (iteration_seconds if paired else time.perf_counter() - start) / calls
    sync()
    wall = (iteration_seconds if paired else time.perf_counter() - start) / calls
    per_iter = None
    if marks:
        per_iter = [
            marks.seconds(a, b) / opts.agg_iters for a, b in zip(starts, stops, strict=True)
        ]
    return Timed(seconds=wall, cpu_seconds=cpu, per_iter=per_iter)


def _time_back_to_back(call: Callable[[], None], calls: int, sync: Callable[[], None]) -> Timed:
    """The default (no ``-z``, no ``-I``): the calls back to back, nothing between them, as
    torch's own eager loop runs them (benchmarks/perf_harness_overhead.py compares the two)."""
    start = time.perf_counter()
    for _ in range(calls):
        call()
    cpu = (time.perf_counter() - start) / calls
    sync()
    return Timed(seconds=(time.perf_counter() - start) / calls, cpu_seconds=cpu, per_iter=None)
