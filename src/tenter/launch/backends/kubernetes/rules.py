"""The rules the operators' admission webhooks (and eksctl) apply beyond the CRD schemas.

A rendered object can match its OpenAPI schema and still be refused at ``kubectl apply``:
the Training Operator's webhook wants exactly one Master and a container named ``pytorch``
in every replica (kubeflow/training-operator ``pkg/webhooks/pytorch/pytorchjob_webhook.go``),
the MPI Operator one Launcher and pod names that are DNS labels
(kubeflow/mpi-operator ``pkg/apis/kubeflow/validation/validation.go``), eksctl an EFA node
group in a single availability zone (eksctl ``pkg/apis/eksctl.io/v1alpha5/validation.go``).
:func:`problems` checks those rules, plus tenter's own (no privileged container), so that
``tenter plan --backend kubernetes`` never prints an object the cluster would refuse.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from tenter.spec import Problem

MAX_LABEL = 63
_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_RESTART_POLICIES = ("Never", "OnFailure")
_CLEAN_POD_POLICIES = ("None", "Running", "All")
MIN_CLUSTER_AZS = 2
"""EKS places its control plane in subnets of at least two availability zones."""


def _label_problem(path: str, value: str, pattern: re.Pattern[str], what: str) -> Problem | None:
    if len(value) > MAX_LABEL:
        return Problem(
            path,
            f"{what} '{value}' has {len(value)} characters, more than Kubernetes' {MAX_LABEL}",
            f"shorten the job's name by {len(value) - MAX_LABEL}",
        )
    if not pattern.match(value):
        start = "a letter" if pattern is _DNS1035 else "a letter or digit"
        return Problem(
            path,
            f"{what} '{value}' is not a DNS label",
            f"rename the job: use lowercase letters, digits and '-', starting with {start} and "
            "ending with a letter or digit",
        )
    return None


def _name_problems(obj: dict[str, Any], pods: list[str]) -> list[Problem]:
    """The object's name is a DNS-1035 label, and so is every name made from it."""
    kind = obj.get("kind", "?")
    name = str(obj.get("metadata", {}).get("name", ""))
    path = f"{kind} metadata.name"
    problem = _label_problem(path, name, _DNS1035, "the name")
    if problem:
        return [problem]
    # The longest derived name first: its excess is what the job's name must lose.
    for pod in sorted(pods, key=len, reverse=True):
        problem = _label_problem(path, pod, _DNS1035, "the pod and service name")
        if problem:
            return [problem]
    return []


def _replicas(spec: dict[str, Any], key: str) -> dict[str, dict[str, Any]]:
    value = spec.get(key)
    return value if isinstance(value, dict) else {}


def _containers(replica: dict[str, Any]) -> list[dict[str, Any]]:
    containers = replica.get("template", {}).get("spec", {}).get("containers")
    return containers if isinstance(containers, list) else []


def _pytorchjob(obj: dict[str, Any]) -> list[Problem]:
    spec = obj.get("spec", {})
    name = str(obj.get("metadata", {}).get("name", ""))
    path = "PyTorchJob spec.pytorchReplicaSpecs"
    replicas = _replicas(spec, "pytorchReplicaSpecs")
    out = []
    if not replicas:
        out.append(Problem(path, "is required", "give a Master, or Workers for an elastic job"))
    pods = []
    for rtype, replica in replicas.items():
        count = replica.get("replicas")
        if rtype not in ("Master", "Worker"):
            out.append(Problem(f"{path}.{rtype}", "is not a replica type", "use Master or Worker"))
        elif rtype == "Master" and count != 1:
            out.append(Problem(f"{path}.Master.replicas", f"is {count}", "make it exactly 1"))
        elif isinstance(count, int) and count < 1:
            out.append(Problem(f"{path}.Worker.replicas", f"is {count}", "make it at least 1"))
        containers = _containers(replica)
        if not any(c.get("name") == "pytorch" for c in containers):
            out.append(
                Problem(
                    f"{path}.{rtype}.template.spec.containers",
                    "needs a container named 'pytorch' (the operator injects the torchrun "
                    "variables there)",
                    "name the training container 'pytorch'",
                )
            )
        for i, c in enumerate(containers):
            if not c.get("image"):
                out.append(
                    Problem(
                        f"{path}.{rtype}.template.spec.containers[{i}].image",
                        "is required",
                        "set kubernetes.image",
                    )
                )
        if isinstance(count, int) and count >= 1:
            pods.append(f"{name}-{rtype.lower()}-{count - 1}")
    policy = spec.get("elasticPolicy")
    if policy is not None:
        if "Worker" not in replicas:
            out.append(
                Problem(f"{path}.Worker", "is required with an elasticPolicy", "add Workers")
            )
        if "nProcPerNode" in policy and "nprocPerNode" in spec:
            out.append(
                Problem(
                    "PyTorchJob spec.elasticPolicy.nProcPerNode",
                    "must not be used with spec.nprocPerNode",
                    "keep spec.nprocPerNode",
                )
            )
    return _name_problems(obj, pods) + out


def _mpijob(obj: dict[str, Any]) -> list[Problem]:
    spec = obj.get("spec", {})
    name = str(obj.get("metadata", {}).get("name", ""))
    path = "MPIJob spec.mpiReplicaSpecs"
    replicas = _replicas(spec, "mpiReplicaSpecs")
    out = []
    launcher = replicas.get("Launcher")
    if launcher is None:
        out.append(Problem(f"{path}.Launcher", "is required", "add the pod that runs mpirun"))
    elif launcher.get("replicas") != 1:
        out.append(
            Problem(
                f"{path}.Launcher.replicas",
                f"is {launcher.get('replicas')}",
                "make it exactly 1",
            )
        )
    workers = replicas.get("Worker", {}).get("replicas", 1)
    if "Worker" in replicas and not (isinstance(workers, int) and workers >= 1):
        out.append(Problem(f"{path}.Worker.replicas", f"is {workers}", "make it at least 1"))
    for rtype, replica in replicas.items():
        if replica.get("restartPolicy") not in _RESTART_POLICIES:
            out.append(
                Problem(
                    f"{path}.{rtype}.restartPolicy",
                    f"is {replica.get('restartPolicy')!r}",
                    f"use one of {', '.join(_RESTART_POLICIES)}",
                )
            )
        if not _containers(replica):
            out.append(
                Problem(f"{path}.{rtype}.template.spec.containers", "needs a container", "add one")
            )
    slots = spec.get("slotsPerWorker")
    if not (isinstance(slots, int) and slots >= 0):
        out.append(
            Problem("MPIJob spec.slotsPerWorker", f"is {slots!r}", "give the ranks per worker")
        )
    policy = spec.get("runPolicy", {})
    if policy.get("cleanPodPolicy") not in _CLEAN_POD_POLICIES:
        out.append(
            Problem(
                "MPIJob spec.runPolicy.cleanPodPolicy",
                f"is {policy.get('cleanPodPolicy')!r}",
                f"use one of {', '.join(_CLEAN_POD_POLICIES)}",
            )
        )
    for key in ("backoffLimit", "activeDeadlineSeconds", "ttlSecondsAfterFinished"):
        if isinstance(policy.get(key), int) and policy[key] < 0:
            out.append(
                Problem(f"MPIJob spec.runPolicy.{key}", "must not be negative", "make it 0 or more")
            )
    # The MPI Operator checks its worker pods' names as DNS-1123 labels; the job's own name
    # must also be a DNS-1035 label, as for every Kubeflow job.
    pods = [f"{name}-worker-{workers - 1}"] if isinstance(workers, int) and workers >= 1 else []
    pods.append(f"{name}-launcher")
    return _name_problems(obj, pods) + out


def _trainjob(obj: dict[str, Any]) -> list[Problem]:
    spec = obj.get("spec", {})
    name = str(obj.get("metadata", {}).get("name", ""))
    out = []
    if not spec.get("runtimeRef", {}).get("name"):
        out.append(
            Problem(
                "TrainJob spec.runtimeRef.name",
                "is required",
                "name the ClusterTrainingRuntime (kubernetes.runtime)",
            )
        )
    nodes = spec.get("trainer", {}).get("numNodes", 1)
    if not (isinstance(nodes, int) and nodes >= 1):
        out.append(Problem("TrainJob spec.trainer.numNodes", f"is {nodes!r}", "make it 1 or more"))
        nodes = 1
    targets = [
        t.get("name", "") for o in spec.get("podSpecOverrides", []) for t in o.get("targetJobs", [])
    ] or ["node"]
    # JobSet names each pod <jobset>-<replicated job>-<job index>-<pod index>.
    pods = [f"{name}-{t}-0-{nodes - 1}" for t in targets]
    return _name_problems(obj, pods) + out


def _cluster_config(obj: dict[str, Any]) -> list[Problem]:
    out = []
    cluster_azs = obj.get("availabilityZones") or []
    if cluster_azs and len(cluster_azs) < MIN_CLUSTER_AZS:
        out.append(
            Problem(
                "ClusterConfig availabilityZones",
                f"lists {len(cluster_azs)}; EKS needs at least {MIN_CLUSTER_AZS}",
                f"list {MIN_CLUSTER_AZS} or more (the node groups may use one of them)",
            )
        )
    for i, ng in enumerate(obj.get("managedNodeGroups") or []):
        path = f"ClusterConfig managedNodeGroups[{i}]"
        azs = ng.get("availabilityZones") or []
        if ng.get("efaEnabled") and (len(azs) > 1 or len(ng.get("subnets") or []) > 1):
            out.append(
                Problem(
                    f"{path}.availabilityZones",
                    f"lists {len(azs)}; an efaEnabled node group must lie in one availability "
                    "zone (EFA traffic does not cross zones)",
                    "list one",
                )
            )
        unknown = [az for az in azs if cluster_azs and az not in cluster_azs]
        if unknown:
            out.append(
                Problem(
                    f"{path}.availabilityZones",
                    f"{', '.join(unknown)} not among the cluster's availabilityZones",
                    "use the cluster's zones, or add them to its availabilityZones",
                )
            )
    return out


def _security_contexts(value: Any, path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "securityContext" and isinstance(item, dict):
                yield f"{path}.{key}", item
            else:
                yield from _security_contexts(item, f"{path}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _security_contexts(item, f"{path}[{i}]")


def _privileges(obj: dict[str, Any]) -> list[Problem]:
    """tenter's rule: no pod is privileged; EFA and GPUs come from their device plugins."""
    out = []
    for path, context in _security_contexts(obj.get("spec", {}), f"{obj.get('kind')} spec"):
        for key in ("privileged", "allowPrivilegeEscalation"):
            if context.get(key) is True:
                out.append(
                    Problem(
                        f"{path}.{key}",
                        "is true; pods need no privileges (the EFA and NVIDIA device plugins "
                        "provide the devices)",
                        "remove it",
                    )
                )
    return out


_RULES = {
    "PyTorchJob": _pytorchjob,
    "MPIJob": _mpijob,
    "TrainJob": _trainjob,
    "ClusterConfig": _cluster_config,
}


def problems(obj: dict[str, Any]) -> list[Problem]:
    """Every rule ``obj`` breaks; the path of each names the kind and the field."""
    rule = _RULES.get(str(obj.get("kind")))
    if rule is None:
        return [
            Problem(
                "kind",
                f"{obj.get('kind')!r} is not a kind tenter renders",
                f"use one of {', '.join(_RULES)}",
            )
        ]
    return rule(obj) + _privileges(obj)
