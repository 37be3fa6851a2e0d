"""The 2-node p5 EFA job the Kubernetes tests render, and its forms."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tenter.launch.backends.kubernetes import KubernetesBackend
from tenter.launch.backends.kubernetes.mpi_job import JOB_ENV, MpiJobLaunch, parse_job
from tenter.launch.backends.kubernetes.request import KubernetesRequest
from tenter.spec import JobSpec, load

HERE = Path(__file__).parent
SCRIPTS = HERE.parent / "scripts"

JOB_ID = "llm-20261122-032045-f845"


def p5_spec(**overrides: Any) -> JobSpec:
    """The 2-node p5 job; ``overrides`` merge into it key by key (as flags over a file)."""
    data: dict[str, Any] = {
        "name": "llm",
        "entry_point": "contract.py",
        "source_dir": str(SCRIPTS),
        "instance_count": 2,
        "instance_type": "ml.p5.48xlarge",
        # A value the kubelet would expand unless escaped: it must arrive verbatim.
        "hyperparameters": {"epochs": 3, "run_name": "$(HOSTNAME)-a"},
        "environment": {"NCCL_DEBUG": "INFO"},
        "max_run": 86400,
        "backend": "kubernetes",
        "kubernetes": {
            "image": "123456789012.dkr.ecr.us-west-2.amazonaws.com/train:1.0",
            "namespace": "ml",
            "service_account": "trainer",
            "volumes": [
                {"claim": "fsx-claim", "mount_path": "/fsx"},
                {
                    "claim": "fsx-claim",
                    "mount_path": "/data",
                    "sub_path": "data",
                    "read_only": True,
                },
            ],
        },
    }
    spec, _ = load(data, HERE, overrides)
    return spec


def dryrun(spec: JobSpec) -> KubernetesRequest:
    return KubernetesBackend().dryrun(spec, JOB_ID)


MPI = {"distribution": {"mpi": {"enabled": True}}}


def launcher_job(mpijob: dict[str, Any]) -> MpiJobLaunch:
    """The job an MPIJob's launcher pod is given, as the kubelet expands its value."""
    [launcher] = mpijob["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"]
    value: str = next(e["value"] for e in launcher["env"] if e["name"] == JOB_ENV)
    return parse_job(value.replace("$$", "$"))
