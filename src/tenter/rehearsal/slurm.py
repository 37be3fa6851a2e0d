"""The rehearsal on the slurm backend (``tenter rehearse JOB.yaml --backend slurm``): the job is
submitted as ``tenter run --backend slurm`` submits it (its batch script, through ``sbatch`` to
the cluster ``SLURM_CONF`` names; one srun step that starts one real tenter agent per node) and
followed as ``tenter run`` follows it (the backend's ``wait``, ``squeue`` every 0.5 s, in a
thread of this process). Nothing is packed: each node runs tenter's agent process; only the
ranks are light (:mod:`tenter.rehearsal.rank`, started fresh: an agent warms only tenter's
bootstrap). This process drives it through the job directory alone, which a Slurm job's
nodes share with its login node, as a user there would (it signals no rank itself: they run
on the nodes; their agents relay its signal, :mod:`tenter.launch.diagnosis.rank_signals`).

1. launch (``sbatch``) → every rank at its first step;
2. one rank killed (``tenter fault kill --rank``: its agent SIGKILLs it) → every rank
   stepping again (the agents' in-round restart, through the first node's store);
3. steady state: the launcher (this process's ``wait`` thread and the ``squeue`` calls it
   makes) as a share of a core, the job directory's growth, a live-view refresh, a ledger and
   straggler pass, ``tenter status`` (``squeue`` again);
4. one rank SIGSTOPped (through its agent) → the hang report naming it (the job's own hang
   watch, in its first node's agent), which stops the job → its result (HANG, through
   ``wait``).

What does not apply is in :data:`SKIPPED`, with why.
"""

from __future__ import annotations

import functools
import resource
import threading
import time
from collections.abc import Callable

from tenter.contract.plan import Plan
from tenter.errors import ExitCode
from tenter.launch.backends.slurm.backend import SlurmBackend
from tenter.launch.diagnosis.rank_signals import RelayedSignals
from tenter.rehearsal.drive import (
    STEADY_S,
    Figures,
    RehearsalFailed,
    _stepping,
    _thread_cpu_s,
    _wait,
    kill_a_rank,
    name_a_hang,
    steady_state,
    tenter_status,
)

FINISHED = "finished"
SKIPPED = {
    "host_lost": "Slurm ends the job when a node dies (its srun step's --kill-on-bad-exit): "
    "no host goes on without it",
    "store_requests": "the agents are processes of their own: the count wraps a pack's",
}
"""The local rehearsal's phases and figures this one has not, and why."""


class SlurmRehearsal:
    def __init__(self, plan: Plan, bound_s: float, steady_s: float = STEADY_S) -> None:
        """``steady_s``: how long the steady state is measured (0: not at all)."""
        self.plan, self.bound_s, self.steady_s = plan, bound_s, steady_s
        self.backend = SlurmBackend()
        ranks = len(plan.hosts) * plan.procs_per_host
        self.figures = Figures(len(plan.hosts), ranks, skipped=dict(SKIPPED))
        self._stop = threading.Event()
        self._waiter: threading.Thread | None = None

    def run(self) -> Figures:
        try:
            self._launch()
            self.figures.seconds["kill"] = kill_a_rank(self.plan, self.figures.ranks, self.bound_s)
            if self.steady_s > 0:
                self._steady_state()
            self._hang()
        finally:
            self._stop.set()  # scancels a job a failed phase left running, and waits for it
            if self._waiter is not None:
                self._waiter.join()
        return self.figures

    def _launch(self) -> None:
        started = time.monotonic()
        handle = self.backend.submit(self.plan)

        def follow() -> None:
            self.figures.result = self.backend.wait(handle, self._stop)

        self._waiter = threading.Thread(target=follow, name="tenter-slurm-wait", daemon=True)
        self._waiter.start()
        stepping = _stepping(self.plan, self.figures.ranks, set())
        _wait("every rank at its first step", self._while_queued(stepping), self.bound_s)
        self.figures.seconds["first_step"] = time.monotonic() - started

    def _while_queued(self, done: Callable[[], bool]) -> Callable[[], bool]:
        """``done``, or RehearsalFailed once the job left Slurm's queue (no use waiting)."""

        def check() -> bool:
            if done():
                return True
            if self._waiter is not None and not self._waiter.is_alive():
                result = self.figures.result
                summary = result.summary if result is not None else "no result"
                raise RehearsalFailed(f"the Slurm job ended before its ranks stepped: {summary}")
            return False

        return check

    def _steady_state(self) -> None:
        assert self._waiter is not None and self._waiter.native_id is not None
        thread_cpu = functools.partial(_thread_cpu_s, self._waiter.native_id)

        def launcher_cpu_s() -> float:
            """The wait thread's and the squeue calls' it made (the only children reaped)."""
            children = resource.getrusage(resource.RUSAGE_CHILDREN)
            return thread_cpu() + children.ru_utime + children.ru_stime

        status = functools.partial(tenter_status, self.plan, self.bound_s)
        figures = steady_state(self.plan, launcher_cpu_s, status, self.steady_s)
        self.figures.steady.update(figures)

    def _hang(self) -> None:
        """The hang report, then the job's end, which it causes (``on_hang: stop``)."""
        assert self._waiter is not None
        relayed = RelayedSignals(self.plan.job_dir, {h.name: h.dir for h in self.plan.hosts})
        seconds, report = name_a_hang(self.plan, relayed, self.bound_s)
        self.figures.seconds["hang_named"], self.figures.hang_report = seconds, report
        started = time.monotonic()
        self._waiter.join(timeout=self.bound_s)
        if self._waiter.is_alive():
            raise RehearsalFailed(f"the Slurm job did not end within {self.bound_s:g} s")
        result = self.figures.result
        if result is None or result.exit_code != ExitCode.HANG:
            summary = result.summary if result is not None else "no result"
            raise RehearsalFailed(f"the Slurm job did not end as a hang: {summary}")
        self.figures.seconds[FINISHED] = time.monotonic() - started
