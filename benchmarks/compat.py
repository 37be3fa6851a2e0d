"""Every private torch name the benchmarks use, with the torch versions each line serves.

A benchmark may look inside torch to say where time goes; it does so here only, so that a
torch release that moves a name breaks one line, and ``tests/torch_versions`` finds any
private use elsewhere in ``benchmarks/``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from torch.distributed.pipelining import schedules


def time_pipeline_waits(record: Callable[[float], None]) -> bool:
    """Make torch's pipeline schedules pass the seconds of each wait for their sends and
    receives to ``record``. They call a module-level function by name to wait, so wrapping it
    times every wait [torch 2.8+: ``schedules._wait_batch_p2p``; torch 2.7 waits inline].
    False where this torch has no such function (no wait times, the rest measured alike)."""
    wait: Any = getattr(schedules, "_wait_batch_p2p", None)  # [torch 2.8+]
    if wait is None:
        return False

    def timed(works: Any) -> None:
        start = time.perf_counter()
        wait(works)
        record(time.perf_counter() - start)

    schedules._wait_batch_p2p = timed  # type: ignore[assignment]  # [torch 2.8+]
    return True
