"""The Kubernetes backend: a job as a Kubeflow PyTorchJob, MPIJob or TrainJob.

``dryrun`` renders the job object (:mod:`~tenter.launch.backends.kubernetes.manifests`), checks it
against the operators' admission rules (:mod:`~tenter.launch.backends.kubernetes.rules`) and
returns a
:class:`~tenter.launch.backends.kubernetes.request.KubernetesRequest`, whose ``materialize()`` is
the exact object submitted and whose ``str`` is its YAML (what ``tenter plan --backend kubernetes``
prints). ``submit`` creates it through the official ``kubernetes`` client (``pip install
'tenter[kubernetes]'``; imported only here, and only when no client is injected) and keeps the
request and the job's handle in a job directory on this machine, so that ``tenter
status|logs|cancel JOB`` reach it like any other job. ``wait`` follows the job and its pods
by watch (:mod:`~tenter.launch.backends.kubernetes.follow`), reports the pods' phases and restarts,
and returns the job's terminal state: exit code 0, 1 when it failed (the earliest
failing container is the root cause), 124 past ``max_run``, 130 when cancelled (the job is then
deleted). ``logs`` streams the pods that hold the selected ranks, again after a container
restarts.

The submission path is deliberately thin and is tested against fakes of the client's
``CustomObjectsApi`` and ``CoreV1Api``, and the watch through the real client against a fake
API server over HTTP; it is not exercised against a live API server in CI.
"""

from __future__ import annotations

import functools
import queue
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tenter.contract.planner import jobs_root
from tenter.errors import BackendRefusedError
from tenter.jobdir import layout
from tenter.jobdir.handle import JobHandle
from tenter.jobdir.lookup import tenter_home
from tenter.jobdir.results import JobResult, write_result
from tenter.launch.api import JobStatus, scheduler_preempts
from tenter.launch.backends.kubernetes import manifests, rules
from tenter.launch.backends.kubernetes.cluster import (
    RETRY_FOR_S,
    Clients,
    JobState,
    PodState,
    Retrying,
    connect,
    is_transient,
    job_state,
    pod_states,
    refusal,
)
from tenter.launch.backends.kubernetes.follow import Follower, Seen
from tenter.launch.backends.kubernetes.jobs import find_job, job_result, job_status
from tenter.launch.backends.kubernetes.kinds import KINDS
from tenter.launch.backends.kubernetes.pods import (
    PodLogs,
    log_pods,
    pod_changes,
    pod_list_call,
    pods_of_ranks,
)
from tenter.launch.backends.kubernetes.request import KubernetesRequest
from tenter.spec import JobSpec, SpecError, lookup, processes_per_host

POLL_S = 2.0
"""How often the pods are listed for their logs (a new pod, a restarted container)."""
STOP_CHECK_S = 0.25
"""How soon a stop request (Ctrl-C) is seen while the job is followed."""

Printer = Callable[[str], None]


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _stdout(line: str) -> None:
    print(line, flush=True)


def read_request(handle: JobHandle) -> KubernetesRequest:
    return KubernetesRequest.from_record((Path(handle.job_dir) / layout.PLAN_FILE).read_text())


@dataclass
class KubernetesBackend:
    """``dryrun`` is pure; the other verbs talk to the cluster through ``clients`` (default:
    :func:`~tenter.launch.backends.kubernetes.cluster.connect` to the request's kubeconfig
    context)."""

    clients: Clients | None = None
    poll_s: float = POLL_S
    out: Printer = _stdout
    err: Printer = _stderr
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    name: str = field(default="kubernetes", init=False)
    reports_progress: bool = field(default=False, init=False)
    """Ranks write their progress inside the pods: no live view or metrics from here."""

    def dryrun(self, spec: JobSpec, job_id: str) -> KubernetesRequest:
        if spec.fault_tolerance is not None:
            # A replica group must restart alone while the others run: one PyTorchJob per
            # group, plus the lighthouse as a Deployment and Service. Not rendered yet.
            raise BackendRefusedError(
                "fault_tolerance",
                "kubernetes: replica groups (one job per group, and torchft's lighthouse as a "
                "service) are not rendered yet",
                "run the job with backend local or slurm, or without fault_tolerance",
            )
        obj = manifests.render(spec, job_id)
        problems = rules.problems(obj)
        if problems:
            raise SpecError(problems)
        itype = lookup(spec.instance_type)
        assert itype is not None, "render rejects unknown instance types"
        kind = obj["kind"]
        procs = processes_per_host(spec, itype)
        return KubernetesRequest(
            job_id=job_id,
            kind=kind,
            namespace=spec.kubernetes.namespace,
            context=spec.kubernetes.context,
            objects=[obj],
            hosts=spec.instance_count,
            procs_per_host=procs,
            job_dir=str(jobs_root(spec, tenter_home()) / job_id),
            log_pods=log_pods(spec, kind, job_id, procs),
            rank_pods=manifests.pytorch_hosts(spec, job_id) if kind == "PyTorchJob" else None,
        )

    def _clients(self, context: str | None) -> Clients:
        if self.clients is None:
            self.clients = connect(context)
        return self.clients

    def submit(self, request: KubernetesRequest, *, detach: bool = False) -> JobHandle:
        """Create the job's objects (a Kubernetes job outlives ``tenter run`` anyway). If any
        create fails, the objects already created are deleted: nothing is left running."""
        kind = KINDS[request.kind]
        clients = self._clients(request.context)
        created: list[str] = []
        try:
            for obj in request.materialize():
                clients.custom.create_namespaced_custom_object(
                    kind.group, kind.version, request.namespace, kind.plural, obj
                )
                created.append(obj["metadata"]["name"])
        except Exception as e:
            for name in created:
                self._delete(clients, request.kind, request.namespace, name)
            raise refusal(kind, request.namespace, e) from e
        job_dir = Path(request.job_dir)
        job_dir.mkdir(parents=True)
        layout.write_atomic(job_dir / layout.PLAN_FILE, request.record())
        handle = JobHandle(
            self.name,
            request.job_id,
            request.job_dir,
            f"{request.namespace}/{request.kind}/{request.job_id}",
            {"context": request.context or "", "submitted": str(time.time())},
        )
        handle.write()
        self.err(
            f"created {kind.kind} {request.namespace}/{request.job_id} "
            f"(kubectl get {kind.plural} -n {request.namespace} {request.job_id})"
        )
        return handle

    def wait(self, handle: JobHandle, stop: threading.Event) -> JobResult:
        """Poll the job and its pods until the job ends, printing phase changes and restarts;
        ``stop`` deletes the job. The API server's transient errors are asked through (see
        :class:`~tenter.launch.backends.kubernetes.cluster.Retrying`); past its window, the job is
        left running and the error says how to reach it."""
        request = read_request(handle)
        clients = self._clients(request.context)
        retrying = Retrying(self.err, self.clock, self.sleep)
        try:
            result = self._follow(request, clients, stop, retrying)
        except Exception as e:
            if not is_transient(e):
                raise
            raise BackendRefusedError(
                "backend",
                f"lost the API server for over {RETRY_FOR_S:.0f} s ({e}) while following "
                f"{request.kind} {request.namespace}/{request.job_id}",
                f"it may still run: `tenter status {request.job_id}`, "
                f"`tenter cancel {request.job_id}`",
            ) from e
        write_result(Path(handle.job_dir), result)
        return result

    def _follow(
        self,
        request: KubernetesRequest,
        clients: Clients,
        stop: threading.Event,
        retrying: Retrying,
    ) -> JobResult:
        kind = KINDS[request.kind]
        start = self.clock()
        seen: queue.Queue[Seen | BaseException] = queue.Queue()
        job = functools.partial(
            clients.custom.list_namespaced_custom_object,
            *(kind.group, kind.version, request.namespace, kind.plural),
            field_selector=f"metadata.name={request.job_id}",
        )
        pods = pod_list_call(clients, request.kind, request.namespace, request.job_id)
        followers = [
            Follower(name, call, retrying, seen, self.err).start()
            for name, call in (("pods", pods), ("job", job))
        ]
        known: dict[str, PodState] = {}
        try:
            while True:
                if stop.is_set():
                    retrying.call(
                        "deleting the job",
                        lambda: self._delete(
                            clients, request.kind, request.namespace, request.job_id
                        ),
                    )
                    interrupted = JobState("Failed", "Interrupted")
                    return job_result(request, interrupted, [], self.clock() - start, True)
                try:
                    item = seen.get(timeout=STOP_CHECK_S)
                except queue.Empty:
                    continue
                if isinstance(item, BaseException):
                    raise item
                if item.collection == "pods":
                    self._report(pod_changes(pod_states([item.obj], kind.log_container), known))
                    continue
                state = (
                    JobState("Failed", "Deleted", "the job object was deleted")
                    if item.event == "DELETED"
                    else job_state(item.obj)
                )
                if state.finished:
                    # The pods as they are now: their last events may trail the job's.
                    final = retrying.call("listing the pods", followers[0].list)
                    states = pod_states(final, kind.log_container)
                    self._report(pod_changes(states, known))
                    return job_result(request, state, states, self.clock() - start, False)
        finally:
            for follower in followers:
                follower.stop()

    def logs(self, handle: JobHandle, ranks: list[int] | None, tag: bool, follow: bool) -> PodLogs:
        request = read_request(handle)
        pods = request.log_pods if ranks is None else pods_of_ranks(request, ranks)
        clients = functools.partial(self._clients, request.context)
        return PodLogs(clients, request, pods, tag, follow, self.poll_s, self.out)

    def status(self, handle: JobHandle) -> JobStatus:
        namespace, kind, name = handle.scheduler_id.split("/")
        clients = self._clients(handle.details.get("context") or None)
        return job_status(clients, kind, namespace, name)

    def _report(self, lines: list[str]) -> None:
        for line in lines:
            self.err(line)

    def cancel(self, handle: JobHandle) -> str:
        namespace, kind, name = handle.scheduler_id.split("/")
        clients = self._clients(handle.details.get("context") or None)
        self._delete(clients, kind, namespace, name)
        return f"deleted {kind} {namespace}/{name}"

    def preempt(self, handle: JobHandle) -> str:
        raise scheduler_preempts(self.name, handle.job_id)

    def _delete(self, clients: Clients, kind: str, namespace: str, name: str) -> None:
        """Delete the job; Foreground propagation deletes its pods and services first."""
        info = KINDS[kind]
        clients.custom.delete_namespaced_custom_object(
            info.group, info.version, namespace, info.plural, name, propagation_policy="Foreground"
        )
        self.err(f"deleted {kind} {namespace}/{name}")

    def find(self, name: str, namespace: str, context: str | None = None) -> JobHandle:
        """A handle for job ``name`` that tenter did not submit from this machine (any of the
        kinds tenter renders): what ``tenter k8s status|cancel`` use."""
        scheduler_id = find_job(self._clients(context), name, namespace)
        return JobHandle(self.name, name, "", scheduler_id, {"context": context or ""})
