"""The background thread of asynchronous saves."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor


class AsyncWriter:
    """Runs one save at a time in a background thread while training goes on.

    A plain (non-daemon) pool thread: the interpreter joins it at exit, so a script that
    ends without ``Checkpointer.close()`` still finishes writing its last checkpoint.
    """

    def __init__(self) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tenter-ckpt")
        self._pending: Future[None] | None = None

    def submit(self, job: Callable[[], None]) -> None:
        assert self._pending is None, "wait() for the previous save before submitting another"
        self._pending = self._executor.submit(job)

    def wait(self) -> None:
        """Block until the submitted save is done; raise its exception if it failed."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def close(self) -> None:
        try:
            self.wait()
        finally:
            self._executor.shutdown()
