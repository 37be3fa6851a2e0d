"""The Kubernetes backend: a job as a Kubeflow PyTorchJob, MPIJob or TrainJob.

``dryrun`` renders the job object (:mod:`tenter.launch.k8s_manifests`), checks it against the
operators' admission rules (:mod:`tenter.launch.k8s_rules`) and returns a
:class:`KubernetesRequest`, whose ``materialize()`` is the exact object submitted and whose
``str`` is its YAML (what ``tenter plan --backend kubernetes`` prints). ``submit`` creates it
through the official ``kubernetes`` client (``pip install 'tenter[kubernetes]'``; imported only
here, and only when no client is injected), follows the pods' phases and restarts, streams the
output of the pods that hold the selected ranks, and returns the job's terminal state as a
:class:`~tenter.launch.api.JobResult`: exit code 0, the failing container's exit code (the
earliest to fail), 124 past ``max_run``, or 130 when interrupted (the job is then deleted).

The submission path is deliberately thin and is tested against fakes of the client's
``CustomObjectsApi`` and ``CoreV1Api``; it is not exercised against a live API server in CI.
"""

from __future__ import annotations

import copy
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import yaml

from tenter.launch import k8s_manifests, k8s_rules
from tenter.launch.api import Failure, JobResult
from tenter.launch.k8s_manifests import KINDS, JobKind, Manifest
from tenter.spec import JobSpec, Problem, SpecError, lookup, processes_per_host

POLL_S = 2.0
"""How often the job and its pods are read while it runs."""
LOG_JOIN_S = 10.0
"""How long the log streams get to deliver their last lines once the job ended."""
TERMINAL = {"Succeeded": True, "Complete": True, "Failed": False}
"""Terminal condition types (Training and MPI operators: Succeeded; Trainer v2: Complete)."""
EXIT_DEADLINE = 124
EXIT_INTERRUPTED = 130


def to_yaml(objects: Iterable[Manifest]) -> str:
    # width: a long command stays on one line instead of YAML's folded continuation.
    return yaml.safe_dump_all(list(objects), sort_keys=False, width=10_000)


@dataclass(frozen=True)
class KubernetesRequest:
    """The exact objects ``submit`` creates; ``str()`` is their YAML."""

    job_id: str
    kind: str
    namespace: str
    context: str | None
    objects: list[Manifest]
    hosts: int
    procs_per_host: int
    log_pods: list[str] | None = None
    """Pods whose output the console shows (None: every pod of the job)."""
    backend: str = "kubernetes"

    def materialize(self) -> list[Manifest]:
        return copy.deepcopy(self.objects)

    def __str__(self) -> str:
        return to_yaml(self.objects)

    def to_json(self) -> str:
        return json.dumps(self.objects, indent=2)

    def write(self, folder: Path) -> list[Path]:
        """One ``<kind>-<name>.yaml`` per object in ``folder`` (for ``kubectl apply -f``)."""
        folder.mkdir(parents=True, exist_ok=True)
        paths = []
        for obj in self.objects:
            path = folder / f"{obj['kind'].lower()}-{obj['metadata']['name']}.yaml"
            path.write_text(to_yaml([obj]))
            paths.append(path)
        return paths


class CustomObjectsApi(Protocol):
    """The calls tenter makes on ``kubernetes.client.CustomObjectsApi``."""

    def create_namespaced_custom_object(
        self, group: str, version: str, namespace: str, plural: str, body: Manifest
    ) -> Any: ...

    def get_namespaced_custom_object(
        self, group: str, version: str, namespace: str, plural: str, name: str
    ) -> Any: ...

    def delete_namespaced_custom_object(
        self,
        group: str,
        version: str,
        namespace: str,
        plural: str,
        name: str,
        *,
        propagation_policy: str,
    ) -> Any: ...


class CoreV1Api(Protocol):
    """The calls tenter makes on ``kubernetes.client.CoreV1Api``."""

    def list_namespaced_pod(self, namespace: str, *, label_selector: str) -> Any: ...

    def read_namespaced_pod_log(
        self, name: str, namespace: str, *, container: str, follow: bool, _preload_content: bool
    ) -> Any: ...


@dataclass(frozen=True)
class Clients:
    custom: CustomObjectsApi
    core: CoreV1Api


def connect(context: str | None) -> Clients:
    """Clients for ``context`` of the kubeconfig (None: its current context)."""
    try:
        from kubernetes import client, config
    except ImportError:
        raise SpecError(
            [
                Problem(
                    "backend",
                    "kubernetes needs the official client: pip install 'tenter[kubernetes]'",
                )
            ]
        ) from None
    try:
        # KUBECONFIG read now, not when the client library was imported (its default).
        api = config.new_client_from_config(
            config_file=os.environ.get("KUBECONFIG"), context=context
        )
    except config.ConfigException as e:
        where = f"context '{context}'" if context else "current context"
        raise SpecError(
            [
                Problem(
                    "kubernetes.context",
                    f"the kubeconfig has no usable {where} ({e}); choose one with "
                    "`kubectl config use-context NAME` or set kubernetes.context",
                )
            ]
        ) from e
    return Clients(client.CustomObjectsApi(api), client.CoreV1Api(api))


def _api_error(kind: JobKind, namespace: str, error: Exception) -> SpecError | None:
    """A user-facing error for a refused create, or None to let it propagate."""
    status = getattr(error, "status", None)
    body = str(getattr(error, "body", "") or "")
    if status == 404 and "namespaces" in body:
        return SpecError(
            [
                Problem(
                    "kubernetes.namespace",
                    f"'{namespace}' does not exist; create it (kubectl create namespace "
                    f"{namespace}) or set kubernetes.namespace",
                )
            ]
        )
    if status == 404:
        return SpecError(
            [
                Problem(
                    "backend",
                    f"the cluster does not serve {kind.kind} ({kind.api_version}): {kind.install}",
                )
            ]
        )
    if status in (400, 403, 409, 422):
        reason = _server_message(body) or str(error)
        return SpecError([Problem("backend", f"the API server refused the {kind.kind}: {reason}")])
    return None


def _server_message(body: str) -> str:
    try:
        return str(json.loads(body).get("message", ""))
    except (ValueError, AttributeError):
        return body


@dataclass(frozen=True)
class PodState:
    name: str
    phase: str
    restarts: int
    exit_code: int | None = None
    """The log container's last termination exit code (None: it has not terminated)."""
    reason: str = ""
    finished: float | None = None


def pod_states(pod_list: Any, container: str) -> list[PodState]:
    """Read ``V1PodList`` into PodStates, sorted by name."""
    states = []
    for pod in pod_list.items:
        status = pod.status
        restarts, exit_code, reason, finished = 0, None, "", None
        for c in status.container_statuses or []:
            if c.name != container:
                continue
            restarts = c.restart_count or 0
            ended = (c.state and c.state.terminated) or (c.last_state and c.last_state.terminated)
            if ended is not None:
                exit_code, reason = ended.exit_code, ended.reason or ""
                finished = ended.finished_at.timestamp() if ended.finished_at else None
        states.append(
            PodState(
                pod.metadata.name, status.phase or "Unknown", restarts, exit_code, reason, finished
            )
        )
    return sorted(states, key=lambda s: s.name)


@dataclass(frozen=True)
class JobState:
    state: str
    """The latest true condition (Created, Running, Restarting, Succeeded, Complete, Failed...)."""
    reason: str = ""
    message: str = ""

    @property
    def finished(self) -> bool:
        return self.state in TERMINAL

    @property
    def ok(self) -> bool:
        return TERMINAL.get(self.state, False)


def job_state(obj: Manifest) -> JobState:
    """The state of a Kubeflow job object from its ``status.conditions``."""
    conditions = [
        c for c in obj.get("status", {}).get("conditions") or [] if c.get("status") == "True"
    ]
    terminal = [c for c in conditions if c.get("type") in TERMINAL]
    latest = (terminal or conditions or [{"type": "Pending"}])[-1]
    return JobState(
        latest.get("type", "Pending"), latest.get("reason", ""), latest.get("message", "")
    )


Printer = Callable[[str], None]


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _stdout(line: str) -> None:
    print(line, flush=True)


@dataclass
class KubernetesBackend:
    """``dryrun`` is pure; ``submit``/``status``/``cancel``/``logs`` talk to the cluster
    through ``clients`` (default: :func:`connect` to the request's kubeconfig context)."""

    clients: Clients | None = None
    poll_s: float = POLL_S
    out: Printer = _stdout
    err: Printer = _stderr
    clock: Callable[[], float] = time.monotonic
    name: str = field(default="kubernetes", init=False)

    def dryrun(self, spec: JobSpec, job_id: str) -> KubernetesRequest:
        obj = k8s_manifests.render(spec, job_id)
        problems = k8s_rules.problems(obj)
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
            log_pods=_log_pods(spec, kind, job_id, procs),
        )

    def _clients(self, context: str | None) -> Clients:
        if self.clients is None:
            self.clients = connect(context)
        return self.clients

    def submit(self, request: KubernetesRequest) -> JobResult:
        kind = KINDS[request.kind]
        clients = self._clients(request.context)
        start = self.clock()
        for obj in request.materialize():
            try:
                clients.custom.create_namespaced_custom_object(
                    kind.group, kind.version, request.namespace, kind.plural, obj
                )
            except Exception as e:
                error = _api_error(kind, request.namespace, e)
                if error is None:
                    raise
                raise error from e
        self.err(
            f"created {kind.kind} {request.namespace}/{request.job_id} "
            f"(kubectl get {kind.plural} -n {request.namespace} {request.job_id})"
        )
        try:
            state, pods = self._follow(clients, request)
        except KeyboardInterrupt:
            self.cancel(request.job_id, request.namespace, request.kind)
            return self._result(request, JobState("Failed", "Interrupted"), [], start, True)
        return self._result(request, state, pods, start, False)

    def _follow(
        self, clients: Clients, request: KubernetesRequest
    ) -> tuple[JobState, list[PodState]]:
        """Poll the job and its pods until the job ends: print phase changes and restarts,
        and start a log stream for each selected pod once its container has started."""
        kind = KINDS[request.kind]
        selector = k8s_manifests.pod_selector(request.kind, request.job_id)
        seen: dict[str, PodState] = {}
        streams: dict[str, threading.Thread] = {}
        while True:
            pods = pod_states(
                clients.core.list_namespaced_pod(request.namespace, label_selector=selector),
                kind.log_container,
            )
            for pod in pods:
                before = seen.get(pod.name)
                if before is None or before.phase != pod.phase:
                    self.err(f"pod {pod.name}: {pod.phase}")
                if before is not None and pod.restarts > before.restarts:
                    self.err(
                        f"pod {pod.name}: restarted ({pod.restarts}), last exit code "
                        f"{pod.exit_code} {pod.reason}".rstrip()
                    )
                seen[pod.name] = pod
                wanted = request.log_pods is None or pod.name in request.log_pods
                if wanted and pod.name not in streams and pod.phase != "Pending":
                    streams[pod.name] = self._stream(clients, request, pod.name)
            obj = clients.custom.get_namespaced_custom_object(
                kind.group, kind.version, request.namespace, kind.plural, request.job_id
            )
            state = job_state(obj)
            if state.finished:
                for thread in streams.values():
                    thread.join(LOG_JOIN_S)
                return state, pods
            time.sleep(self.poll_s)

    def _stream(self, clients: Clients, request: KubernetesRequest, pod: str) -> threading.Thread:
        container = KINDS[request.kind].log_container
        # MPI output already carries mpirun's [job,rank] tags; others get the pod's name.
        prefix = "" if request.kind == "MPIJob" else f"[{pod}] "

        def follow() -> None:
            response = clients.core.read_namespaced_pod_log(
                pod, request.namespace, container=container, follow=True, _preload_content=False
            )
            for raw in response:
                self.out(prefix + raw.decode(errors="replace").rstrip("\n"))

        thread = threading.Thread(target=follow, name=f"logs-{pod}", daemon=True)
        thread.start()
        return thread

    def _result(
        self,
        request: KubernetesRequest,
        state: JobState,
        pods: list[PodState],
        start: float,
        interrupted: bool,
    ) -> JobResult:
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
            code = 0
        elif interrupted:
            code = EXIT_INTERRUPTED
        elif state.reason == "DeadlineExceeded":
            code = EXIT_DEADLINE
        else:
            code = root.exit_code if root and root.exit_code else 1
        duration = self.clock() - start
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
                    f"\nroot cause: pod {root.host}: exit code {root.exit_code} "
                    f"{root.message}".rstrip()
                    + f"\n  logs: kubectl logs -n {request.namespace} {root.host} "
                    f"-c {KINDS[request.kind].log_container}"
                )
        return JobResult(
            job_id=request.job_id,
            job_dir="",
            exit_code=code,
            duration_s=duration,
            hosts=request.hosts,
            procs_per_host=request.procs_per_host,
            failures=failures,
            interrupted=interrupted,
            summary=summary,
        )

    def find(self, name: str, namespace: str, context: str | None = None) -> tuple[str, Manifest]:
        """The kind and object of job ``name`` (any of the kinds tenter renders)."""
        clients = self._clients(context)
        for kind in KINDS.values():
            try:
                obj = clients.custom.get_namespaced_custom_object(
                    kind.group, kind.version, namespace, kind.plural, name
                )
            except Exception as e:
                if getattr(e, "status", None) == 404:
                    continue
                raise
            return kind.kind, obj
        raise SpecError(
            [Problem("JOB", f"no {', '.join(KINDS)} named '{name}' in namespace '{namespace}'")]
        )

    def status(
        self, name: str, namespace: str, context: str | None = None
    ) -> tuple[JobState, list[PodState]]:
        kind, obj = self.find(name, namespace, context)
        pods = pod_states(
            self._clients(context).core.list_namespaced_pod(
                namespace, label_selector=k8s_manifests.pod_selector(kind, name)
            ),
            KINDS[kind].log_container,
        )
        return job_state(obj), pods

    def cancel(
        self, name: str, namespace: str, kind: str | None = None, context: str | None = None
    ) -> None:
        """Delete the job; Foreground propagation deletes its pods and services first."""
        kind = kind or self.find(name, namespace, context)[0]
        info = KINDS[kind]
        self._clients(context).custom.delete_namespaced_custom_object(
            info.group, info.version, namespace, info.plural, name, propagation_policy="Foreground"
        )
        self.err(f"deleted {kind} {namespace}/{name}")


def _log_pods(spec: JobSpec, kind: str, name: str, procs: int) -> list[str] | None:
    """The pods holding ``logs.ranks`` (host i holds ranks i*procs...), or None for all."""
    if kind == "MPIJob":
        return [f"{name}-launcher"]  # mpirun gathers every rank's output there
    if spec.logs.ranks is None or kind == "TrainJob":
        return None  # JobSet's pod names end in a random suffix: follow them all
    hosts = k8s_manifests.pytorch_hosts(spec, name)
    return sorted({hosts[r // procs] for r in spec.logs.ranks})


def create_backend() -> KubernetesBackend:
    return KubernetesBackend()
