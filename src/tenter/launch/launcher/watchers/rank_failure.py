"""A rank's own failure in a job without restarts: it cannot succeed any more, so it stops now
rather than after that process's slow teardown. Where agents run the ranks, each tells it once
(a ``rank_failed`` event, :mod:`tenter.launch.agent.ranks_watch`) and the launcher reads no
rank's file; mpirun's ranks have no agent, and their error files are looked for instead."""

from __future__ import annotations

import os
from collections.abc import Callable

from tenter.contract.plan import Plan
from tenter.jobdir import layout
from tenter.jobdir.results import JobState
from tenter.launch.diagnosis import root_cause


class RankFailureWatcher:
    def __init__(self, plan: Plan, told: Callable[[], bool] | None = None) -> None:
        """``told``: whether an agent told of a rank's failure of its own (None: no agents)."""
        self._logs = layout.logs_dir(plan.job_dir)
        self._told = told
        self._seen: set[str] = set()

    def tick(self, now: float) -> JobState | None:
        """FAILED once a rank recorded a failure of its own in its error file.

        A peer's broken-connection error does not count: it follows another rank's death,
        which that rank's agent is about to report, and stopping now would lose that report.
        """
        if self._told is not None:
            return JobState.FAILED if self._told() else None
        for entry in os.scandir(self._logs):
            if entry.name.endswith(layout.ERROR_FILE_SUFFIX) and entry.name not in self._seen:
                self._seen.add(entry.name)
                if not root_cause.is_peer_error(entry.path):
                    return JobState.FAILED
        return None
