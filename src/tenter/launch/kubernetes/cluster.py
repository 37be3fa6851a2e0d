"""The cluster as the kubernetes backend sees it: the client calls it makes (protocols that
the official client and the tests' fakes both satisfy), connecting, reading pod and job
states, and turning a refused request into a user-facing error."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from tenter.errors import BackendRefusedError, MissingToolError
from tenter.launch.kubernetes.manifests import JobKind, Manifest
from tenter.spec import Problem, SpecError

TRANSIENT_STATUS = {429, 500, 502, 503, 504}
"""API answers that say "not now": throttled, or the server (or a proxy) unavailable."""
RETRY_FOR_S = 120.0
"""How long the API server may fail to answer while a job is followed (an upgrade, a
failover) before tenter gives up following it; the job itself runs on meanwhile."""
FIRST_RETRY_S, MAX_RETRY_S = 0.5, 8.0
T = TypeVar("T")

TERMINAL = {"Succeeded": True, "Complete": True, "Failed": False}
"""Terminal condition types (Training and MPI operators: Succeeded; Trainer v2: Complete)."""


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
        raise MissingToolError(
            "backend",
            "kubernetes needs the official Python client",
            "pip install 'tenter[kubernetes]'",
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


def refusal(kind: JobKind, namespace: str, error: Exception) -> BackendRefusedError:
    """What the user reads when the API server did not take the job (or could not be asked)."""
    status = getattr(error, "status", None)
    body = str(getattr(error, "body", "") or "")
    if status == 404 and "namespaces" in body:
        return BackendRefusedError(
            "kubernetes.namespace",
            f"'{namespace}' does not exist",
            f"create it (kubectl create namespace {namespace}) or set kubernetes.namespace",
        )
    if status == 404:
        return BackendRefusedError(
            "backend", f"the cluster does not serve {kind.kind} ({kind.api_version})", kind.install
        )
    reason = _server_message(body) or str(error) or type(error).__name__
    return BackendRefusedError("backend", f"the API server refused the {kind.kind}: {reason}")


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


def is_transient(error: Exception) -> bool:
    """An error worth asking again after: a status that says "not now", or no answer at all
    (the client's connection errors come from urllib3 and carry no status)."""
    status = getattr(error, "status", None)
    if status:
        return int(status) in TRANSIENT_STATUS
    return isinstance(error, OSError) or type(error).__module__.startswith("urllib3")


@dataclass
class Retrying:
    """Calls to the API server that ride out its transient errors, with exponential back-off,
    for up to ``RETRY_FOR_S``; the first failure and the recovery are reported through ``say``.
    (Written here rather than with the client's own urllib3 retries, which retry connecting but
    not a 503 from a server behind a load balancer, nor across minutes.)"""

    say: Callable[[str], None]
    clock: Callable[[], float]
    sleep: Callable[[float], None]

    def call(self, what: str, fn: Callable[[], T]) -> T:
        failing_since: float | None = None
        delay = FIRST_RETRY_S
        while True:
            try:
                result = fn()
            except Exception as e:
                if not is_transient(e):
                    raise
                now = self.clock()
                if failing_since is None:
                    failing_since = now
                    self.say(
                        f"the API server did not answer {what} ({_describe(e)}); "
                        f"asking again for up to {RETRY_FOR_S:.0f} s"
                    )
                elif now - failing_since > RETRY_FOR_S:
                    raise
                self.sleep(delay)
                delay = min(delay * 2, MAX_RETRY_S)
                continue
            if failing_since is not None:
                self.say(f"the API server answers again ({what})")
            return result


def _describe(error: Exception) -> str:
    status = getattr(error, "status", None)
    reason = getattr(error, "reason", None) or str(error) or type(error).__name__
    return f"{status} {reason}" if status else str(reason)
