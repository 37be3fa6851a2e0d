"""``kubernetes``: where and how a job runs on a Kubernetes cluster (``backend: kubernetes``).

kubernetes:
  image: 123456789012.dkr.ecr.us-west-2.amazonaws.com/train:latest
  namespace: ml
  service_account: trainer
  kind: auto                 # PyTorchJob (torch_distributed), MPIJob (mpi, smdistributed),
                             # or TrainJob (Kubeflow Trainer v2) when asked for by name
  volumes:
    - {claim: fsx-claim, mount_path: /fsx}
    - {claim: fsx-claim, mount_path: /ckpt, sub_path: checkpoints}

Only the rules of these values alone live here; what depends on the rest of the spec (an
image is required, no local channels) is checked by the backend when it renders the job.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from tenter.spec.base import StrictModel
from tenter.spec.errors import FieldError

DNS1123_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS1123_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"


class ClaimVolume(StrictModel):
    """A PersistentVolumeClaim (an FSx for Lustre claim, an EFS claim...) mounted in every pod."""

    claim: str = Field(pattern=DNS1123_SUBDOMAIN, max_length=253)
    """Name of the PersistentVolumeClaim, in the job's namespace."""
    mount_path: str
    """Where the volume appears in the containers (absolute)."""
    sub_path: str | None = None
    """Mount only this folder of the volume."""
    read_only: bool = False

    @field_validator("mount_path")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not value.startswith("/"):
            raise FieldError(
                f"'{value}' is not an absolute path in the container", "give one, e.g. /fsx"
            )
        return value


class KubernetesOptions(StrictModel):
    image: str | None = None
    """Container image with the code (at ``working_dir``), torch and tenter. Required."""
    namespace: str = Field(default="default", pattern=DNS1123_LABEL, max_length=63)
    context: str | None = None
    """kubeconfig context to submit with (default: the current context)."""
    service_account: str | None = Field(default=None, pattern=DNS1123_SUBDOMAIN, max_length=253)
    kind: Literal["auto", "PyTorchJob", "MPIJob", "TrainJob"] = "auto"
    """auto: MPIJob for mpi and smdistributed jobs, PyTorchJob for the others."""
    runtime: str = "torch-distributed"
    """TrainJob only: the ClusterTrainingRuntime the job refers to."""
    working_dir: str = "/opt/ml/code"
    """Where ``source_dir`` is in the image (SageMaker's place for code); ``entry_point`` is
    relative to it."""
    python: str = "python3"
    """The image's Python."""
    volumes: list[ClaimVolume] = Field(default_factory=list)
