"""The kubernetes backend: a job as a Kubeflow PyTorchJob, MPIJob or TrainJob."""

from tenter.launch.backends.kubernetes.backend import KubernetesBackend

__all__ = ["KubernetesBackend", "create_backend"]


def create_backend() -> KubernetesBackend:
    return KubernetesBackend()
