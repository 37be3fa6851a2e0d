"""``max_run``: the job stops once it has run that long."""

from __future__ import annotations

from tenter.jobdir.results import JobState


class MaxRunWatcher:
    def __init__(self, started: float, max_run: float | None) -> None:
        """``started``: when the launcher started (``time.monotonic()``); ``max_run``: None or
        0 for none."""
        self._deadline = started + max_run if max_run else None

    def tick(self, now: float) -> JobState | None:
        return JobState.MAX_RUN if self._deadline is not None and now > self._deadline else None
