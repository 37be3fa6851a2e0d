"""Running a job and following it to its end: the same on every backend.

:func:`run` is what ``tenter run`` and ``Estimator.fit`` do: the backend's ``submit``, then
:func:`follow`, which puts around the backend's ``wait`` what a person watching needs: the
ranks' output (``backend.logs``), the live per-rank table and the Prometheus endpoint
(:class:`~tenter.monitor.live.LiveView`, on backends whose ranks' progress reaches this
machine, refused with a clear message elsewhere), and Ctrl-C/SIGTERM, which cancel the job.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from tenter.contract.plan import read_plan
from tenter.errors import TenterError
from tenter.jobdir.handle import JobHandle
from tenter.jobdir.results import JobResult
from tenter.launch.api import Backend, Request, dryrun, get_backend
from tenter.launch.launcher.output import check_output_dir
from tenter.launch.shared.signals import stop_requests
from tenter.monitor.live import LiveView
from tenter.monitor.prometheus import check_metrics_dependency
from tenter.spec import JobSpec, SpecError
from tenter.spec.limits import port_problem
from tenter.spec.secrets import missing_secrets


@dataclass(frozen=True)
class Watch:
    """How ``tenter run`` shows a job while it runs (none of it changes what runs)."""

    live: bool | None = None
    """Draw the live per-rank table (None: when the console is a terminal)."""
    metrics_port: int | None = None
    """Serve Prometheus metrics on this port (0: any free one); None: no endpoint."""
    metrics_addr: str = "127.0.0.1"
    ranks: list[int] | None = None
    """Show only these ranks' output (None: every rank's); the spec's ``logs.ranks``."""
    tag: bool = True
    """Prefix every line with ``[host,rank]<stream>:``; the spec's ``logs.tag``."""

    @classmethod
    def of(cls, spec: JobSpec) -> Watch:
        """The console ``spec``'s ``logs`` field asks for."""
        return cls(ranks=spec.logs.ranks, tag=spec.logs.tag)


def check_watch(backend: Backend, watch: Watch) -> None:
    """Refuse what ``backend`` cannot show, before anything starts."""
    if backend.reports_progress:
        if watch.metrics_port is not None:
            problem = port_problem("--metrics-port", watch.metrics_port, zero_picks_one=True)
            if problem is not None:
                raise SpecError([problem])
            check_metrics_dependency()
        return
    for flag, asked in (("--live", watch.live), ("--metrics-port", watch.metrics_port is not None)):
        if asked:
            raise TenterError(
                flag,
                f"the {backend.name} backend's ranks report their progress where they run, "
                "not to this machine",
                "leave it out; follow the job with `tenter logs JOB --follow` and "
                "`tenter status JOB`",
            )


def _open_view(backend: Backend, request: Request, watch: Watch) -> LiveView | None:
    """The live view of ``request``'s job; its metrics port is bound here, before anything
    starts, so that a port in use is bad input rather than a failure after the launch."""
    if not backend.reports_progress or request.plan is None:
        return None
    try:
        return LiveView(
            request.plan,
            live=watch.live,
            metrics_port=watch.metrics_port,
            metrics_addr=watch.metrics_addr,
        )
    except OSError as e:
        raise TenterError(
            "--metrics-port",
            f"cannot serve metrics on {watch.metrics_addr}:{watch.metrics_port} ({e.strerror})",
            "choose a free port, or 0 for any free one",
        ) from e


def submit(
    request: Request, watch: Watch, *, detach: bool = False
) -> tuple[JobHandle, LiveView | None]:
    """Start ``request`` on its backend; returns at once."""
    backend = get_backend(request.backend)
    check_watch(backend, watch)
    if request.plan is not None:  # Kubernetes' secrets are the cluster's
        missing = missing_secrets(request.plan.secrets, os.environ)
        if missing:
            raise SpecError(missing)
    # Every backend keeps the job's directory here (Slurm's on the shared file system).
    check_output_dir(request.job_dir)
    if detach:
        if watch.live or watch.metrics_port is not None:
            raise TenterError(
                "--detach",
                "a detached job has no console to draw on or serve metrics from",
                "leave out --live and --metrics-port, or do not detach",
            )
        return backend.submit(request, detach=True), None
    view = _open_view(backend, request, watch)
    try:
        return backend.submit(request), view
    except BaseException:
        if view is not None:
            view.stop()
        raise


def follow(handle: JobHandle, watch: Watch, view: LiveView | None = None) -> JobResult:
    """Show the job's output (and its live view) until it ends; Ctrl-C or SIGTERM cancel it."""
    backend = get_backend(handle.backend)
    if view is None and backend.reports_progress and (watch.live or watch.metrics_port is not None):
        plan = read_plan(handle.job_dir)
        view = _open_view(backend, plan, watch)
    with stop_requests() as stop:
        # Before the tail: a live table redirects stdout, where the tail must print.
        if view is not None:
            view.start()
        tail = backend.logs(handle, watch.ranks, watch.tag, follow=True).start()
        try:
            return backend.wait(handle, stop)
        finally:
            tail.stop()
            if view is not None:  # after the tail: the last log lines print above the table
                view.stop()


def run_request(request: Request, watch: Watch | None = None) -> JobResult:
    """Run a request (a backend's dryrun) to its end; a failed job is a result, not an error."""
    watch = watch or Watch()
    handle, view = submit(request, watch)
    return follow(handle, watch, view)


def run(spec: JobSpec, job_id: str | None = None, watch: Watch | None = None) -> JobResult:
    """Run a validated spec on its backend to its end."""
    return run_request(dryrun(spec, job_id), watch or Watch.of(spec))
