"""The Kubernetes backend's verbs, against fakes of the official client's ``CustomObjectsApi``
and ``CoreV1Api`` (no API server can run here): what it sends, how it reads pod states, logs
and conditions, what it returns, and ``tenter status|logs|cancel`` on its jobs. Live
submission is not tested."""

from __future__ import annotations

import json
import os
import signal
import threading
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import (
    ApiClient,
    V1ContainerState,
    V1ContainerStateRunning,
    V1ContainerStateTerminated,
    V1ContainerStatus,
    V1ObjectMeta,
    V1Pod,
    V1PodStatus,
)
from kubernetes.client.rest import ApiException

from tenter import session
from tenter.cli.main import main
from tenter.errors import JobNotFoundError, TenterError
from tenter.jobdir.results import JobResult
from tenter.launch.api import get_backend
from tenter.launch.backends.kubernetes import KubernetesBackend
from tenter.launch.backends.kubernetes import backend as k8s_backend
from tenter.launch.backends.kubernetes.cluster import Clients, connect, job_state
from tenter.launch.backends.kubernetes.request import KubernetesRequest
from tenter.spec import SpecError
from tests.launch.kubernetes.k8s_specs import JOB_ID, MPI, p5_spec


def pod(name: str, phase: str, container: str, exit_code: int | None = None, at: int = 0) -> V1Pod:
    if exit_code is None:
        state = V1ContainerState(running=V1ContainerStateRunning())
    else:
        finished = datetime(2026, 11, 22, 3, 20, at, tzinfo=timezone.utc)
        reason = "Completed" if exit_code == 0 else "Error"
        state = V1ContainerState(
            terminated=V1ContainerStateTerminated(
                exit_code=exit_code, reason=reason, finished_at=finished
            )
        )
    status = V1ContainerStatus(
        name=container, image="i", image_id="", ready=False, restart_count=0, state=state
    )
    return V1Pod(
        metadata=V1ObjectMeta(name=name),
        status=V1PodStatus(phase=phase, container_statuses=[status]),
    )


def job(*conditions: tuple[str, str, str]) -> dict[str, Any]:
    return {
        "status": {
            "conditions": [
                {"type": t, "status": "True", "reason": r, "message": m} for t, r, m in conditions
            ]
        }
    }


END_OF_SCRIPT_S = 30.0
"""How long a fake watch stays open once its script is told (a real one: ``timeoutSeconds``)."""


class Response:
    """What the client's ``_preload_content=False`` calls return: urllib3's response."""

    def __init__(self, data: bytes = b"", events: Iterator[bytes] | None = None) -> None:
        self.data, self.status, self._events = data, 200, events or iter(())

    def stream(self, amt: Any = None, decode_content: bool = False) -> Iterator[bytes]:
        return self._events

    def close(self) -> None:
        pass

    def release_conn(self) -> None:
        pass


def as_json(obj: Any) -> dict[str, Any]:
    data: dict[str, Any] = ApiClient().sanitize_for_serialization(obj)
    return data


class Ticks:
    """The cluster's clock: the pods of tick ``i`` change before the job's state ``i`` (as on a
    cluster, where the job's conditions follow its pods)."""

    def __init__(self) -> None:
        self.pods = -1
        self.job = 0
        self.changed = threading.Condition()
        self.closed = threading.Event()

    def pods_at(self, tick: int) -> None:
        with self.changed:
            self.pods = max(self.pods, tick)
            self.changed.notify_all()

    def wait_for_pods(self, tick: int) -> None:
        with self.changed:
            self.changed.wait_for(lambda: self.pods >= tick or self.closed.is_set(), timeout=10)

    def hold(self) -> Iterator[bytes]:
        """The end of a watch's script: open until the test ends."""
        self.closed.wait(END_OF_SCRIPT_S)
        yield from ()


def _event(kind: str, obj: dict[str, Any]) -> bytes:
    return (json.dumps({"type": kind, "object": obj}) + "\n").encode()


class FakeCustom:
    """``CustomObjectsApi``: records calls; lists and watches the job through a script of its
    states (state ``i`` has resourceVersion ``i + 1``); ``get`` answers the latest state."""

    def __init__(self, states: list[dict[str, Any]], create_error: Exception | None = None):
        self.states = states
        self.create_error = create_error
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
        self.ticks = Ticks()

    def _state(self, index: int) -> dict[str, Any]:
        meta = {"name": JOB_ID, "resourceVersion": str(index + 1)}
        return {**self.states[index], "metadata": meta}

    def create_namespaced_custom_object(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append(("create", args, kwargs))
        if self.create_error:
            raise self.create_error
        return args[-1]

    def get_namespaced_custom_object(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append(("get", args, kwargs))
        if not self.states:
            raise ApiException(status=404, reason="Not Found")
        return self.states[min(self.ticks.job, len(self.states) - 1)]

    def list_namespaced_custom_object(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("watch"):
            self.calls.append(("watch", args, {"resource_version": kwargs["resource_version"]}))
            return Response(events=self._watch(int(kwargs["resource_version"])))
        self.calls.append(("list", args, {"field_selector": kwargs["field_selector"]}))
        self.ticks.wait_for_pods(0)
        items = [self._state(0)] if self.states else []
        body = {"metadata": {"resourceVersion": "1"}, "items": items}
        return Response(json.dumps(body).encode())

    def _watch(self, version: int) -> Iterator[bytes]:
        for index in range(version, len(self.states)):
            self.ticks.wait_for_pods(index)
            self.ticks.job = index
            yield _event("MODIFIED", self._state(index))
        yield from self.ticks.hold()

    def delete_namespaced_custom_object(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append(("delete", args, kwargs))


class FakeCore:
    """``CoreV1Api``: the pods of each tick of the cluster's clock (the last list staying),
    listed and watched (tick ``i`` has resourceVersion ``i + 1``); each pod's log as lines of
    bytes."""

    def __init__(self, pod_lists: list[list[V1Pod]], logs: dict[str, list[str]]):
        self.pod_lists = pod_lists
        self.logs = logs
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
        self.custom: FakeCustom | None = None

    def _pods(self, tick: int) -> list[dict[str, Any]]:
        tick = min(tick, len(self.pod_lists) - 1)
        pods = [as_json(p) for p in self.pod_lists[tick]]
        for p in pods:
            p["metadata"]["resourceVersion"] = str(tick + 1)
        return pods

    def list_namespaced_pod(self, *args: Any, **kwargs: Any) -> Any:
        assert self.custom is not None
        ticks = self.custom.ticks
        if kwargs.get("watch"):
            self.calls.append(("watch", args, {"resource_version": kwargs["resource_version"]}))
            return Response(events=self._watch(int(kwargs["resource_version"])))
        self.calls.append(("list", args, {"label_selector": kwargs["label_selector"]}))
        tick = max(ticks.pods, ticks.job, 0)
        ticks.pods_at(tick)
        body = {"metadata": {"resourceVersion": str(tick + 1)}, "items": self._pods(tick)}
        return Response(json.dumps(body).encode())

    def _watch(self, version: int) -> Iterator[bytes]:
        assert self.custom is not None
        for tick in range(version, len(self.pod_lists)):
            for obj in self._pods(tick):
                yield _event("MODIFIED", obj)
            self.custom.ticks.pods_at(tick)
        self.custom.ticks.pods_at(10**6)  # the last list stays
        yield from self.custom.ticks.hold()

    def read_namespaced_pod_log(self, *args: Any, **kwargs: Any) -> Iterator[bytes]:
        self.calls.append(("log", args, kwargs))
        return iter(f"{line}\n".encode() for line in self.logs.get(args[0], []))


def backend(custom: FakeCustom, core: FakeCore) -> tuple[KubernetesBackend, list[str], list[str]]:
    out: list[str] = []
    err: list[str] = []
    core.custom = custom
    b = KubernetesBackend(Clients(custom, core), poll_s=0, out=out.append, err=err.append)
    return b, out, err


def run(b: KubernetesBackend, request: KubernetesRequest, stop: bool = False) -> JobResult:
    """What ``tenter run`` does: submit, stream the logs, wait."""
    handle = b.submit(request)
    stream = b.logs(handle, None, True, follow=True).start()
    stopped = threading.Event()
    if stop:
        stopped.set()
    try:
        return b.wait(handle, stopped)
    finally:
        stream.stop()
        assert b.clients is not None
        b.clients.custom.ticks.closed.set()  # type: ignore[attr-defined]


MASTER, WORKER = f"{JOB_ID}-master-0", f"{JOB_ID}-worker-0"


def test_submit_creates_the_dryrun_object_and_returns_success() -> None:
    custom = FakeCustom(
        [
            job(("Created", "", "")),
            job(("Running", "", "")),
            job(("Succeeded", "PyTorchJobSucceeded", "")),
        ]
    )
    core = FakeCore(
        [
            [pod(MASTER, "Pending", "pytorch")],
            [pod(MASTER, "Running", "pytorch"), pod(WORKER, "Running", "pytorch")],
        ],
        {MASTER: ["step 1", "done"], WORKER: ["step 1"]},
    )
    b, out, err = backend(custom, core)
    request = b.dryrun(p5_spec(), JOB_ID)
    result = run(b, request)

    create = custom.calls[0]
    assert create == ("create", ("kubeflow.org", "v1", "ml", "pytorchjobs", request.objects[0]), {})
    assert (
        "list",
        ("ml",),
        {"label_selector": f"app.kubernetes.io/instance={JOB_ID}"},
    ) in core.calls
    assert (
        "log",
        (MASTER, "ml"),
        {"container": "pytorch", "follow": True, "_preload_content": False},
    ) in core.calls
    assert result.exit_code == 0 and result.ok
    assert result.summary.startswith(f"job PyTorchJob ml/{JOB_ID} SUCCEEDED after ")
    assert sorted(out) == [f"[{MASTER}] done", f"[{MASTER}] step 1", f"[{WORKER}] step 1"]
    assert err[:3] == [
        f"created PyTorchJob ml/{JOB_ID} (kubectl get pytorchjobs -n ml {JOB_ID})",
        f"pod {MASTER}: Pending",
        f"pod {MASTER}: Running",
    ]


def test_submit_returns_the_earliest_failing_container_as_root_cause() -> None:
    custom = FakeCustom(
        [
            job(("Running", "", "")),
            job(("Running", "", ""), ("Failed", "PyTorchJobFailed", "worker 0 failed")),
        ]
    )
    core = FakeCore(
        [
            [
                pod(MASTER, "Failed", "pytorch", exit_code=1, at=9),
                pod(WORKER, "Failed", "pytorch", exit_code=3, at=5),
            ]
        ],
        {},
    )
    b, _, _ = backend(custom, core)
    result = run(b, b.dryrun(p5_spec(), JOB_ID))
    assert result.exit_code == 1  # a failed job; the root cause's own code is in the summary
    assert result.summary.splitlines()[1:] == [
        "PyTorchJobFailed: worker 0 failed",
        f"root cause: pod {WORKER}: exit code 3 Error",
        f"  logs: kubectl logs -n ml {WORKER} -c pytorch",
    ]
    assert [(f.host, f.exit_code) for f in result.failures] == [(MASTER, 1), (WORKER, 3)]


def test_submit_returns_124_if_the_deadline_passed() -> None:
    custom = FakeCustom(
        [job(("Failed", "DeadlineExceeded", "Job was active longer than specified deadline"))]
    )
    b, _, _ = backend(custom, FakeCore([[]], {}))
    assert run(b, b.dryrun(p5_spec(), JOB_ID)).exit_code == 124


def test_submit_follows_only_the_mpi_launcher_and_keeps_mpiruns_tags() -> None:
    launcher = f"{JOB_ID}-launcher"
    custom = FakeCustom([job(("Running", "", "")), job(("Succeeded", "MPIJobSucceeded", ""))])
    core = FakeCore(
        [[pod(launcher, "Running", "launcher"), pod(WORKER, "Running", "worker")]],
        {launcher: ["[1,0]<stdout>:hello"], WORKER: ["sshd noise"]},
    )
    b, out, _ = backend(custom, core)
    result = run(b, b.dryrun(p5_spec(**MPI), JOB_ID))
    assert result.ok
    assert out == ["[1,0]<stdout>:hello"]
    assert custom.calls[0][1][:4] == ("kubeflow.org", "v2beta1", "ml", "mpijobs")


def test_submit_streams_only_the_pods_holding_the_selected_ranks() -> None:
    custom = FakeCustom([job(("Succeeded", "", ""))])
    core = FakeCore(
        [[pod(MASTER, "Running", "pytorch"), pod(WORKER, "Running", "pytorch")]],
        {MASTER: ["rank 0"], WORKER: ["rank 8"]},
    )
    b, out, _ = backend(custom, core)
    run(b, b.dryrun(p5_spec(logs={"ranks": [9]}), JOB_ID))
    assert out == [f"[{WORKER}] rank 8"]


def test_submit_reports_restarts_of_a_pod() -> None:
    restarted = pod(WORKER, "Running", "pytorch")
    restarted.status.container_statuses[0].restart_count = 1
    custom = FakeCustom([job(("Running", "", "")), job(("Succeeded", "", ""))])
    core = FakeCore([[pod(WORKER, "Running", "pytorch")], [restarted]], {})
    b, _, err = backend(custom, core)
    run(b, b.dryrun(p5_spec(), JOB_ID))
    assert f"pod {WORKER}: restarted (1), last exit code None" in err


@pytest.mark.parametrize(
    ("error", "problem"),
    [
        (
            ApiException(status=404, reason="Not Found"),
            "backend: the cluster does not serve MPIJob (kubeflow.org/v2beta1). Fix: install the "
            "MPI Operator: kubectl apply --server-side -f https://raw.githubusercontent.com/"
            "kubeflow/mpi-operator/v0.6.0/deploy/v2beta1/mpi-operator.yaml",
        ),
        (
            _ns := ApiException(status=404, reason="Not Found"),
            "kubernetes.namespace: 'ml' does not exist. Fix: create it (kubectl create namespace "
            "ml)",
        ),
        (
            _exists := ApiException(status=409, reason="Conflict"),
            f'backend: the API server refused the MPIJob: mpijobs "{JOB_ID}" already exists',
        ),
    ],
)
def test_submit_explains_a_refused_create(
    error: ApiException, problem: str, tenter_home: Path
) -> None:
    _ns.body = '{"message": "namespaces \\"ml\\" not found"}'
    _exists.body = f'{{"message": "mpijobs \\"{JOB_ID}\\" already exists"}}'
    b, _, _ = backend(FakeCustom([], create_error=error), FakeCore([[]], {}))
    with pytest.raises(TenterError) as info:
        b.submit(b.dryrun(p5_spec(**MPI), JOB_ID))
    assert problem in str(info.value)
    assert info.value.exit_code == 3  # the backend refused the job
    assert not (tenter_home / "jobs").exists()  # nothing was created: nothing to reach


def test_wait_deletes_the_job_if_stopped() -> None:
    custom = FakeCustom([job(("Running", "", ""))])
    b, _, _ = backend(custom, FakeCore([[]], {}))
    result = run(b, b.dryrun(p5_spec(), JOB_ID), stop=True)
    assert result.exit_code == 130 and result.interrupted
    # The followers' threads may still list or watch after it: the delete is the one.
    assert [c for c in custom.calls if c[0] == "delete"] == [
        (
            "delete",
            ("kubeflow.org", "v1", "ml", "pytorchjobs", JOB_ID),
            {"propagation_policy": "Foreground"},
        )
    ]


def test_a_restarted_container_s_output_is_followed_again() -> None:
    restarted = pod(MASTER, "Running", "pytorch")
    restarted.status.container_statuses[0].restart_count = 1
    custom = FakeCustom([job(("Running", "", "")), job(("Succeeded", "", ""))])
    b, out, _ = backend(
        custom, FakeCore([[pod(MASTER, "Running", "pytorch")], [restarted]], {MASTER: ["hi"]})
    )
    run(b, b.dryrun(p5_spec(), JOB_ID))
    assert out == [f"[{MASTER}] hi", f"[{MASTER}] hi"]  # the first run's and the restart's


def test_k8s_status_and_cancel_find_the_jobs_kind() -> None:
    class MpiOnly(FakeCustom):
        def get_namespaced_custom_object(self, *args: Any, **kwargs: Any) -> Any:
            if args[3] != "mpijobs":
                raise ApiException(status=404)
            return job(("Running", "MPIJobRunning", "running"))

    custom = MpiOnly([])
    b, _, _ = backend(custom, FakeCore([[pod(WORKER, "Running", "worker")]], {}))
    handle = b.find(JOB_ID, "ml")
    status = b.status(handle)
    assert status.running
    assert status.text.splitlines() == [
        f"RUNNING (MPIJob ml/{JOB_ID}: MPIJobRunning: running)",
        f"  pod {WORKER}  Running  restarts 0",
    ]
    assert b.cancel(handle) == f"deleted MPIJob ml/{JOB_ID}"
    assert custom.calls[-1][1][3] == "mpijobs"
    with pytest.raises(JobNotFoundError, match="no PyTorchJob, MPIJob, TrainJob named 'x'"):
        backend(FakeCustom([]), FakeCore([[]], {}))[0].find("x", "ml")


def test_status_logs_and_cancel_reach_a_kubernetes_job_by_its_id(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The CLI's verbs, with the client the kubeconfig would give replaced by the fakes."""
    custom = FakeCustom([job(("Running", "PyTorchJobRunning", ""))])
    core = FakeCore([[pod(MASTER, "Running", "pytorch")]], {MASTER: ["step 1"]})
    b, _, _ = backend(custom, core)
    handle = b.submit(b.dryrun(p5_spec(), JOB_ID))
    monkeypatch.setattr(k8s_backend, "connect", lambda context: Clients(custom, core))
    capsys.readouterr()

    assert main(["status", JOB_ID]) == 0
    out = capsys.readouterr().out
    assert f"job {JOB_ID}: RUNNING (PyTorchJob ml/{JOB_ID}: PyTorchJobRunning)" in out
    assert main(["logs", JOB_ID]) == 0
    assert capsys.readouterr().out == f"[{MASTER}] step 1\n"
    assert main(["cancel", JOB_ID]) == 0
    assert custom.calls[-1] == (
        "delete",
        ("kubeflow.org", "v1", "ml", "pytorchjobs", JOB_ID),
        {"propagation_policy": "Foreground"},
    )
    assert handle.scheduler_id == f"ml/PyTorchJob/{JOB_ID}"


def test_job_state_reads_the_last_true_condition() -> None:
    assert job_state({}).state == "Pending"
    state = job_state(job(("Created", "", ""), ("Running", "", ""), ("Complete", "Done", "ok")))
    assert (state.state, state.finished, state.ok) == ("Complete", True, True)
    assert not job_state(job(("Failed", "", ""))).ok


def test_connect_names_the_missing_context(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "kubeconfig"
    config.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: a\n"
        "contexts: [{name: a, context: {cluster: c, user: u}}]\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
    )
    monkeypatch.setenv("KUBECONFIG", str(config))
    with pytest.raises(
        SpecError, match=r"kubernetes\.context: the kubeconfig has no usable context 'nope'"
    ):
        connect("nope")
    assert isinstance(connect(None), Clients)  # builds clients without contacting the server
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    with pytest.raises(SpecError, match=r"no usable current context .*kubectl config use-context"):
        connect(None)


class FlakyCustom(FakeCustom):
    """An API server that fails the first ``failures`` job lists with ``error``."""

    def __init__(self, states: list[dict[str, Any]], error: Exception, failures: int) -> None:
        super().__init__(states)
        self.error, self.failures = error, failures

    def list_namespaced_custom_object(self, *args: Any, **kwargs: Any) -> Any:
        if self.failures:
            self.failures -= 1
            self.calls.append(("list-failed", args, kwargs))
            raise self.error
        return super().list_namespaced_custom_object(*args, **kwargs)


class FlakyCore(FakeCore):
    """Pod listing that fails the first ``failures`` times with ``error``."""

    def __init__(self, pod_lists: list[list[V1Pod]], error: Exception, failures: int) -> None:
        super().__init__(pod_lists, {})
        self.error, self.failures = error, failures

    def list_namespaced_pod(self, *args: Any, **kwargs: Any) -> Any:
        if self.failures:
            self.failures -= 1
            raise self.error
        return super().list_namespaced_pod(*args, **kwargs)


class FakeTime:
    """A clock that only the backend's sleeps advance."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


UNAVAILABLE = ApiException(status=503, reason="Service Unavailable")


@pytest.mark.parametrize(
    "error",
    [UNAVAILABLE, ApiException(status=429, reason="Too Many Requests"), ConnectionResetError()],
)
def test_wait_rides_out_transient_api_errors_with_back_off(error: Exception) -> None:
    custom = FlakyCustom([job(("Running", "", "")), job(("Succeeded", "", ""))], error, 4)
    b, _, err = backend(custom, FakeCore([[pod(MASTER, "Running", "pytorch")]], {}))
    fake = FakeTime()
    b.clock, b.sleep = fake.clock, fake.sleep
    result = run(b, b.dryrun(p5_spec(), JOB_ID))
    assert result.ok, result.summary
    assert [c[0] for c in custom.calls].count("list-failed") == 4
    assert not any(c[0] == "delete" for c in custom.calls)  # the job was left to run
    (outage,) = [line for line in err if "did not answer" in line]  # reported once
    assert outage.startswith("the API server did not answer listing the job (")
    assert outage.endswith("asking again for up to 120 s")
    assert "the API server answers again (listing the job)" in err
    assert fake.slept == [0.5, 1.0, 2.0, 4.0]  # back-off


def test_pod_logs_skip_a_transient_listing_error_and_stream_at_the_next_poll() -> None:
    custom = FakeCustom([job(("Running", "", ""))])
    core = FlakyCore([[pod(MASTER, "Running", "pytorch")]], UNAVAILABLE, 1)
    core.logs = {MASTER: ["step 1"]}
    b, out, _ = backend(custom, core)
    handle = b.submit(b.dryrun(p5_spec(), JOB_ID))
    logs = b.logs(handle, None, True, follow=False)
    logs.stop()  # the listing fails: nothing yet, and no error
    assert out == []
    logs.stop()
    assert out == [f"[{MASTER}] step 1"]


def test_an_outage_longer_than_the_retry_window_is_reported_and_the_job_left_running() -> None:
    custom = FlakyCustom([job(("Running", "", ""))], UNAVAILABLE, 10**6)
    b, _, _ = backend(custom, FakeCore([[]], {}))
    fake = FakeTime()
    b.clock, b.sleep = fake.clock, fake.sleep
    with pytest.raises(TenterError, match="lost the API server for over 120 s") as raised:
        run(b, b.dryrun(p5_spec(), JOB_ID))
    assert f"tenter status {JOB_ID}" in raised.value.fix
    assert 120 < fake.now < 140 and max(fake.slept) == 8.0
    assert not any(c[0] == "delete" for c in custom.calls)


def test_a_refusal_while_waiting_is_not_retried() -> None:
    custom = FlakyCustom(
        [job(("Running", "", ""))], ApiException(status=403, reason="Forbidden"), 1
    )
    b, _, _ = backend(custom, FakeCore([[]], {}))
    with pytest.raises(ApiException, match="Forbidden"):
        run(b, b.dryrun(p5_spec(), JOB_ID))
    assert [c[0] for c in custom.calls].count("list-failed") == 1


def test_sigterm_while_following_deletes_the_job(monkeypatch: pytest.MonkeyPatch) -> None:
    """What `tenter run` does on SIGTERM (a CI runner's timeout, `kill`): session.follow turns
    it into a stop request, and the job is deleted rather than left running."""

    class TerminatedCustom(FakeCustom):
        signalled = False

        def list_namespaced_custom_object(self, *args: Any, **kwargs: Any) -> Any:
            # Once, at the first look while the job is followed: the job's watch thread may
            # list again after follow returned, when SIGTERM's default would end pytest (run 18,
            # one core busy: `make: *** [Makefile:54: test] Terminated`).
            if not self.signalled:
                self.signalled = True
                os.kill(os.getpid(), signal.SIGTERM)
            return super().list_namespaced_custom_object(*args, **kwargs)

    custom = TerminatedCustom([job(("Running", "", ""))])
    core = FakeCore([[pod(MASTER, "Running", "pytorch")]], {})
    core.custom = custom
    monkeypatch.setattr(k8s_backend, "connect", lambda context: Clients(custom, core))
    get_backend.cache_clear()
    try:
        b = get_backend("kubernetes")
        assert isinstance(b, KubernetesBackend)
        b.poll_s = 0
        handle = b.submit(b.dryrun(p5_spec(), JOB_ID))
        result = session.follow(handle, session.Watch())
    finally:
        get_backend.cache_clear()
    assert result.interrupted and result.exit_code == 130
    assert [c[0] for c in custom.calls].count("delete") == 1
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
