"""A hang (``hang_timeout``; :mod:`tenter.launch.diagnosis.hang`): the ranks' progress records show
no step for that long. The watcher writes the hang report (the ranks' stacks and states, and what
their flight recorders name: :mod:`tenter.launch.diagnosis.flight_recorder`), then stops the job
(``on_hang: stop``) or kills the workers for their agents to restart them (``restart``).

Where agents run the ranks, the watch reads each host's summary of its ranks (one small file a
host, read again only once it changed: :mod:`tenter.jobdir.host_ranks`), and every rank's
record only once the summaries show a hang, to confirm it and write the report."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from tenter.contract.plan import Plan
from tenter.goodput.keeper import record_hang
from tenter.jobdir import layout
from tenter.jobdir.host_ranks import RanksSummary, SummaryReader
from tenter.jobdir.results import JobState
from tenter.launch.diagnosis import flight_recorder, hang, hang_replies
from tenter.launch.diagnosis.rank_signals import LocalSignals, RankSignals
from tenter.launch.shared.console import say

CHECK_S = 0.5
"""How often the ranks' progress records are read."""


class HangWatcher:
    def __init__(
        self,
        plan: Plan,
        reports: list[str],
        restarted_at: Callable[[], float],
        host_dirs: Callable[[], Sequence[str]] | None = None,
        signals: RankSignals | None = None,
    ) -> None:
        """``reports``: where each hang report goes too (the summary's extra lines);
        ``restarted_at``: when an agent last began a group restart (0 before any), from
        which the restarted ranks' start-up is timed as at launch; ``host_dirs``: the
        directories of the hosts whose agents summarize their ranks (None: no agents);
        ``signals``: how the ranks' processes are reached (default: on this machine)."""
        self._signals = signals or LocalSignals()
        self.plan = plan
        self._restarted_at = restarted_at
        self._host_dirs = host_dirs
        self._summaries = SummaryReader()
        self._reports = reports
        self._next_check = 0.0

    def tick(self, now: float) -> JobState | None:
        if not self.plan.hang_timeout or now < self._next_check:
            return None
        self._next_check = now + CHECK_S
        if self._host_dirs is not None:
            ranks = RanksSummary.newest(self._summaries.read(self._host_dirs()))
            if (
                hang.summary_verdict(
                    ranks, time.time(), self.plan.hang_timeout, self._restarted_at()
                )
                is None
            ):
                return None
        # Every rank's record: the summaries' verdict confirmed (an agent's may lag behind
        # its ranks), and what the report reads.
        progress = hang.read_progress(self.plan)
        verdict = hang.hang_verdict(
            progress, time.time(), self.plan.hang_timeout, self._restarted_at()
        )
        if verdict is None:
            return None
        record_hang(self.plan.job_dir)
        text = f"hang: {verdict}\n{self._report(progress)}"
        (Path(self.plan.job_dir) / layout.HANG_REPORT_FILE).write_text(text + "\n")
        self._reports.append(text)
        say(text)
        if self.plan.on_hang == "stop":
            return JobState.HANG
        self._restart_workers()
        return None

    def _report(self, progress: list[hang.RankProgress]) -> str:
        """The ranks' stacks and states, then the culprits their flight recorders name."""
        replies = hang_replies.gather(progress, self.plan.job_dir, self._signals)
        text = hang.report(progress, replies.stacks, time.time(), replies.states)
        found = flight_recorder.culprits(replies.dumps, {p.rank: p.host for p in progress})
        return "\n".join([text, *found])

    def _restart_workers(self) -> None:
        """on_hang: restart. Kill the workers; their agents restart the group (one restart)."""
        self._signals.send(hang.read_progress(self.plan), signal.SIGKILL)
        self._next_check = time.monotonic() + (self.plan.hang_timeout or 0)
