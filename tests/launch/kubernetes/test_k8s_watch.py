"""Following a Kubernetes job by watch, through the official client over real HTTP, against a
fake API server that streams chunked watch events (tests/launch/kubernetes/fake_apiserver.py):
resuming from the last resourceVersion after a dropped connection, listing again after a
410 Gone, and never polling."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from tenter.launch.backends.kubernetes import KubernetesBackend
from tenter.launch.backends.kubernetes.follow import WATCH_S
from tests.launch.kubernetes.fake_apiserver import Collection, Episode, fake_apiserver
from tests.launch.kubernetes.k8s_specs import JOB_ID, p5_spec

JOBS = "/apis/kubeflow.org/v1/namespaces/ml/pytorchjobs"
PODS = "/api/v1/namespaces/ml/pods"
MASTER = f"{JOB_ID}-master-0"


def job(state: str, version: str) -> dict[str, Any]:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": JOB_ID, "namespace": "ml", "resourceVersion": version},
        "status": {"conditions": [{"type": state, "status": "True", "reason": "", "message": ""}]},
    }


def pod(phase: str, version: str, exit_code: int | None = None) -> dict[str, Any]:
    state: dict[str, Any] = {"running": {}}
    if exit_code is not None:
        state = {"terminated": {"exitCode": exit_code, "reason": "Completed",
                                "finishedAt": "2026-11-25T20:00:00Z"}}  # fmt: skip
    return {
        "metadata": {"name": MASTER, "namespace": "ml", "resourceVersion": version},
        "status": {
            "phase": phase,
            "containerStatuses": [{"name": "pytorch", "restartCount": 0, "state": state}],
        },
    }


def test_wait_follows_by_watch_resuming_after_a_drop_and_listing_again_after_410(
    tmp_path: Path, tenter_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pods_done = Episode([("MODIFIED", pod("Succeeded", "21", exit_code=0))])
    pods = Collection(
        lists=[("10", [pod("Pending", "10")]), ("20", [pod("Running", "20")])],
        episodes=[
            Episode([("MODIFIED", pod("Running", "11"))], end="drop"),
            Episode([], end="gone"),
            pods_done,
        ],
    )
    jobs = Collection(
        lists=[("5", [job("Running", "5")])],
        episodes=[
            Episode([("MODIFIED", job("Running", "6"))]),
            Episode([("MODIFIED", job("Succeeded", "7"))], after=pods_done.done),
        ],
    )
    err: list[str] = []
    with fake_apiserver({JOBS: jobs, PODS: pods}, tmp_path) as kubeconfig:
        monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
        b = KubernetesBackend(err=err.append, out=lambda line: None)
        handle = b.submit(b.dryrun(p5_spec(), JOB_ID))
        result = b.wait(handle, threading.Event())
    assert result.ok, result.summary
    # The pods: listed, watched from the list's version; after the drop, watched again from
    # the last version seen (no list); after the 410, listed again and watched from there.
    assert pods.requests[:5] == [
        ("list", None),
        ("watch", "10"),
        ("watch", "11"),
        ("list", None),
        ("watch", "20"),
    ]
    assert jobs.requests[:3] == [("list", None), ("watch", "5"), ("watch", "6")]
    assert [line for line in err if line.startswith("pod ")] == [
        f"pod {MASTER}: Pending",
        f"pod {MASTER}: Running",
        f"pod {MASTER}: Succeeded",
    ]
    (drop,) = [line for line in err if "did not answer" in line]
    assert drop.startswith("the API server did not answer watching the pods (")
    assert "the API server answers again (watching the pods)" in err
    assert "the watch of the pods expired (410 Gone): listing again" in err
    assert WATCH_S == 60  # each watch asks the server to end it (timeoutSeconds), then renews
