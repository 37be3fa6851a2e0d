"""A Kubernetes job's pods: listing them, saying what changed, which hold which ranks, and
streaming their output (:class:`PodLogs`)."""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Callable
from typing import Any

from tenter.launch.backends.kubernetes import manifests
from tenter.launch.backends.kubernetes.cluster import Clients, PodState, is_transient, pod_states
from tenter.launch.backends.kubernetes.follow import ListCall
from tenter.launch.backends.kubernetes.kinds import KINDS
from tenter.launch.backends.kubernetes.request import KubernetesRequest
from tenter.spec import JobSpec

LOG_JOIN_S = 10.0
"""How long the log streams get to deliver their last lines once the job ended."""


def pod_list_call(clients: Clients, kind: str, namespace: str, name: str) -> ListCall:
    return functools.partial(
        clients.core.list_namespaced_pod,
        namespace,
        label_selector=manifests.pod_selector(kind, name),
    )


def list_pods(clients: Clients, kind: str, namespace: str, name: str) -> list[PodState]:
    response = pod_list_call(clients, kind, namespace, name)(_preload_content=False)
    items = json.loads(response.data).get("items") or []
    return pod_states(items, KINDS[kind].log_container)


def pod_changes(pods: list[PodState], known: dict[str, PodState]) -> list[str]:
    """What changed since ``known`` (which then holds ``pods``): a pod's phase, a restart of
    its container."""
    lines = []
    for pod in pods:
        before = known.get(pod.name)
        if before is None or before.phase != pod.phase:
            lines.append(f"pod {pod.name}: {pod.phase}")
        if before is not None and pod.restarts > before.restarts:
            lines.append(
                f"pod {pod.name}: restarted ({pod.restarts}), last exit code "
                f"{pod.exit_code} {pod.reason}".rstrip()
            )
        known[pod.name] = pod
    return lines


class PodLogs:
    """Streams the output of the job's pods (those in ``pods``; None: all): one stream per
    container run, so a restarted container's output is followed too. ``stop()`` reads every
    selected pod once more, so no line of a pod that ended between two polls is lost."""

    def __init__(
        self,
        clients: Callable[[], Clients],
        request: KubernetesRequest,
        pods: list[str] | None,
        tag: bool,
        follow: bool,
        poll_s: float,
        out: Callable[[str], None],
    ) -> None:
        self._clients, self._request, self._pods, self._tag = clients, request, pods, tag
        self._follow, self._poll_s, self._out = follow, poll_s, out
        self._streams: dict[tuple[str, int], threading.Thread] = {}
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tenter-pod-logs", daemon=True)

    def start(self) -> PodLogs:
        if self._follow:
            self._thread.start()
        return self

    def stop(self) -> None:
        self._done.set()
        if self._thread.is_alive():
            self._thread.join()
        self._poll()
        for thread in self._streams.values():
            thread.join(LOG_JOIN_S)

    def _run(self) -> None:
        while not self._done.wait(self._poll_s):
            self._poll()

    def _poll(self) -> None:
        r = self._request
        clients = self._clients()
        try:
            pods = list_pods(clients, r.kind, r.namespace, r.job_id)
        except Exception as e:
            if is_transient(e):
                return  # the next poll asks again (wait reports the outage)
            raise
        for pod in pods:
            wanted = self._pods is None or pod.name in self._pods
            key = (pod.name, pod.restarts)
            if wanted and key not in self._streams and pod.phase != "Pending":
                self._streams[key] = self._stream(clients, pod.name)

    def _stream(self, clients: Clients, pod: str) -> threading.Thread:
        r = self._request
        container = KINDS[r.kind].log_container
        # MPI output already carries mpirun's [job,rank] tags; others get the pod's name.
        prefix = f"[{pod}] " if self._tag and r.kind != "MPIJob" else ""

        def follow() -> None:
            response: Any = clients.core.read_namespaced_pod_log(
                pod, r.namespace, container=container, follow=True, _preload_content=False
            )
            for raw in response:
                self._out(prefix + raw.decode(errors="replace").rstrip("\n"))

        thread = threading.Thread(target=follow, name=f"logs-{pod}", daemon=True)
        thread.start()
        return thread


def log_pods(spec: JobSpec, kind: str, name: str, procs: int) -> list[str] | None:
    """The pods holding ``logs.ranks`` (host i holds ranks i*procs...), or None for all."""
    if kind == "MPIJob":
        return [f"{name}-launcher"]  # mpirun gathers every rank's output there
    if spec.logs.ranks is None or kind == "TrainJob":
        return None  # JobSet's pod names end in a random suffix: follow them all
    hosts = manifests.pytorch_hosts(spec, name)
    return sorted({hosts[r // procs] for r in spec.logs.ranks})


def pods_of_ranks(request: KubernetesRequest, ranks: list[int]) -> list[str] | None:
    """``tenter logs --ranks``: the PyTorchJob pods holding ``ranks``; every pod otherwise."""
    names = request.rank_pods
    if names is None:
        return request.log_pods
    return sorted(
        {
            names[r // request.procs_per_host]
            for r in ranks
            if r // request.procs_per_host < len(names)
        }
    )
