"""The rehearsal on the mpi backend: the same light ranks, started by Open MPI's ``mpirun``
through the backend's own launcher (:class:`~tenter.launch.backends.mpi.backend.MpiJob`: its
argv, each rank's shim, its store, its watchers, its failure report), on hosts simulated on
this machine as the backend's tests simulate them (every app context on ``localhost``).

mpirun's model has no agents and no restarts: a rank's death ends the job, and the job's
failure report names the rank. The phases that apply, in two jobs (each fault ends its job):

1. launch → every rank at its first step; the steady state (as on the local backend);
   one rank SIGKILLed → the job stopped, its failure report's root cause that rank;
2. a second job: launch, then one rank SIGSTOPped → the launcher's hang report naming it
   (the ranks' progress records, which the shim has them write with ``hang_timeout``).

What does not apply is said in the table (:data:`SKIPPED`).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable

from tenter.contract.plan import Plan
from tenter.launch.backends.mpi.backend import MpiJob
from tenter.launch.diagnosis import hang
from tenter.rehearsal.drive import STEADY_S, Driver, Figures, RehearsalFailed

SKIPPED = {
    "kill": "mpi: no restart; a rank's death ends the job (timed above)",
    "host_lost": "mpi: no agent declares a host lost; mpirun sees its ranks die",
    "store_requests": "mpi: no agents; the ranks are the store's only clients",
}
"""The local rehearsal's phases and figures that mpirun's model has not, and why."""


class MpiRehearsal(Driver):
    def __init__(self, plan: Plan, bound_s: float, steady: bool = True) -> None:
        super().__init__(plan, MpiJob(plan), bound_s, steady, STEADY_S)

    def kill_phases(self) -> Figures:
        """Launch, the steady state, and a rank's kill, which ends the job."""
        try:
            self._launch()
            if self.steady:
                self._steady_state()
            self._kill_stops_the_job()
        finally:
            self._end_launcher()
        return self.figures

    def hang_phases(self) -> Figures:
        """Launch, and a rank's hang, whose report ends the job (``on_hang: stop``)."""
        try:
            self._launch()
            self._hang()
        finally:
            self._end_launcher()
        return self.figures

    def _kill_stops_the_job(self) -> None:
        """A rank SIGKILLed (no agent to ask: mpirun's ranks are this machine's processes),
        timed to the job's result, whose failure report must name that rank as its root cause."""
        rank = self.figures.ranks // 2
        victim = next(p for p in hang.read_progress(self.plan) if p.rank == rank)
        started = time.monotonic()
        os.kill(victim.pid, signal.SIGKILL)
        assert self._launcher is not None
        self._launcher.join(timeout=self.bound_s)
        if self._launcher.is_alive():
            raise RehearsalFailed(f"the job did not stop within {self.bound_s:g} s of a kill")
        self.figures.seconds["kill_stopped"] = time.monotonic() - started
        summary = self.figures.result.summary if self.figures.result is not None else ""
        cause = next((line for line in summary.splitlines() if "root cause:" in line), "")
        if f"root cause: rank {rank} on host" not in cause or "SIGKILL" not in cause:
            raise RehearsalFailed(f"the failure report did not name rank {rank}: {cause!r}")
        # Where and how, less the line's prefix and its explanation of the signal.
        self.figures.root_cause = ": ".join(cause.strip().split(": ")[1:3])


def rehearse(
    plan: Plan, new_plan: Callable[[], Plan], bound_s: float, steady: bool = True
) -> Figures:
    """Both jobs' figures in one (the first job's launch and steady state): ``plan``'s job,
    then, with a ``hang_timeout``, ``new_plan()``'s (the same, with a job id of its own)."""
    figures = MpiRehearsal(plan, bound_s, steady).kill_phases()
    if plan.hang_timeout:
        hung = MpiRehearsal(new_plan(), bound_s, steady=False).hang_phases()
        figures.seconds["hang_named"] = hung.seconds["hang_named"]
        figures.hang_report = hung.hang_report
    figures.skipped = dict(SKIPPED)
    return figures
