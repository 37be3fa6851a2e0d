"""The goodput ledger in the job directory (``goodput.json``), kept up to date while the job
runs, and the stragglers its records show, each named once (docs/goodput.md)."""

from __future__ import annotations

import time

from tenter.contract.plan import Plan
from tenter.goodput.keeper import LedgerKeeper, record_straggler
from tenter.goodput.stragglers import Straggler, StragglerRule
from tenter.jobdir.results import JobState
from tenter.launch.shared.console import say

LEDGER_S = 2.0
"""How often the goodput ledger in the job directory is brought up to date (at most)."""
LEDGER_SHARE = 50
"""The ledger's interval is at least this many times the time one pass takes."""


class LedgerWatcher:
    def __init__(self, plan: Plan) -> None:
        self._job_dir = plan.job_dir
        self._keeper: LedgerKeeper | None = None
        self._next = 0.0
        self._rule = StragglerRule(**plan.stragglers) if plan.stragglers else None  # type: ignore[arg-type]
        self.stragglers: dict[int, Straggler] = {}
        """The ranks named stragglers so far (each once)."""

    def tick(self, now: float) -> JobState | None:
        """Rewrite ``goodput.json`` every LEDGER_S while the job runs (the summary has the
        final one), and name the stragglers that appeared."""
        started = time.monotonic()
        if started < self._next:
            return None
        try:
            self._pass()
        except (OSError, ValueError, KeyError, TypeError) as e:
            # A full disk, a damaged record: the job goes on without its ledger (said once).
            self._next = float("inf")
            say(f"the goodput ledger is no longer kept: {e!r}")
            return None
        # A pass reads the records once but reckons over all of them: a long job's passes
        # are spaced out so that they take at most 1/LEDGER_SHARE of a core.
        self._next = started + max(LEDGER_S, LEDGER_SHARE * (time.monotonic() - started))
        return None

    def last_pass(self) -> None:
        """Once the ranks are gone: what their last steps show. A job that ended between two
        passes (or within its first) has its stragglers named all the same, as any later
        reading of its records names them."""
        if self._next != float("inf"):  # unless the ledger was given up
            self._next = 0.0
            self.tick(time.monotonic())

    def _pass(self) -> None:
        if self._keeper is None:
            self._keeper = LedgerKeeper(self._job_dir)
        self._keeper.write()
        if self._rule is None:
            return
        for straggler in self._keeper.stragglers(self._rule):
            if straggler.rank not in self.stragglers:
                self.stragglers[straggler.rank] = straggler
                record_straggler(self._job_dir, straggler)
                say(f"straggler: {straggler.text}")
