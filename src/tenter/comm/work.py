"""The ``Work`` objects the ``tenter`` process group returns: a collective in flight on the
group's worker thread (:class:`TenterWork`), or one already done (:class:`CompletedWork`)."""

from __future__ import annotations

import datetime
import threading
from collections.abc import Sequence
from typing import Any

import torch

from tenter.comm.compat import WorkBase

WorkLike = Any
"""A :class:`TenterWork`, or the ``Work`` of the gloo/NCCL backend a call was handed to."""


class TenterWork(WorkBase):  # type: ignore[misc]
    """A collective in flight; its future completes on the group's worker thread."""

    def __init__(self, future: torch.futures.Future[object]) -> None:
        super().__init__()
        self._future = future
        # Waiting on an Event rather than in Future.wait() (C++, GIL released, no signal
        # checks) keeps the main thread interruptible: Ctrl-C works inside a collective.
        # A collective that finished in the caller's thread needs neither.
        self._done: threading.Event | None = None
        if not future.done():
            done = self._done = threading.Event()
            future.add_done_callback(lambda _: done.set())

    def wait(self, timeout: datetime.timedelta | None = None) -> bool:
        if self._done is not None:
            self._done.wait()
        self._future.wait()  # raises the collective's error, if any
        return True

    def get_future(self) -> torch.futures.Future[object]:
        return self._future

    def is_completed(self) -> bool:
        return bool(self._future.done())

    def is_success(self) -> bool:
        if not self._future.done():
            return False
        try:
            self._future.value()
        except Exception:
            return False
        return True


class CompletedWork(WorkBase):  # type: ignore[misc]
    """A collective that finished in the caller's thread (the latency path): nothing to
    wait for, and its future is built only when asked for (DDP asks, a plain
    ``dist.all_reduce`` does not), saving the Future and the Event a TenterWork needs."""

    def __init__(self, result: object) -> None:
        super().__init__()
        self._result = result

    def wait(self, timeout: datetime.timedelta | None = None) -> bool:
        return True

    def get_future(self) -> torch.futures.Future[object]:
        future: torch.futures.Future[object] = torch.futures.Future()
        future.set_result(self._result)
        return future

    def is_completed(self) -> bool:
        return True

    def is_success(self) -> bool:
        return True


def last_of(works: Sequence[WorkLike], result: object) -> WorkLike:
    """One work for several queued ones: they run in order, so the last one's end is
    everyone's end; errors of earlier ones surface there too (the group fails)."""
    if not works:
        return CompletedWork(result)
    return TenterWork(works[-1].get_future().then(lambda _: result))
