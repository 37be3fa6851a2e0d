"""What this host's ranks show the launcher, so that its watch costs O(hosts), not O(ranks):
a rank's own failure as one event (``rank_failed``: a job without restarts stops at once,
before that rank's slow teardown), and the newest progress of the host's ranks as its
summary (:mod:`tenter.jobdir.host_ranks`, for the hang watch), rewritten only when it
changed."""

from __future__ import annotations

import json
import os
import time

from tenter.jobdir import layout
from tenter.jobdir.events import EventKind, record_event
from tenter.jobdir.host_ranks import RanksSummary, write_summary
from tenter.launch.agent.spec import AgentSpec
from tenter.launch.agent.workers import WorkerGroup
from tenter.launch.diagnosis.root_cause import is_peer_error

SUMMARY_S = 0.5
"""How often the ranks' progress records are read into the host's summary: the launcher's
hang check reads the summaries as often (tenter.launch.launcher.watchers.hang)."""


class RanksWatch:
    def __init__(self, spec: AgentSpec) -> None:
        self._job_dir, self._host, self._host_dir = spec.job_dir, spec.host, spec.host_dir
        self._hangs_watched = bool(spec.hang_timeout)
        self._errors_seen: set[str] = set()
        self._next = 0.0
        self._written: RanksSummary | None = None

    def look(self, group: WorkerGroup) -> None:
        """A ``stat`` of each worker's error file; every SUMMARY_S, a read of each one's
        progress record."""
        for worker in group.workers:
            error_file = worker.entry.error_file
            if error_file not in self._errors_seen and os.path.exists(error_file):
                self._errors_seen.add(error_file)
                # A peer's broken connection follows another rank's failure: not a cause.
                if not is_peer_error(error_file):
                    record_event(
                        self._job_dir,
                        EventKind.RANK_FAILED,
                        host=self._host,
                        rank=worker.entry.rank,
                    )
        if self._hangs_watched and time.monotonic() >= self._next:
            self._next = time.monotonic() + SUMMARY_S
            self._summarize(group)

    def _summarize(self, group: WorkerGroup) -> None:
        records = []
        for worker in group.workers:
            stem = layout.rank_stem(worker.entry.error_file, layout.ERROR_FILE_SUFFIX)
            try:
                with open(layout.watch_file(stem), "rb") as f:
                    data = json.loads(f.readline())
                records.append((float(data["time"]), str(data["state"])))
            except (OSError, ValueError, KeyError):
                continue  # not written yet
        summary = RanksSummary.of(records)
        if summary != self._written:
            write_summary(self._host_dir, summary)
            self._written = summary
