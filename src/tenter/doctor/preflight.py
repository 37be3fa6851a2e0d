"""Preflight: the doctor's checks that can stop a job, run before ``tenter run`` starts it.

``tenter run`` calls :func:`preflight` with the plan it is about to execute; when
:attr:`PreflightReport.blocking` it prints :meth:`PreflightReport.render` and exits 2 without
starting anything. Only failures block; warnings are counted and never stop a run.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.console import Console

from tenter.contract.plan import Plan
from tenter.doctor.checks import CHECKS
from tenter.doctor.render import problems_table
from tenter.doctor.result import HostReport, Status
from tenter.doctor.runner import check_job
from tenter.spec import JobSpec

PREFLIGHT_CHECKS = tuple(c for c in CHECKS if c.preflight)


@dataclass(frozen=True)
class PreflightReport:
    reports: list[HostReport]

    @property
    def blocking(self) -> bool:
        """A hard requirement of the job fails on some host: do not start it."""
        return any(r.failed for r in self.reports)

    @property
    def warnings(self) -> int:
        return sum(len(r.warned) for r in self.reports)

    def render(self, console: Console) -> None:
        """The failing checks' table and what to do, or a one-line all-clear."""
        if self.blocking:
            console.print(
                problems_table(self.reports, (Status.FAIL,), "preflight: the job cannot run here")
            )
            console.print(
                "[bold red]preflight failed:[/] nothing was started. Fix the checks above, "
                "or rerun with --skip-preflight to start anyway."
            )
        elif self.warnings:
            console.print(
                f"[yellow]preflight: {self.warnings} warning(s)[/] (`tenter doctor SPEC` shows "
                "them); starting the job."
            )


def preflight(spec: JobSpec, plan: Plan) -> PreflightReport:
    """Run the preflight checks on every host of ``plan`` (the plan ``tenter run`` executes)."""
    return PreflightReport(check_job(spec, plan, PREFLIGHT_CHECKS))


SKIP_WARNING = (
    "[bold yellow]warning:[/] --skip-preflight: starting without checking this host "
    "(`tenter doctor SPEC` runs the checks)."
)
"""What ``tenter run --skip-preflight`` prints before starting."""
