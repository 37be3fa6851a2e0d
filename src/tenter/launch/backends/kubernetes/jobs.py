"""A Kubernetes job seen from outside: its result at its end (from its terminal state and its
pods), its status now, finding one by name."""

from __future__ import annotations

from tenter.errors import ExitCode, JobNotFoundError
from tenter.jobdir.results import Failure, JobResult
from tenter.launch.api import JobStatus
from tenter.launch.backends.kubernetes.cluster import Clients, JobState, PodState, job_state
from tenter.launch.backends.kubernetes.kinds import KINDS
from tenter.launch.backends.kubernetes.pods import list_pods
from tenter.launch.backends.kubernetes.request import KubernetesRequest


def job_result(
    request: KubernetesRequest,
    state: JobState,
    pods: list[PodState],
    duration: float,
    interrupted: bool,
) -> JobResult:
    """The job's result from its terminal ``state`` and its pods: the earliest failing
    container is the root cause; exit code 0, 1 (failed), 124 (past ``max_run``) or 130
    (deleted on request)."""
    failures = [
        Failure(
            host=p.name,
            rank=-1,
            local_rank=-1,
            pid=None,
            exit_code=p.exit_code,
            timestamp=p.finished or 0.0,
            message=p.reason,
        )
        for p in pods
        if p.exit_code
    ]
    root = min(failures, key=lambda f: f.timestamp) if failures else None
    if state.ok:
        code = ExitCode.OK
    elif interrupted:
        code = ExitCode.INTERRUPTED
    elif state.reason == "DeadlineExceeded":
        code = ExitCode.MAX_RUN
    else:
        code = ExitCode.JOB_FAILED
    what = f"{request.kind} {request.namespace}/{request.job_id}"
    if state.ok:
        summary = f"job {what} SUCCEEDED after {duration:.1f} s"
    else:
        verb = "INTERRUPTED (deleted)" if interrupted else "FAILED"
        summary = f"job {what} {verb} after {duration:.1f} s"
        detail = ": ".join(x for x in (state.reason, state.message) if x)
        if detail:
            summary += f"\n{detail}"
        if root is not None:
            summary += (
                f"\nroot cause: pod {root.host}: exit code {root.exit_code} {root.message}".rstrip()
                + f"\n  logs: kubectl logs -n {request.namespace} {root.host} "
                f"-c {KINDS[request.kind].log_container}"
            )
    return JobResult(
        job_id=request.job_id,
        job_dir=request.job_dir,
        exit_code=code,
        duration_s=duration,
        hosts=request.hosts,
        procs_per_host=request.procs_per_host,
        failures=failures,
        interrupted=interrupted,
        summary=summary,
    )


def job_status(clients: Clients, kind: str, namespace: str, name: str) -> JobStatus:
    """``tenter status`` of the job: its state and each pod's phase, restarts and exit."""
    info = KINDS[kind]
    try:
        obj = clients.custom.get_namespaced_custom_object(
            info.group, info.version, namespace, info.plural, name
        )
    except Exception as e:
        if getattr(e, "status", None) == 404:
            return JobStatus(False, f"{kind} {namespace}/{name} no longer exists")
        raise
    state = job_state(obj)
    detail = ": ".join(x for x in (state.reason, state.message) if x)
    lines = [
        f"{state.state.upper()} ({kind} {namespace}/{name}" + (f": {detail})" if detail else ")")
    ]
    for pod in list_pods(clients, kind, namespace, name):
        ended = f"  exit code {pod.exit_code} {pod.reason}".rstrip() if pod.exit_code else ""
        lines.append(f"  pod {pod.name}  {pod.phase}  restarts {pod.restarts}{ended}")
    return JobStatus(not state.finished, "\n".join(lines))


def find_job(clients: Clients, name: str, namespace: str) -> str:
    """The scheduler id (``namespace/kind/name``) of job ``name``, of any kind tenter
    renders."""
    for kind in KINDS.values():
        try:
            clients.custom.get_namespaced_custom_object(
                kind.group, kind.version, namespace, kind.plural, name
            )
        except Exception as e:
            if getattr(e, "status", None) == 404:
                continue
            raise
        return f"{namespace}/{kind.kind}/{name}"
    raise JobNotFoundError(
        "JOB",
        f"no {', '.join(KINDS)} named '{name}' in namespace '{namespace}'",
        "give the job's name as `kubectl get pytorchjobs,mpijobs,trainjobs -A` lists it, "
        "and its --namespace",
    )
