"""The cluster as the kubernetes backend sees it: the client calls it makes (protocols that
the official client and the tests' fakes both satisfy), connecting, reading pod and job
states, and turning a refused request into a user-facing error."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from tenter.errors import BackendRefusedError, MissingToolError
from tenter.launch.backends.kubernetes.kinds import JobKind
from tenter.launch.backends.kubernetes.manifests import Manifest
from tenter.spec import Problem, SpecError

if TYPE_CHECKING:
    import tenacity

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

    def list_namespaced_custom_object(
        self, group: str, version: str, namespace: str, plural: str, **kwargs: Any
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

    def list_namespaced_pod(self, namespace: str, **kwargs: Any) -> Any: ...

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
                    f"the kubeconfig has no usable {where} ({e})",
                    "choose one with `kubectl config use-context NAME` or set kubernetes.context",
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
    return BackendRefusedError(
        "backend",
        f"the API server refused the {kind.kind}: {reason}",
        "correct what it names (`tenter plan --backend kubernetes` shows the manifest)",
    )


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


def _finished_at(text: str | None) -> float | None:
    return datetime.fromisoformat(text).timestamp() if text else None


def pod_states(pods: list[dict[str, Any]], container: str) -> list[PodState]:
    """Read pods (as the API server sends them: JSON objects) into PodStates, sorted by name."""
    states = []
    for pod in pods:
        status = pod.get("status") or {}
        restarts, exit_code, reason, finished = 0, None, "", None
        for c in status.get("containerStatuses") or []:
            if c.get("name") != container:
                continue
            restarts = c.get("restartCount") or 0
            ended = (c.get("state") or {}).get("terminated") or (c.get("lastState") or {}).get(
                "terminated"
            )
            if ended:
                exit_code, reason = ended.get("exitCode"), ended.get("reason") or ""
                finished = _finished_at(ended.get("finishedAt"))
        name = pod["metadata"]["name"]
        states.append(
            PodState(name, status.get("phase") or "Unknown", restarts, exit_code, reason, finished)
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


def is_transient(error: BaseException) -> bool:
    """An error worth asking again after: a status that says "not now", or no answer at all
    (the client's connection errors come from urllib3 and carry no status)."""
    status = getattr(error, "status", None)
    if status:
        return int(status) in TRANSIENT_STATUS
    return isinstance(error, OSError) or type(error).__module__.startswith("urllib3")


@dataclass
class Retrying:
    """Calls to the API server that ride out its transient errors (:func:`is_transient`), with
    exponential back-off, for up to ``RETRY_FOR_S``: tenacity's retry loop, with the first
    failure and the recovery reported through ``say``. (The client's own urllib3 retries
    cover connecting, not a 503 from a server behind a load balancer nor a watch cut in the
    middle of its stream, nor minutes.) ``clock`` and ``sleep`` are injected for tests."""

    say: Callable[[str], None]
    clock: Callable[[], float]
    sleep: Callable[[float], None]

    def call(self, what: str, fn: Callable[[], T]) -> T:
        import tenacity  # the kubernetes extra's, as the client is

        started = self.clock()

        def out_of_time(state: tenacity.RetryCallState) -> bool:
            return self.clock() - started > RETRY_FOR_S

        def first_failure(state: tenacity.RetryCallState) -> None:
            if state.attempt_number == 1 and state.outcome is not None:
                error = state.outcome.exception()
                self.say(
                    f"the API server did not answer {what} ({_describe(error)}); "
                    f"asking again for up to {RETRY_FOR_S:.0f} s"
                )

        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception(is_transient),
            wait=tenacity.wait_exponential(
                multiplier=FIRST_RETRY_S, min=FIRST_RETRY_S, max=MAX_RETRY_S
            ),
            stop=out_of_time,
            sleep=self.sleep,
            before_sleep=first_failure,
            reraise=True,
        )
        result = retrying(fn)
        if retrying.statistics.get("attempt_number", 1) > 1:
            self.say(f"the API server answers again ({what})")
        return result


def _describe(error: BaseException | None) -> str:
    status = getattr(error, "status", None)
    reason = getattr(error, "reason", None) or str(error) or type(error).__name__
    return f"{status} {reason}" if status else str(reason)
