"""Kubernetes manifests of a job: pure functions of a validated spec and its job id.

One spec renders as one of three Kubeflow objects:

- ``PyTorchJob`` (``kubeflow.org/v1``, Training Operator): one Master and N-1 Workers, each
  pod running ``torchrun`` (``python -m torch.distributed.run``), which reads the ``PET_*``
  variables the operator sets; an elastic spec (``elastic.min_hosts``/``max_hosts`` or an etcd
  rendezvous) gets an ``elasticPolicy`` and Workers only, as the operator requires.
- ``MPIJob`` (``kubeflow.org/v2beta1``, MPI Operator) for ``mpi`` and ``smdistributed`` jobs:
  one Launcher running :mod:`tenter.launch.backends.kubernetes.mpi_launcher`, given the job (the
  spec, a few KB, whatever the number of workers), and N Workers running ``sshd``. The
  launcher makes the plan and the mpirun command (the mpi backend's own,
  :mod:`tenter.launch.backends.mpirun`), serves the ranks' store and each rank's environment on the
  pod's address (processes started over ssh do not see the pod's environment), then runs
  mpirun.
- ``TrainJob`` (``trainer.kubeflow.org/v1alpha1``, Kubeflow Trainer v2), when asked for by
  ``kubernetes.kind``: the trainer of a ``ClusterTrainingRuntime`` (``torch-distributed``).

Every training pod gets the instance type's resources from the catalog (GPUs, EFA interfaces,
hugepages, CPU and memory), a memory-backed ``/dev/shm``, a node selector on the instance
type, the EFA/NCCL variables (:mod:`tenter.contract.fabric`, the same for every backend)
and the spec's claimed volumes; none is privileged: EFA devices come from the EFA device
plugin as ``vpc.amazonaws.com/efa`` resources.
"""

from __future__ import annotations

import copy
import posixpath
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from tenter.contract.fabric import CLUSTER_NIC
from tenter.contract.sagemaker import hyperparameter_args
from tenter.contract.worker import BOOTSTRAP, Placement, host_env
from tenter.launch.backends.kubernetes.kinds import (
    KINDS,
    TRAINJOB_REPLICATED_JOB,
    choose_kind,
    is_elastic,
    spec_problems,
)
from tenter.launch.backends.kubernetes.mpi_job import JOB_ENV, POD_IP_ENV, MpiJobLaunch, job_json
from tenter.spec import JobSpec, SpecError, lookup, processes_per_host
from tenter.spec.catalog import InstanceType
from tenter.spec.elastic import PREEMPTION_MARGIN_S
from tenter.spec.kubernetes import KubernetesOptions

Manifest = dict[str, Any]

INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
GPU_RESOURCE = "nvidia.com/gpu"
EFA_RESOURCE = "vpc.amazonaws.com/efa"
HUGEPAGES_RESOURCE = "hugepages-2Mi"
HUGEPAGES_EFA = "5120Mi"
"""libfabric's EFA provider allocates its buffers from 2 MiB huge pages; AWS's EKS EFA
examples request this much per pod."""
ALLOCATABLE_FRACTION = 0.9
"""Share of the catalog's CPUs and memory a pod requests: the kubelet keeps the rest for the
system, its eviction threshold and the per-node daemons (CNI, device plugins)."""
LAUNCHER_RESOURCES: Manifest = {"requests": {"cpu": 1, "memory": "2Gi"}}
"""mpirun and its ssh sessions only: the launcher runs no rank."""
SHM_VOLUME = "dshm"
SSHD = ["/usr/sbin/sshd", "-De"]
"""MPI workers serve ssh for the launcher's mpirun (the MPI Operator mounts the keys)."""
MPI_LAUNCHER = "tenter.launch.backends.kubernetes.mpi_launcher"
"""What the launcher pod runs: from the job, the plan and mpirun, and the servers its ranks use."""
POD_TENTER_HOME = Path("/opt/ml/tenter")
"""tenter's home inside MPI pods: the mpirun command's job directory lies under it."""
POD_SM_DIR = PurePosixPath("/opt/ml")
"""SageMaker's directory in the container, as SM_MODEL_DIR and friends name it."""


def literal(value: str) -> str:
    """``value`` as Kubernetes passes it on: the kubelet expands ``$(VAR)`` in commands and
    environment values and turns ``$$`` into ``$``, so doubling every ``$`` keeps a user's
    ``$(...)`` or ``$HOME`` verbatim (the worker contract promises values arrive unchanged)."""
    return value.replace("$", "$$")


def labels(name: str) -> dict[str, str]:
    """The labels of the job and of its pods (Kubernetes' recommended ones); the instance
    label selects the pods of one job."""
    return {"app.kubernetes.io/name": "tenter", "app.kubernetes.io/instance": name}


def pod_selector(kind: str, name: str) -> str:
    # TrainJob pods are made by JobSet from the runtime's template, without our labels.
    if kind == "TrainJob":
        return f"jobset.sigs.k8s.io/jobset-name={name}"
    return f"app.kubernetes.io/instance={name}"


def node_resources(itype: InstanceType) -> Manifest:
    """A whole node of ``itype`` for one pod: its GPUs and EFA interfaces, hugepages for EFA,
    and most of its CPUs and memory. Extended resources and hugepages need limits equal to
    requests; CPU is left unlimited so that a busy data loader may use idle cores."""
    memory = f"{int(itype.memory_gib * ALLOCATABLE_FRACTION)}Gi"
    devices: dict[str, Any] = {}
    if itype.gpus:
        devices[GPU_RESOURCE] = itype.gpus
    if itype.efa:
        devices[EFA_RESOURCE] = itype.efa
        devices[HUGEPAGES_RESOURCE] = HUGEPAGES_EFA
    return {
        "requests": {
            "cpu": max(1, int(itype.cpus * ALLOCATABLE_FRACTION)),
            "memory": memory,
            **devices,
        },
        "limits": {"memory": memory, **devices},
    }


def _volumes(opts: KubernetesOptions) -> tuple[list[Manifest], list[Manifest]]:
    """The pod's volumes and the container's mounts: /dev/shm in memory (Docker's default
    64 MiB breaks NCCL and DataLoader workers), then the claimed volumes."""
    volumes: list[Manifest] = [{"name": SHM_VOLUME, "emptyDir": {"medium": "Memory"}}]
    mounts: list[Manifest] = [{"name": SHM_VOLUME, "mountPath": "/dev/shm"}]
    for i, vol in enumerate(opts.volumes):
        name = f"volume-{i}"
        claim: Manifest = {"claimName": vol.claim}
        mount: Manifest = {"name": name, "mountPath": vol.mount_path}
        if vol.read_only:
            claim["readOnly"] = True
            mount["readOnly"] = True
        if vol.sub_path:
            mount["subPath"] = vol.sub_path
        volumes.append({"name": name, "persistentVolumeClaim": claim})
        mounts.append(mount)
    return volumes, mounts


def _env_list(env: Mapping[str, str]) -> list[Manifest]:
    return [{"name": k, "value": v} for k, v in env.items()]


def secret_env(spec: JobSpec) -> list[Manifest]:
    """The spec's secrets as references to the cluster's Secrets: the kubelet reads each value
    when it starts the container; no manifest holds one."""
    refs = spec.secrets if isinstance(spec.secrets, dict) else {}
    return [
        {"name": name, "valueFrom": {"secretKeyRef": {"name": ref.secret, "key": ref.key}}}
        for name, ref in refs.items()
    ]


HOST_REF = "$(TENTER_HOST)"
"""The pod's own name, which the kubelet expands in the values that refer to it."""
FROM_DOWNWARD_API = {"TENTER_HOST": "metadata.name", "TENTER_HOST_ADDR": "status.podIP"}
"""Variables whose value only the pod knows: its name and address."""
LEFT_OUT = {"TENTER_HOST_INDEX", "SM_TRAINING_ENV"}
"""Per-host values one pod template cannot hold: the node rank arrives as torchrun's
``GROUP_RANK``, and ``SM_TRAINING_ENV``'s ``is_master`` differs per host."""


def worker_env(
    spec: JobSpec, itype: InstanceType, job_id: str, hosts: list[str], procs: int
) -> list[Manifest]:
    """The environment of a torchrun pod: the worker contract (:func:`tenter.contract.worker.
    host_env`, as on every backend; torchrun adds the per-rank variables).

    One pod template serves every host, so the host's own name and address come from the
    downward API and the per-host SageMaker values refer to it as ``$(TENTER_HOST)``."""
    where = Placement(
        job_id=job_id,
        job_dir=POD_SM_DIR,
        host=HOST_REF,
        host_index="",
        host_addr="",
        hosts=hosts,
        host_dir=POD_SM_DIR,
        network_interface=CLUSTER_NIC,
        module_dir=spec.kubernetes.working_dir,
        # SageMaker's checkpoint_local_path default.
        checkpoint_dir=spec.checkpoint.dir or str(POD_SM_DIR / "checkpoints"),
        channels={},
        share=None,
    )
    env = host_env(spec, itype, procs, where)
    env = {k: v for k, v in env.items() if k not in FROM_DOWNWARD_API and k not in LEFT_OUT}
    per_host = {k: v for k, v in env.items() if HOST_REF in v}
    values = {k: literal(v) for k, v in env.items() if k not in per_host}
    return [
        *(
            {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}
            for name, path in FROM_DOWNWARD_API.items()
        ),
        *_env_list(values),
        *_env_list(per_host),
        *secret_env(spec),
    ]


def torchrun_command(spec: JobSpec, max_restarts: int) -> list[str]:
    """``python -m torch.distributed.run`` around the entry point; the nodes, node rank and
    master (or rendezvous) come from the operator's ``PET_*`` variables."""
    opts = spec.kubernetes
    run = [opts.python, "-m", "torch.distributed.run"]
    if max_restarts:
        run += ["--max-restarts", str(max_restarts)]
    user_args = [*hyperparameter_args(spec.hyperparameters), *spec.args]
    if spec.entry_point is not None:
        script = posixpath.join(opts.working_dir, spec.entry_point)
        argv = [*run, "-m", BOOTSTRAP, script, *user_args]
    elif spec.module is not None:
        argv = [*run, "-m", BOOTSTRAP, "-m", spec.module, *user_args]
    else:
        assert spec.command is not None, "the spec check requires one entry"
        argv = [*run, "--no-python", *spec.command, *user_args]
    return [literal(a) for a in argv]


def _metadata(spec: JobSpec, name: str) -> Manifest:
    return {"name": name, "namespace": spec.kubernetes.namespace, "labels": labels(name)}


def _pod_spec(spec: JobSpec, itype: InstanceType | None, containers: list[Manifest]) -> Manifest:
    """A pod on a node of ``itype`` (None: anywhere, for the MPI launcher)."""
    pod: Manifest = {}
    if spec.kubernetes.service_account:
        pod["serviceAccountName"] = spec.kubernetes.service_account
    if itype is not None:
        pod["nodeSelector"] = {INSTANCE_TYPE_LABEL: itype.name}
    pod["containers"] = containers
    if itype is not None:
        pod["volumes"] = _volumes(spec.kubernetes)[0]
        if spec.checkpoint.preemption_grace:
            # Deleting a pod (an eviction, a spot reclaim) sends SIGTERM, which torchrun passes
            # to the ranks: a preemption request. SIGKILL comes this much later.
            grace = spec.checkpoint.preemption_grace + PREEMPTION_MARGIN_S
            pod["terminationGracePeriodSeconds"] = grace
    return pod


def _container(
    spec: JobSpec,
    name: str,
    command: list[str],
    resources: Manifest,
    env: list[Manifest] | None = None,
    mounts: bool = True,
) -> Manifest:
    container: Manifest = {
        "name": name,
        "image": spec.kubernetes.image,
        "command": command,
        "workingDir": spec.kubernetes.working_dir,
    }
    if env:
        container["env"] = env
    container["resources"] = resources
    if mounts:
        container["volumeMounts"] = _volumes(spec.kubernetes)[1]
    # Spelled out so that a reader (and the rule check) sees it: EFA needs no privileges.
    container["securityContext"] = {"privileged": False}
    return container


def _run_policy(spec: JobSpec, backoff_limit: int) -> Manifest:
    # Running: finished pods stay for their logs; pods still running when the job ends go.
    policy: Manifest = {"cleanPodPolicy": "Running", "backoffLimit": backoff_limit}
    if spec.max_run:
        policy["activeDeadlineSeconds"] = spec.max_run
    return policy


def pytorch_hosts(spec: JobSpec, name: str) -> list[str]:
    """The PyTorchJob's pod names in node-rank order (the operator's Master, then Workers;
    elastic jobs have Workers only)."""
    n = spec.instance_count
    if is_elastic(spec):
        return [f"{name}-worker-{i}" for i in range(n)]
    return [f"{name}-master-0", *(f"{name}-worker-{i}" for i in range(n - 1))]


def pytorchjob(spec: JobSpec, itype: InstanceType, name: str, procs: int) -> Manifest:
    elastic = is_elastic(spec)
    e = spec.elastic
    n = spec.instance_count
    hosts = pytorch_hosts(spec, name)
    # Elastic pods are restarted by the operator (and torchrun restarts the group in-pod, up
    # to maxRestarts); a static job restarts its group in-pod only.
    restart = "OnFailure" if elastic and e.max_restarts else "Never"
    container = _container(
        spec,
        KINDS["PyTorchJob"].log_container,
        torchrun_command(spec, 0 if elastic else e.max_restarts),
        node_resources(itype),
        worker_env(spec, itype, name, hosts, procs),
    )
    template = {"metadata": {"labels": labels(name)}, "spec": _pod_spec(spec, itype, [container])}

    def replica(count: int) -> Manifest:
        # A copy each: the same dict twice would print as a YAML anchor and alias.
        return {"replicas": count, "restartPolicy": restart, "template": copy.deepcopy(template)}

    job_spec: Manifest = {"nprocPerNode": str(procs)}
    if elastic:
        rdzv = e.rendezvous
        policy: Manifest = {
            "minReplicas": e.min_hosts or n,
            "maxReplicas": e.max_hosts or n,
            "rdzvBackend": rdzv.backend,
            "maxRestarts": e.max_restarts,
            "rdzvConf": [
                {"key": "join_timeout", "value": str(rdzv.join_timeout)},
                {"key": "last_call_timeout", "value": str(rdzv.last_call_timeout)},
            ],
        }
        if rdzv.endpoint:
            host, _, port = rdzv.endpoint.rpartition(":")
            policy["rdzvHost"], policy["rdzvPort"] = host, int(port)
        job_spec["elasticPolicy"] = policy
        replicas = {"Worker": replica(n)}
    else:
        replicas = {"Master": replica(1), **({"Worker": replica(n - 1)} if n > 1 else {})}
    job_spec["runPolicy"] = _run_policy(spec, e.max_restarts if elastic else 0)
    job_spec["pytorchReplicaSpecs"] = replicas
    return _object("PyTorchJob", spec, name, job_spec)


MPI_WORKER = "{name}-worker-{{i}}.{name}.{namespace}.svc"
"""Worker ``i``'s name in the MPI Operator's headless service (its hostfile's names)."""


def mpijob(spec: JobSpec, itype: InstanceType, name: str, procs: int) -> Manifest:
    # The spec as the pods see it: code at working_dir, no local output directory.
    in_pod = spec.model_copy(update={"source_dir": spec.kubernetes.working_dir, "output_dir": None})
    job = MpiJobLaunch(
        spec=in_pod,
        name=name,
        procs=procs,
        workers=MPI_WORKER.format(name=name, namespace=spec.kubernetes.namespace),
        tenter_home=str(POD_TENTER_HOME),
    )
    env: list[Manifest] = [
        {"name": POD_IP_ENV, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": JOB_ENV, "value": literal(job_json(job))},
        # mpirun passes them on to the workers by name (-x NAME).
        *secret_env(spec),
    ]
    command = [literal(a) for a in (spec.kubernetes.python, "-m", MPI_LAUNCHER)]
    launcher = _container(spec, "launcher", command, LAUNCHER_RESOURCES, env, mounts=False)
    worker = _container(spec, "worker", SSHD, node_resources(itype))
    restart = "Never"
    job_spec: Manifest = {
        "slotsPerWorker": procs,
        "runPolicy": _run_policy(spec, spec.elastic.max_restarts),
        "mpiImplementation": "OpenMPI",
        # mpirun's ssh to a worker whose sshd is not up yet fails the job.
        "launcherCreationPolicy": "WaitForWorkersReady",
        "mpiReplicaSpecs": {
            "Launcher": {
                "replicas": 1,
                "restartPolicy": restart,
                "template": {
                    "metadata": {"labels": labels(name)},
                    "spec": _pod_spec(spec, None, [launcher]),
                },
            },
            "Worker": {
                "replicas": spec.instance_count,
                "restartPolicy": restart,
                "template": {
                    "metadata": {"labels": labels(name)},
                    "spec": _pod_spec(spec, itype, [worker]),
                },
            },
        },
    }
    return _object("MPIJob", spec, name, job_spec)


def trainjob(spec: JobSpec, itype: InstanceType, name: str, procs: int) -> Manifest:
    n = spec.instance_count
    # JobSet's pod host names: <jobset>-<replicated job>-<job index>-<pod index>.
    hosts = [f"{name}-{TRAINJOB_REPLICATED_JOB}-0-{i}" for i in range(n)]
    volumes, mounts = _volumes(spec.kubernetes)
    override: Manifest = {"targetJobs": [{"name": TRAINJOB_REPLICATED_JOB}]}
    if spec.kubernetes.service_account:
        override["serviceAccountName"] = spec.kubernetes.service_account
    override["nodeSelector"] = {INSTANCE_TYPE_LABEL: itype.name}
    override["volumes"] = volumes
    override["containers"] = [{"name": TRAINJOB_REPLICATED_JOB, "volumeMounts": mounts}]
    job_spec: Manifest = {
        "runtimeRef": {"name": spec.kubernetes.runtime},
        "trainer": {
            "image": spec.kubernetes.image,
            "command": torchrun_command(spec, spec.elastic.max_restarts),
            "env": worker_env(spec, itype, name, hosts, procs),
            "numNodes": n,
            "numProcPerNode": procs,
            "resourcesPerNode": node_resources(itype),
        },
        "podSpecOverrides": [override],
    }
    return _object("TrainJob", spec, name, job_spec)


def _object(kind: str, spec: JobSpec, name: str, job_spec: Manifest) -> Manifest:
    return {
        "apiVersion": KINDS[kind].api_version,
        "kind": kind,
        "metadata": _metadata(spec, name),
        "spec": job_spec,
    }


RENDERERS = {"PyTorchJob": pytorchjob, "MPIJob": mpijob, "TrainJob": trainjob}


def render(spec: JobSpec, name: str) -> Manifest:
    """The job object of a validated spec, named ``name`` (the job id). Raises SpecError
    for what the spec lacks to run on Kubernetes."""
    kind = choose_kind(spec)
    problems = spec_problems(spec, kind)
    if problems:
        raise SpecError(problems)
    itype = lookup(spec.instance_type)
    assert itype is not None, "the spec check rejects unknown instance types"
    return RENDERERS[kind](spec, itype, name, processes_per_host(spec, itype))
