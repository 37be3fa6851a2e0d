"""A rank's own failure in a job without restarts: it cannot succeed any more, so it stops now
rather than after that process's slow teardown."""

from __future__ import annotations

import os

from tenter.contract.plan import Plan
from tenter.jobdir import layout
from tenter.jobdir.results import JobState
from tenter.launch import report


class RankFailureWatcher:
    def __init__(self, plan: Plan) -> None:
        self._logs = layout.logs_dir(plan.job_dir)
        self._seen: set[str] = set()

    def tick(self, now: float) -> JobState | None:
        """FAILED once a rank recorded a failure of its own in its error file.

        A peer's broken-connection error does not count: it follows another rank's death,
        which that rank's agent is about to report, and stopping now would lose that report.
        """
        for entry in os.scandir(self._logs):
            if entry.name.endswith(layout.ERROR_FILE_SUFFIX) and entry.name not in self._seen:
                self._seen.add(entry.name)
                if not report.is_peer_error(entry.path):
                    return JobState.FAILED
        return None
