"""A stop request to the launcher (Ctrl-C, ``tenter cancel``, SIGTERM): the job stops at once,
or, for a preemption with a grace period, once its ranks ended or the grace is spent
(:mod:`tenter.launch.launcher.preemption`); the grace also bounds a preemption the backend
started (a Ray node drain, :mod:`tenter.launch.backends.ray.drain`)."""

from __future__ import annotations

import threading

from tenter.contract.plan import Plan
from tenter.jobdir.results import JobState
from tenter.launch.launcher.preemption import PreemptionWatch
from tenter.launch.shared.signals import is_preemption


class StopWatcher:
    def __init__(self, plan: Plan, stop: threading.Event, preemption: PreemptionWatch) -> None:
        self._grace = plan.preemption_grace
        self._stop = stop
        self._preemption = preemption

    def tick(self, now: float) -> JobState | None:
        if self._stop.is_set():
            if not (is_preemption(self._stop) and self._grace):
                return JobState.INTERRUPTED
            if not self._preemption.requested:
                self._preemption.start()  # the ranks stop by themselves, then succeed
                return None
        # Whoever asked for it (SIGTERM, or the backend: a Ray node drain), its grace ends it.
        if self._preemption.requested and self._preemption.expired():
            return JobState.PREEMPTED
        return None
