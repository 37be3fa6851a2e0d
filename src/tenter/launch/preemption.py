"""The launcher's side of a graceful preemption (local and mpi backends).

SIGTERM to the launcher (or ``tenter cancel --preempt``) does not signal the workers: the
launcher writes the job directory's preemption request (:mod:`tenter.jobdir.control`), which
every rank checks at its step boundaries (:mod:`tenter.runtime.preemption`), and waits up to
``checkpoint.preemption_grace`` seconds for the ranks to save a final checkpoint and return.
Past that, the job is stopped as on a cancel (SIGTERM, then SIGKILL), and the summary says
that the final checkpoint was not made in time.
"""

from __future__ import annotations

import time

from tenter.contract.plan import Plan
from tenter.jobdir import control
from tenter.launch.console import say


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
            "preempting: every rank stops at its next step boundary after a final checkpoint "
            f"(grace period {grace} s)"
        )

    def ranks_stopped(self) -> bool:
        """Some rank stopped for the request (rather than finish its work meanwhile)."""
        return self.requested and bool(control.preempted_ranks(self.plan.job_dir))

    def expired(self) -> bool:
        return time.monotonic() > self._deadline

    def outcome(self) -> str:
        """One line for the summary: what the ranks did in the grace period."""
        assert self.requested_at is not None
        return outcome(self.plan, self.requested_at)


def outcome(plan: Plan, requested_at: float) -> str:
    """What the ranks did after the preemption request of ``requested_at``, from their records
    in the job directory."""
    ranks = control.preempted_ranks(plan.job_dir)
    if not ranks:
        return (
            f"preempted: no rank stopped for it within the grace period of "
            f"{plan.preemption_grace} s, so the final checkpoint was not made in time; a "
            "resume continues from the last complete checkpoint"
        )
    seconds = max(float(r["time"]) for r in ranks) - requested_at
    steps = sorted({r["step"] for r in ranks if r["step"] is not None})
    if not steps:
        return f"preempted: the ranks stopped at a step boundary in {seconds:.1f} s"
    return f"preempted: final checkpoint at step {steps[-1]} in {seconds:.1f} s"
