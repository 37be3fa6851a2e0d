"""The launcher's side of a graceful preemption (local and mpi backends).

SIGTERM to the launcher (or ``tenter cancel --preempt``) writes the job directory's preemption
request (:mod:`tenter.jobdir.control`). Each host's agent passes SIGTERM on to its workers the
moment it sees it, as torchrun does: a script using tenter's checkpointer turns it into the
agreed stop at one step boundary after a final checkpoint (:mod:`tenter.runtime.preemption`),
a script with a SIGTERM handler of its own runs it, any other script ends. The launcher waits
for the ranks to end, at most ``checkpoint.preemption_grace`` seconds (a deadline, never a
delay); past that, the job is stopped as on a cancel (SIGTERM, then SIGKILL).

The job ends as preempted (exit 75: run it again to resume) when a final checkpoint was made:
tenter's checkpointer recorded one, or the script's own handler wrote into the job's checkpoint
directory after the request. Otherwise its summary says what was lost, the ledger counts it
lost, and it ends as interrupted (130).
"""

from __future__ import annotations

import contextlib
import os
import time

from tenter.contract.plan import Plan
from tenter.errors import ExitCode
from tenter.jobdir import control
from tenter.launch.shared.console import say


class PreemptionWatch:
    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.requested_at: float | None = None
        """When the request was written (wall clock: the ranks' records are compared to it)."""
        self._deadline = 0.0

    @property
    def requested(self) -> bool:
        return self.requested_at is not None

    def start(self) -> None:
        grace = self.plan.preemption_grace
        request = control.request_preemption(self.plan.job_dir, grace, by="launcher")
        self.requested_at = float(request["time"])
        self._deadline = time.monotonic() + grace
        say(
            "preempting: SIGTERM to every rank (with tenter's checkpointer: a final checkpoint "
            f"at the next step boundary); the job ends when they do, within {grace} s"
        )

    def expired(self) -> bool:
        return time.monotonic() > self._deadline

    def outcome(self) -> tuple[ExitCode, str]:
        """The job's exit code and one line for the summary: what the ranks did in the grace
        period."""
        assert self.requested_at is not None
        return outcome(self.plan, self.requested_at, expired=self.expired())


NEWEST_SCAN_LIMIT = 10_000
"""Entries of a checkpoint directory looked at for the newest write (a bound on the time the
summary takes, whatever a script keeps there)."""


def newest_write(folder: str) -> float | None:
    """When anything under ``folder`` was last written (None: nothing there); at most
    :data:`NEWEST_SCAN_LIMIT` entries are looked at."""
    newest: float | None = None
    seen = 0
    for root, dirs, files in os.walk(folder):
        for name in [*dirs, *files]:
            seen += 1
            if seen > NEWEST_SCAN_LIMIT:
                return newest
            with contextlib.suppress(OSError):
                mtime = os.lstat(os.path.join(root, name)).st_mtime
                newest = mtime if newest is None else max(newest, mtime)
    return newest


def outcome(plan: Plan, requested_at: float, expired: bool = False) -> tuple[ExitCode, str]:
    """The job's exit code and one summary line after the preemption request of
    ``requested_at``, from the ranks' records and the checkpoint directory; ``expired``: the
    ranks did not end within the grace period, and were stopped."""
    ranks = control.preempted_ranks(plan.job_dir)
    if ranks:
        seconds = max(float(r["time"]) for r in ranks) - requested_at
        steps = sorted({r["step"] for r in ranks if r["step"] is not None})
        if not steps:
            return ExitCode.PREEMPTED, (
                f"preempted: the ranks stopped at a step boundary in {seconds:.1f} s"
            )
        return (
            ExitCode.PREEMPTED,
            f"preempted: final checkpoint at step {steps[-1]} in {seconds:.1f} s",
        )
    newest = newest_write(plan.checkpoint_dir)
    if newest is not None and newest >= requested_at:
        return ExitCode.PREEMPTED, (
            f"preempted: the script's SIGTERM handler wrote to {plan.checkpoint_dir} "
            f"{newest - requested_at:.1f} s after the request"
        )
    lost = (
        f"the work since its last write there ({time.strftime('%H:%M:%S', time.localtime(newest))})"
        if newest is not None
        else "all of its work (it never wrote a checkpoint there)"
    )
    stopped = (
        f"the ranks did not end within the grace period of {plan.preemption_grace} s and "
        "were stopped; "
        if expired
        else ""
    )
    return ExitCode.INTERRUPTED, (
        f"preempted without a final checkpoint: {stopped}no rank wrote to "
        f"{plan.checkpoint_dir} after the request, so the job lost {lost}"
    )
