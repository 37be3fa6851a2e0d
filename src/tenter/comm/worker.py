"""The thread that runs a process group's collectives, one at a time, in call order."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

import torch


class Worker:
    """One thread per group running its collectives in call order.

    ``pending`` counts submitted, unfinished collectives and ``running`` is held while one
    executes, so the caller's thread may run a small collective itself when nothing is
    queued (:meth:`claim`) without overtaking the queue.
    """

    def __init__(self, name: str) -> None:
        self._queue: queue.SimpleQueue[
            tuple[Callable[[], object], torch.futures.Future[object]] | None
        ] = queue.SimpleQueue()
        self.lock = threading.Lock()
        self.running = threading.Lock()
        self.pending = 0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[[], object]) -> torch.futures.Future[object]:
        future: torch.futures.Future[object] = torch.futures.Future()
        with self.lock:
            self.pending += 1
            self._queue.put((fn, future))
        return future

    def claim(self) -> bool:
        """Let the caller's thread run one collective now, if nothing is queued or running.
        On success the caller holds ``running`` and counts as pending, and must
        :meth:`unclaim` and, once its collective is done or queued, :meth:`settle`."""
        with self.lock:
            if self.pending or not self.running.acquire(blocking=False):
                return False
            self.pending += 1
            return True

    def unclaim(self) -> None:
        self.running.release()

    def settle(self) -> None:
        """The claimed collective finished, or its rest was submitted (which counts it)."""
        with self.lock:
            self.pending -= 1

    def stop(self) -> None:
        self._queue.put(None)
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=1)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            fn, future = item
            error: BaseException | None = None
            with self.running:
                try:
                    result = fn()
                except BaseException as e:
                    error = e
            # The closure refers to the group, and completing the future may let the caller
            # drop its last reference to it; the group's collection is what stops this
            # thread where destroy_process_group does not call shutdown() (torch 2.5).
            del item, fn
            with self.lock:
                self.pending -= 1
            # Callbacks chained with then() (DDP's bucket hooks) run here, in this thread.
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(result)
