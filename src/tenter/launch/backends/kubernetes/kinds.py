"""Which Kubeflow object a spec runs as (:func:`choose_kind`), what each kind is to the API
server (:data:`KINDS`), and what a spec still lacks to run as it (:func:`spec_problems`)."""

from __future__ import annotations

from dataclasses import dataclass

from tenter.spec import JobSpec, Problem, lookup

TRAINJOB_REPLICATED_JOB = "node"
"""The replicated job (and container) of the torch-distributed ClusterTrainingRuntime."""


@dataclass(frozen=True)
class JobKind:
    """What the API server calls an object kind, and what submitting it needs."""

    kind: str
    group: str
    version: str
    plural: str
    log_container: str
    """The container whose output is the job's output."""
    install: str
    """How to install the operator that serves this kind, for the error when it is missing."""

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"


KINDS = {
    "PyTorchJob": JobKind(
        "PyTorchJob",
        "kubeflow.org",
        "v1",
        "pytorchjobs",
        "pytorch",
        "install the Kubeflow Training Operator: kubectl apply --server-side -k "
        '"github.com/kubeflow/training-operator.git/manifests/overlays/standalone?ref=v1.9.0"',
    ),
    "MPIJob": JobKind(
        "MPIJob",
        "kubeflow.org",
        "v2beta1",
        "mpijobs",
        "launcher",
        "install the MPI Operator: kubectl apply --server-side -f "
        "https://raw.githubusercontent.com/kubeflow/mpi-operator/v0.6.0/deploy/v2beta1/"
        "mpi-operator.yaml",
    ),
    "TrainJob": JobKind(
        "TrainJob",
        "trainer.kubeflow.org",
        "v1alpha1",
        "trainjobs",
        TRAINJOB_REPLICATED_JOB,
        "install Kubeflow Trainer v2 and its training runtimes: "
        "https://www.kubeflow.org/docs/components/trainer/operator-guides/installation/",
    ),
}


def choose_kind(spec: JobSpec) -> str:
    """``kubernetes.kind``, or for ``auto`` the operator that launches this distribution."""
    if spec.kubernetes.kind != "auto":
        return spec.kubernetes.kind
    dist = spec.distribution
    mpi_launched = dist.mpi.enabled or dist.data_parallel or dist.model_parallel is not None
    return "MPIJob" if mpi_launched else "PyTorchJob"


def is_elastic(spec: JobSpec) -> bool:
    """The job may change size, or meets on an etcd rendezvous: torchrun's elastic mode."""
    e = spec.elastic
    lo, hi = e.min_hosts or spec.instance_count, e.max_hosts or spec.instance_count
    return lo != hi or e.rendezvous.backend == "etcd"


def spec_problems(spec: JobSpec, kind: str) -> list[Problem]:
    """What a spec that passed the general rules still lacks to run on Kubernetes."""
    out = []
    if spec.kubernetes.image is None:
        out.append(
            Problem(
                "kubernetes.image",
                "is required on backend kubernetes",
                "give an image with your code at "
                f"kubernetes.working_dir ({spec.kubernetes.working_dir}), torch and tenter "
                "(`tenter container` writes such a Dockerfile)",
            )
        )
    itype = lookup(spec.instance_type)
    if itype is not None and itype.is_local:
        out.append(
            Problem(
                "instance_type",
                f"'{spec.instance_type}' means this machine",
                "on Kubernetes give a catalog type (e.g. ml.p5.48xlarge) so that pods get its "
                "GPUs, EFA and node selector",
            )
        )
    if spec.channels:
        out.append(
            Problem(
                "channels",
                "local input channels cannot reach pods",
                "put the data on a volume (kubernetes.volumes) and pass its path as a "
                "hyperparameter",
            )
        )
    if kind != "PyTorchJob" and is_elastic(spec):
        out.append(
            Problem(
                "elastic",
                f"a {kind} cannot change size or use an etcd rendezvous",
                "use kubernetes.kind PyTorchJob (torch_distributed), or remove min_hosts/max_hosts",
            )
        )
    if kind == "TrainJob" and spec.max_run:
        out.append(
            Problem(
                "max_run",
                "a TrainJob (v1alpha1) has no deadline",
                "remove max_run or use kubernetes.kind PyTorchJob or MPIJob",
            )
        )
    return out
