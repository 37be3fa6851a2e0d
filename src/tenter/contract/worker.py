"""The worker contract: one function builds what every process of a job sees, for every backend.

Layers, later wins: tenter's defaults (unbuffered output, one OpenMP thread per core share),
the instance type's fabric variables (:mod:`~tenter.contract.fabric`), the spec's
``environment``, tenter's own ``TENTER_*`` (job, host, distribution, checkpoints), and the
SageMaker training contract's ``SM_*`` (:mod:`~tenter.contract.sagemaker`); per rank, the
torchrun variables (:mod:`~tenter.contract.torchrun`).

The local, mpi and Slurm backends put :func:`host_env` in their plan; Kubernetes renders it
into the pod template. Only the variables in :data:`PLACEMENT` may differ between backends
for the same spec: they name where a job runs (hosts, addresses, ports, interfaces, paths),
not what it does. ``tests/contract/test_conformance.py`` plans one spec on every backend and
holds them to that.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePath

from tenter.contract import sagemaker
from tenter.contract.fabric import fabric_env, socket_env
from tenter.contract.torchrun import SIGNALS_TO_HANDLE
from tenter.spec import JobSpec
from tenter.spec.catalog import InstanceType

PLACEMENT = frozenset(
    {
        # which host, at which address, on which interface
        "TENTER_HOST",
        "TENTER_HOST_INDEX",
        "TENTER_HOST_ADDR",
        "SM_CURRENT_HOST",
        "SM_HOSTS",
        "SM_CURRENT_INSTANCE_GROUP_HOSTS",
        "SM_INSTANCE_GROUPS_DICT",
        "SM_NETWORK_INTERFACE_NAME",
        "SM_RESOURCE_CONFIG",
        "NCCL_SOCKET_IFNAME",
        "GLOO_SOCKET_IFNAME",
        "MASTER_ADDR",
        "MASTER_PORT",
        "TORCHFT_LIGHTHOUSE",
        # which of the machine's GPUs a simulated host has (tenter.spec.gpus), and how many
        # GPUs and cores it has: the machine's share on simulated hosts, the type's elsewhere
        "CUDA_VISIBLE_DEVICES",
        "SM_NUM_GPUS",
        "SM_NUM_CPUS",
        # threads per rank: simulated hosts share one machine's cores
        "OMP_NUM_THREADS",
        # paths on the host
        "TENTER_JOB_DIR",
        "TENTER_CHECKPOINT_DIR",
        "TORCHINDUCTOR_CACHE_DIR",
        "TORCHELASTIC_ERROR_FILE",
        "TENTER_RANK_LOGS",
        "SM_MODULE_DIR",
        "SM_MODEL_DIR",
        "SM_INPUT_DIR",
        "SM_INPUT_CONFIG_DIR",
        "SM_OUTPUT_DIR",
        "SM_OUTPUT_DATA_DIR",
        "SM_OUTPUT_INTERMEDIATE_DIR",
        "SM_CHANNELS",
        "SM_INPUT_DATA_CONFIG",
        # holds all of the above for the current host
        "SM_TRAINING_ENV",
    }
)
"""Variables whose values name hosts, addresses, ports, interfaces or paths (and those made of
them): the only ones that may differ between backends for the same spec."""
PLACEMENT_PREFIXES = ("SM_CHANNEL_",)
"""Families of placement variables: ``SM_CHANNEL_<NAME>`` is a path."""


QUORUM_RETRIES = "59"
"""``TORCHFT_QUORUM_RETRIES`` of a ``fault_tolerance`` job unless its ``environment`` sets it."""


def is_placement(name: str) -> bool:
    return name in PLACEMENT or name.startswith(PLACEMENT_PREFIXES)


@dataclass(frozen=True)
class HostShare:
    """What of this machine a simulated host has: the GPUs its ranks get (its slice,
    :mod:`tenter.spec.gpus`: 0 on a machine without GPUs, or where they are too few for one per
    rank) and its cores (the machine's divided by the simulated hosts, at least 1). Its
    ``SM_NUM_GPUS`` and ``SM_NUM_CPUS`` say these, as SageMaker's toolkit counts what the host
    has, whatever the instance type's catalog entry says."""

    gpus: int
    cpus: int


@dataclass(frozen=True)
class Placement:
    """Where one host of a job is: everything :func:`host_env` takes that is not the spec."""

    job_id: str
    job_dir: PurePath
    host: str
    """This host's name (``algo-N``); on Kubernetes a ``$(TENTER_HOST)`` reference."""
    host_index: str
    host_addr: str
    hosts: Sequence[str]
    host_dir: PurePath
    """The host's ``/opt/ml`` directory."""
    network_interface: str
    module_dir: str
    """Where the entry point is on the host."""
    checkpoint_dir: str
    channels: dict[str, str]
    """Channel name -> its path on the host."""
    share: HostShare | None
    """This host's share of the machine where the hosts are simulated on one; None: a host of
    its own, with what its instance type has."""
    pin_interface: bool = False
    """Every socket library must use ``network_interface`` (isolated hosts, whose hostname
    resolves to no address: gloo would otherwise fall back to loopback)."""
    cache_dir: PurePath | None = None
    """tenter's cache (torch's compile cache) where the hosts share one; None: torch's default."""
    replica_group: int | None = None
    """The host's torchft replica group (``fault_tolerance``)."""
    lighthouse: str = ""
    """torchft's lighthouse address (``fault_tolerance``)."""


def entry_name(spec: JobSpec) -> str:
    return spec.entry_point or spec.module or " ".join(spec.command or [])


def host_env(spec: JobSpec, itype: InstanceType, procs: int, where: Placement) -> dict[str, str]:
    """Every variable a process on the host ``where`` gets, beyond the torchrun ones."""
    gpus, cpus = (where.share.gpus, where.share.cpus) if where.share else (itype.gpus, itype.cpus)
    distribution = spec.distribution.model_dump()
    pg_backend = spec.resolved_process_group_backend()
    checkpoints = {
        "TENTER_CHECKPOINT_DIR": where.checkpoint_dir,
        "TENTER_CHECKPOINT_KEEP": str(spec.checkpoint.keep),
        # Read by tenter.runtime.preemption: 0 leaves SIGTERM to stop the ranks at once.
        "TENTER_PREEMPTION_GRACE": str(spec.checkpoint.preemption_grace),
        # torchrun (Kubernetes pods) SIGKILLs the ranks this long after passing SIGTERM on
        # (its default, 30 s, would cut a longer grace period short); tenter's agents ignore it.
        "TORCH_ELASTIC_SHUTDOWN_TIMEOUT": str(spec.checkpoint.preemption_grace + 10),
        **(
            {"TENTER_CHECKPOINT_EVERY": str(spec.checkpoint.every)} if spec.checkpoint.every else {}
        ),
    }
    env = {
        "PYTHONUNBUFFERED": "1",
        # The host's cores shared by its ranks (torchrun's default is 1 thread per worker).
        "OMP_NUM_THREADS": str(max(1, cpus // procs)),
        "TORCHELASTIC_SIGNALS_TO_HANDLE": SIGNALS_TO_HANDLE,
        **fabric_env(itype, where.network_interface),
        **(socket_env(where.network_interface) if where.pin_interface else {}),
        **({"TENTER_PG_BACKEND": pg_backend} if pg_backend else {}),
        # torch's compile cache, shared by jobs, instead of a directory left in /tmp.
        **(
            {"TORCHINDUCTOR_CACHE_DIR": str(where.cache_dir / "torchinductor")}
            if where.cache_dir
            else {}
        ),
        **spec.environment,
        "TENTER_JOB_ID": where.job_id,
        "TENTER_JOB_DIR": str(where.job_dir),
        "TENTER_NUM_HOSTS": str(len(where.hosts)),
        "TENTER_HOST": where.host,
        "TENTER_HOST_INDEX": where.host_index,
        "TENTER_HOST_ADDR": where.host_addr,
        # The job's distribution config, for the libraries that act on it (tenter.parallel).
        "TENTER_DISTRIBUTION": json.dumps(distribution, separators=(",", ":")),
        **checkpoints,
    }
    if spec.fault_tolerance is not None:
        # What torchft's Manager and its examples read; RANK, WORLD_SIZE, MASTER_ADDR and
        # MASTER_PORT (torch's, per rank) count within the replica group.
        env |= {
            "TORCHFT_LIGHTHOUSE": where.lighthouse,
            "REPLICA_GROUP_ID": str(where.replica_group),
            "NUM_REPLICA_GROUPS": str(spec.fault_tolerance.replica_groups),
            "TENTER_MIN_REPLICAS": str(spec.fault_tolerance.min_replicas),
        }
        # A manager whose quorum request fails (the lighthouse died) retries it, against the
        # lighthouse the launcher restarted, instead of hanging until its quorum timeout
        # (torchft's default: no retry). Each retry waits quorum_timeout / (retries + 1):
        # a second, with torchft's 60 s timeout.
        env.setdefault("TORCHFT_QUORUM_RETRIES", QUORUM_RETRIES)
    if spec.elastic.max_restarts > 0:
        # torch reuses rank 0's shared store across rendezvous rounds without a per-round
        # prefix, so a restarted group would read the previous attempt's gloo addresses.
        # Opting out gives each attempt a fresh store, served by its rank 0 worker.
        env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
    return {
        **env,
        **sagemaker.sagemaker_env(
            job_name=where.job_id,
            current_host=where.host,
            hosts=list(where.hosts),
            host_dir=where.host_dir,
            instance_type=itype.sagemaker_name,
            num_gpus=gpus,
            num_cpus=cpus,
            num_neurons=itype.neuron_cores,
            network_interface=where.network_interface,
            hyperparameters=spec.hyperparameters,
            channels=where.channels,
            entry_point=entry_name(spec),
            module_dir=where.module_dir,
            distribution=distribution,
        ),
    }


BOOTSTRAP = "tenter.runtime.bootstrap"


def worker_argv(spec: JobSpec, python: str, module_dir: str) -> list[str]:
    """The command of every rank (the per-rank differences are all in the environment).

    Python entries run under tenter's bootstrap, which records an uncaught exception with its
    traceback in the rank's error file: that is how the failure summary names the first
    failing rank's traceback without the script changing."""
    user_args = [*sagemaker.hyperparameter_args(spec.hyperparameters), *spec.args]
    bootstrap = [python, "-m", BOOTSTRAP]
    if spec.entry_point is not None:
        return [*bootstrap, str(PurePath(module_dir) / spec.entry_point), *user_args]
    if spec.module is not None:
        return [*bootstrap, "-m", spec.module, *user_args]
    assert spec.command is not None, "the spec check requires one entry"
    return [*spec.command, *user_args]
