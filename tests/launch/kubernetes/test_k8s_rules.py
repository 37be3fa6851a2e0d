"""The operators' webhook rules that the CRD schemas do not express, and tenter's own."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from tenter.launch.backends.kubernetes import eksctl
from tenter.launch.backends.kubernetes import rules as k8s_rules
from tenter.launch.backends.kubernetes.backend import KubernetesBackend
from tenter.spec import lookup
from tests.launch.kubernetes.k8s_specs import JOB_ID, MPI, p5_spec

Edit = Callable[[dict[str, Any]], None]


def rendered(**overrides: Any) -> dict[str, Any]:
    return KubernetesBackend().dryrun(p5_spec(**overrides), JOB_ID).materialize()[0]


def _pt(obj: dict[str, Any]) -> dict[str, Any]:
    return obj["spec"]["pytorchReplicaSpecs"]  # type: ignore[no-any-return]


def _mpi(obj: dict[str, Any]) -> dict[str, Any]:
    return obj["spec"]["mpiReplicaSpecs"]  # type: ignore[no-any-return]


def _set(path: str, value: Any) -> Edit:
    def edit(obj: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        target = obj
        for key in parents:
            target = target[int(key)] if isinstance(target, list) else target[key]
        target[last] = value

    return edit


PT = "spec.pytorchReplicaSpecs"
MP = "spec.mpiReplicaSpecs"
PYTORCH_CASES: list[tuple[str, Edit, str]] = [
    (
        "two masters",
        _set(f"{PT}.Master.replicas", 2),
        "PyTorchJob spec.pytorchReplicaSpecs.Master.replicas: is 2. Fix: make it exactly 1",
    ),
    (
        "container not named pytorch",
        _set(f"{PT}.Worker.template.spec.containers.0.name", "trainer"),
        "PyTorchJob spec.pytorchReplicaSpecs.Worker.template.spec.containers: needs a container "
        "named 'pytorch' (the operator injects the torchrun variables there). Fix: name the "
        "training container 'pytorch'",
    ),
    (
        "no image",
        _set(f"{PT}.Master.template.spec.containers.0.image", ""),
        "PyTorchJob spec.pytorchReplicaSpecs.Master.template.spec.containers[0].image: is "
        "required. Fix: set kubernetes.image",
    ),
    (
        "unknown replica type",
        lambda o: _pt(o).update(Chief=copy.deepcopy(_pt(o)["Worker"])),
        "PyTorchJob spec.pytorchReplicaSpecs.Chief: is not a replica type. Fix: use Master or "
        "Worker",
    ),
    (
        "elastic without workers",
        lambda o: (o["spec"].update(elasticPolicy={"minReplicas": 1}), _pt(o).pop("Worker")),
        "PyTorchJob spec.pytorchReplicaSpecs.Worker: is required with an elasticPolicy. Fix: "
        "add Workers",
    ),
    (
        "uppercase name",
        _set("metadata.name", "Llm-1"),
        "PyTorchJob metadata.name: the name 'Llm-1' is not a DNS label. Fix: rename the job: use "
        "lowercase letters, digits and '-', starting with a letter and ending with a letter or "
        "digit",
    ),
    (
        "name starting with a digit",
        _set("metadata.name", "1llm"),
        "PyTorchJob metadata.name: the name '1llm' is not a DNS label. Fix: rename the job: use "
        "lowercase letters, digits and '-', starting with a letter and ending with a letter or "
        "digit",
    ),
    (
        "privileged",
        _set(f"{PT}.Worker.template.spec.containers.0.securityContext.privileged", True),
        "PyTorchJob spec.pytorchReplicaSpecs.Worker.template.spec.containers[0]."
        "securityContext.privileged: is true; pods need no privileges (the EFA and NVIDIA "
        "device plugins provide the devices). Fix: remove it",
    ),
]
MPI_CASES: list[tuple[str, Edit, str]] = [
    (
        "two launchers",
        _set(f"{MP}.Launcher.replicas", 2),
        "MPIJob spec.mpiReplicaSpecs.Launcher.replicas: is 2. Fix: make it exactly 1",
    ),
    (
        "no launcher",
        lambda o: _mpi(o).pop("Launcher"),
        "MPIJob spec.mpiReplicaSpecs.Launcher: is required. Fix: add the pod that runs mpirun",
    ),
    (
        "zero workers",
        _set(f"{MP}.Worker.replicas", 0),
        "MPIJob spec.mpiReplicaSpecs.Worker.replicas: is 0. Fix: make it at least 1",
    ),
    (
        "restart policy",
        _set(f"{MP}.Worker.restartPolicy", "Always"),
        "MPIJob spec.mpiReplicaSpecs.Worker.restartPolicy: is 'Always'. Fix: use one of "
        "Never, OnFailure",
    ),
    (
        "clean pod policy",
        _set("spec.runPolicy.cleanPodPolicy", "Some"),
        "MPIJob spec.runPolicy.cleanPodPolicy: is 'Some'. Fix: use one of None, Running, All",
    ),
    (
        "worker pod name too long",
        _set("metadata.name", "a" * 55),
        f"MPIJob metadata.name: the pod and service name '{'a' * 55}-worker-1' has 64 "
        "characters, more than Kubernetes' 63. Fix: shorten the job's name by 1",
    ),
]


@pytest.mark.parametrize(
    ("case", "edit", "problem"), PYTORCH_CASES, ids=[c[0] for c in PYTORCH_CASES]
)
def test_pytorchjob_problem_if_a_webhook_rule_is_broken(
    case: str, edit: Edit, problem: str
) -> None:
    obj = rendered()
    edit(obj)
    assert [str(p) for p in k8s_rules.problems(obj)] == [problem]


@pytest.mark.parametrize(("case", "edit", "problem"), MPI_CASES, ids=[c[0] for c in MPI_CASES])
def test_mpijob_problem_if_a_webhook_rule_is_broken(case: str, edit: Edit, problem: str) -> None:
    obj = rendered(**MPI)
    edit(obj)
    assert [str(p) for p in k8s_rules.problems(obj)] == [problem]


def test_cluster_config_problem_if_efa_nodes_span_zones() -> None:
    itype = lookup("p5.48xlarge")
    assert itype is not None
    config = eksctl.cluster_config("t", "us-west-2", itype, 2, ["us-west-2a", "us-west-2b"])
    config["managedNodeGroups"][0]["availabilityZones"] = ["us-west-2a", "us-west-2c"]
    assert [str(p) for p in k8s_rules.problems(config)] == [
        "ClusterConfig managedNodeGroups[0].availabilityZones: lists 2; an efaEnabled node "
        "group must lie in one availability zone (EFA traffic does not cross zones). Fix: list one",
        "ClusterConfig managedNodeGroups[0].availabilityZones: us-west-2c not among the "
        "cluster's availabilityZones. Fix: use the cluster's zones, or add them to its "
        "availabilityZones",
    ]


def test_unknown_kind_is_a_problem() -> None:
    assert [str(p) for p in k8s_rules.problems({"kind": "Deployment"})] == [
        "kind: 'Deployment' is not a kind tenter renders. Fix: use one of PyTorchJob, MPIJob, "
        "TrainJob, ClusterConfig"
    ]
