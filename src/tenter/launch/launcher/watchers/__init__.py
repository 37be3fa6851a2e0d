"""What the launcher watches while a job runs, one watcher a concern: a stop request or a
preemption (:mod:`.stop`), ``max_run`` (:mod:`.deadline`), the goodput ledger and its
stragglers (:mod:`.ledger`), a hang with its report and the flight recorders' dumps
(:mod:`.hang`). The launcher's loop (:class:`~tenter.launch.launcher.supervisor.Supervisor`) calls
each watcher's :meth:`Watcher.tick` in turn, every poll, and stops the job for the first reason one
gives."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from tenter.jobdir.results import JobState


class Watcher(Protocol):
    def tick(self, now: float) -> JobState | None:
        """Look again (``now``: ``time.monotonic()``); why the job must stop now (the state it
        ends in: HANG, MAX_RUN...), or None to go on."""
        ...


class EveryTick:
    """A callback as a watcher that never stops the job (the console's event lines, a
    backend's own :meth:`~tenter.launch.launcher.supervisor.Supervisor.on_tick`)."""

    def __init__(self, call: Callable[[], None]) -> None:
        self._call = call

    def tick(self, now: float) -> JobState | None:
        self._call()
        return None
