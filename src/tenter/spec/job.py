"""The job spec: one model for YAML files, CLI flags and the Python ``Estimator``.

Field names follow the SageMaker Python SDK where one exists (``entry_point``,
``source_dir``, ``hyperparameters``, ``instance_count``, ``instance_type``,
``distribution``, ``max_run``), so a SageMaker job translates key for key.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AliasChoices, BeforeValidator, Field, JsonValue, NonNegativeInt, PositiveInt

from tenter.spec.base import Seconds, StrictModel
from tenter.spec.distribution import Distribution
from tenter.spec.elastic import Checkpoint, Elastic
from tenter.spec.errors import FieldError
from tenter.spec.fault_tolerance import FaultTolerance
from tenter.spec.kubernetes import KubernetesOptions
from tenter.spec.mpi_options import MpiOptions
from tenter.spec.mpirun import MpirunOptions
from tenter.spec.ray import RayOptions
from tenter.spec.secrets import Secrets
from tenter.spec.slurm import SlurmOptions
from tenter.spec.stragglers import Stragglers


def _variable_text(value: object) -> object:
    """An environment value as text. YAML reads ``OMP_NUM_THREADS: 1`` as a number, which
    means "1". A YAML boolean is refused instead: ``on``, ``yes`` and ``true`` all read as
    True, and no spelling is right for every program (NCCL wants 1, others true or yes);
    SageMaker and Kubernetes refuse a non-text value too."""
    if isinstance(value, bool):
        raise FieldError(
            f"{value} is a YAML boolean (yes, no, on, off, true and false all read as one), "
            "but a variable holds text",
            "quote the value the program expects, e.g. '1' or '0'",
        )
    return str(value) if isinstance(value, int | float) else value


VariableText = Annotated[str, BeforeValidator(_variable_text)]


class LogOptions(StrictModel):
    ranks: list[NonNegativeInt] | None = None
    """Global ranks whose output the console shows (all when unset); every rank's output
    is written to its log file regardless."""
    tag: bool = True
    """Prefix console lines with ``[host,rank]<stream>:`` as ``mpirun --tag-output`` does."""


class JobSpec(StrictModel):
    """A training job, independent of where it runs."""

    name: str = Field(default="tenter", pattern=r"^[a-zA-Z0-9](-*[a-zA-Z0-9])*$", max_length=63)
    """Job name; the job id is this name plus a timestamp (SageMaker's base_job_name)."""
    entry_point: str | None = None
    """Python script to run, relative to ``source_dir``."""
    module: str | None = None
    """Python module to run as ``python -m MODULE`` (instead of ``entry_point``)."""
    command: list[str] | None = None
    """Any executable and its arguments (instead of ``entry_point``)."""
    args: list[str] = Field(default_factory=list)
    """Arguments appended verbatim after the hyperparameter arguments."""
    source_dir: str = "."
    """Working directory of every process; ``entry_point`` is relative to it."""
    hyperparameters: dict[str, JsonValue] = Field(default_factory=dict)
    """Passed as ``--key value`` arguments, ``SM_HP_<KEY>`` and hyperparameters.json."""
    environment: dict[str, VariableText] = Field(default_factory=dict)
    """Extra environment variables for every process."""
    secrets: Secrets = Field(default_factory=list)
    """Variables whose values the job takes from the environment tenter runs in (or, on
    Kubernetes, variable -> ``{secret, key}`` of a Secret): every process gets them, and
    only their names are written anywhere (docs/security.md)."""
    channels: dict[str, str] = Field(default_factory=dict)
    """Input channels: name -> local path (linked into ``input/data/<name>``)."""
    output_dir: str | None = None
    """Where job directories are created (default ``$TENTER_HOME/jobs``, ~/.tenter/jobs)."""
    output_group: str | None = Field(
        default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_.-]*$", max_length=32
    )
    """A group whose members may read the job's directory and checkpoints; by default they
    are the user's alone (0700: docs/security.md)."""
    instance_count: PositiveInt = Field(
        default=1, validation_alias=AliasChoices("instance_count", "hosts")
    )
    """Number of hosts (``hosts`` is accepted as another name)."""
    instance_type: str = "local"
    """An instance type of the catalog (``ml.p4d.24xlarge``...), or ``local``: this machine."""
    processes_per_host: PositiveInt | None = None
    """Worker processes per host (default: the instance type's GPUs, or 1 without GPUs)."""
    distribution: Distribution = Distribution()
    max_run: Seconds | None = None
    """Seconds after which the job is stopped (SageMaker's max_run)."""
    process_group_backend: Literal["auto", "gloo", "nccl", "tenter"] = "auto"
    """The torch.distributed backend of ``tenter.init()``: ``tenter`` (shared-memory
    collectives, NCCL for CUDA tensors), ``gloo``, ``nccl``; ``auto`` is ``tenter`` when
    SMDDP is enabled (smdistributed.dataparallel or pytorchddp), else gloo for CPU tensors
    with NCCL for CUDA ones."""
    elastic: Elastic = Elastic()
    checkpoint: Checkpoint = Checkpoint()
    fault_tolerance: FaultTolerance | None = None
    """Replica groups under torchft (docs/fault_tolerance.md); None: one group, no torchft."""
    backend: str = "local"
    """Where the job runs: ``local`` (this machine, hosts simulated), ``mpi`` (mpirun),
    ``slurm`` (sbatch), ``kubernetes`` or ``ray`` (docs/ray.md); see docs/backends.md."""
    isolation: Literal["none", "network"] = "none"
    """``network``: each simulated host in network, UTS and mount namespaces of its own (its
    own address, hostname and ``/dev/shm``, on a private bridge), as on a real cluster; needs
    root or unprivileged user namespaces (docs/isolation.md). ``none``: hosts share this
    machine's network, each on a loopback address of its own."""
    logs: LogOptions = LogOptions()
    stragglers: Stragglers = Stragglers()
    """When a rank counts as a straggler (docs/goodput.md)."""
    kubernetes: KubernetesOptions = KubernetesOptions()
    """Image, namespace and volumes of the job on ``backend: kubernetes``."""
    slurm: SlurmOptions = SlurmOptions()
    """Partition, account, QOS, container image... of the job on ``backend: slurm``."""
    mpirun: MpirunOptions = MpirunOptions()
    """Hostfile and MCA parameters of the job on ``backend: mpi``."""
    ray: RayOptions = RayOptions()
    """Cluster address, resources per host and name of the job on ``backend: ray``."""

    def mpi_options(self) -> MpiOptions:
        """The user's mpirun options: ``custom_mpi_options`` and ``mpirun.mca`` (a parameter
        set in both is refused by the spec check)."""
        return MpiOptions(mca=dict(self.mpirun.mca)).merged_over(
            self.distribution.user_mpi_options()
        )

    def resolved_process_group_backend(self) -> str | None:
        """What ``process_group_backend`` means for this job; None leaves the choice to
        ``tenter.init()``'s default (gloo, plus NCCL where CUDA is)."""
        if self.process_group_backend != "auto":
            return self.process_group_backend
        # SMDDP is SageMaker's collective library registered as a torch backend; tenter's
        # own backend plays that part here.
        return "tenter" if self.distribution.data_parallel else None
