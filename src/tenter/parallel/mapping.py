"""From the job's ``distribution`` to a :class:`ParallelConfig`: SageMaker's model-parallel
(SMP v1) parameters, mapped one by one.

A worker learns the distribution from ``TENTER_DISTRIBUTION`` (the spec's ``distribution`` as
JSON, exported by ``tenter run``), else from ``SM_HP_MP_PARAMETERS`` (the ``mp_parameters``
hyperparameter through which SageMaker hands SMP its parameters). Without either, the job is
plain data parallelism over all ranks.

=================================  ==========================================================
SMP parameter                      tenter.parallel
=================================  ==========================================================
pipeline_parallel_degree           ``pp`` (``partitions``, its old name, is renamed by the spec)
microbatches                       ``microbatches``
pipeline: simple                   GPipe (all forwards, then all backwards)
pipeline: interleaved              1F1B: SMP's "interleaved" alternates the forwards and
                                   backwards of microbatches on one stage per rank, which is
                                   1F1B; torch's *Interleaved1F1B* also gives each rank several
                                   virtual stages, which SMP does not (``schedule="interleaved"``
                                   asks for that explicitly)
placement_strategy                 the mesh order (:mod:`tenter.parallel.dims`)
ddp: true                          replication over the data-parallel ranks of each stage
                                   (FSDP2 with one shard: see data_parallel.py); false is
                                   only valid when there is one replica
sharded_data_parallel_degree       FSDP2 over ``dp_shard`` ranks, replicated (HSDP) over the
                                   rest; the spec rejects it together with pp > 1, as SMP does
auto_partition: true               ``partition="auto"``: blend of measured time and parameters
memory_weight                      the blend's weight on parameters (SMP's default 0.8)
skip_tracing: true                 ``partition="params"``: nothing is run to measure time
auto_partition: false              ``partition`` must be an explicit list of stage sizes;
                                   ``default_partition`` (required by the spec) then has no
                                   unassigned module to place
=================================  ==========================================================

Every other parameter is accepted at its default value only; any other value is an error that
says "not supported yet", never silently ignored.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from tenter.parallel.dims import ParallelDims
from tenter.spec.distribution import Distribution
from tenter.spec.errors import Problem, SpecError
from tenter.spec.modelparallel import ModelParallelParameters

Schedule = Literal["gpipe", "1f1b", "interleaved"]
PartitionMode = Literal["auto", "time", "params", "explicit"]
DataParallelMode = Literal["ddp", "fsdp", "none"]

ENV_DISTRIBUTION = "TENTER_DISTRIBUTION"
ENV_SMP_PARAMETERS = "SM_HP_MP_PARAMETERS"
SMP_PATH = "distribution.smdistributed.modelparallel.parameters"

# Parameters tenter.parallel does not implement: accepted at SMP's default only, with why.
_UNSUPPORTED = {
    "optimize": "'memory' trades speed for memory inside SMP's tensor parallelism",
    "horovod": "Horovod is not a data-parallel engine of tenter; use ddp: true",
    "tensor_parallel_degree": "tensor parallelism is not implemented",
    "active_microbatches": "1F1B already bounds the microbatches in flight by the stage count",
    "contiguous": "the partitioner only makes contiguous stages",
    "fp16": "mixed precision is left to the training script (torch.autocast)",
    "bf16": "mixed precision is left to the training script (torch.autocast)",
    "fp16_params": "mixed precision is left to the training script (torch.autocast)",
    "delayed_parameter_initialization": "build the model on the meta device yourself",
    "prescaled_batch": "it only applies to tensor parallelism",
    "shard_optimizer_state": "use sharded_data_parallel_degree (FSDP2) instead",
    "offload_activations": "activation offloading is not implemented",
    "activation_loading_horizon": "it only applies to offload_activations",
    "ddp_port": "replicas use the job's process group (MASTER_ADDR/MASTER_PORT)",
    "ddp_dist_backend": "replicas use the job's process group; set TENTER_PG_BACKEND to choose it",
    "fast_mode": "it only applies to SMP's tensor parallelism",
    "static_mode": "the schedules already infer shapes once",
    "predefined_hooks": "it only applies to tensor parallelism",
}


@dataclass(frozen=True)
class ParallelConfig:
    """How to parallelise: what a job's distribution asks of :mod:`tenter.parallel`."""

    pp: int = 1
    """Pipeline stages."""
    dp_shard: int = 1
    """Data-parallel ranks that shard each stage (FSDP2); the remaining data-parallel
    ranks replicate."""
    placement: str = "cluster"
    microbatches: int = 1
    schedule: Schedule = "1f1b"
    partition: PartitionMode = "auto"
    memory_weight: float = 0.8
    """Weight of parameters (vs measured time) in ``partition="auto"``."""
    data_parallel: DataParallelMode = "ddp"

    def dims(self, world_size: int, device_type: str = "cpu") -> ParallelDims:
        """The degrees on ``world_size`` ranks: data parallelism takes what pp leaves."""
        dims = ParallelDims(
            world_size=world_size,
            pp=self.pp,
            dp_shard=self.dp_shard,
            placement=self.placement,
            device_type=device_type,
        )
        if dims.dp > 1 and self.data_parallel == "none":
            raise ValueError(
                f"{dims.dp} data-parallel replicas ({world_size} ranks / pp {self.pp}) need "
                f"data parallelism, but ddp is false: set {SMP_PATH}.ddp: true, or "
                "pipeline_parallel_degree to the number of processes"
            )
        return dims


def from_smp(params: ModelParallelParameters) -> ParallelConfig:
    """The config of SMP parameters; raises :class:`SpecError` listing every parameter that
    is set to something tenter.parallel does not do."""
    defaults = ModelParallelParameters()
    problems = [
        Problem(
            f"{SMP_PATH}.{name}",
            f"{getattr(params, name)!r} is not supported yet by tenter.parallel ({why}); "
            f"remove it or set it to {getattr(defaults, name)!r}",
        )
        for name, why in _UNSUPPORTED.items()
        if getattr(params, name) != getattr(defaults, name)
    ]
    if params.auto_partition and params.default_partition is not None:
        problems.append(
            Problem(
                f"{SMP_PATH}.default_partition",
                f"{params.default_partition} has no effect with auto_partition: true "
                "(every block is placed by the partitioner); remove it",
            )
        )
    if problems:
        raise SpecError(problems)
    sdp = params.sharded_data_parallel_degree
    if sdp > 1:
        data_parallel: DataParallelMode = "fsdp"
    else:
        data_parallel = "ddp" if params.ddp else "none"
    if not params.auto_partition:
        partition: PartitionMode = "explicit"
    else:
        partition = "params" if params.skip_tracing else "auto"
    return ParallelConfig(
        pp=params.pipeline_parallel_degree or 1,
        dp_shard=sdp,
        placement=params.placement_strategy,
        microbatches=params.microbatches,
        schedule="gpipe" if params.pipeline == "simple" else "1f1b",
        partition=partition,
        memory_weight=params.memory_weight,
        data_parallel=data_parallel,
    )


def from_distribution(distribution: Distribution) -> ParallelConfig:
    params = distribution.model_parallel
    return ParallelConfig() if params is None else from_smp(params)


def from_env(environ: Mapping[str, str] | None = None) -> ParallelConfig:
    """The config of the running job (see the module docstring for where it is read)."""
    env = os.environ if environ is None else environ
    text = env.get(ENV_DISTRIBUTION)
    if text:
        return from_distribution(Distribution.model_validate(_json(ENV_DISTRIBUTION, text)))
    text = env.get(ENV_SMP_PARAMETERS)
    if text:
        data = _json(ENV_SMP_PARAMETERS, text)
        if isinstance(data, dict) and "partitions" in data:
            data.setdefault("pipeline_parallel_degree", data.pop("partitions"))
        return from_smp(ModelParallelParameters.model_validate(data))
    return ParallelConfig()


def _json(name: str, text: str) -> object:
    try:
        data: object = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{name} is not valid JSON ({e}): {text[:80]!r}") from e
    return data


def layout(config: ParallelConfig, world_size: int) -> str:
    """What ``tenter plan`` prints for a job's parallelism: degrees, which ranks form each
    pipeline and each data-parallel group, the schedule. The partition itself needs the
    model: the script prints it with ``tenter.parallel.describe(pipe)``."""
    dims = config.dims(world_size)
    dp_kind = {"ddp": "DDP", "fsdp": "FSDP2", "none": "none"}[config.data_parallel]
    partition = {
        "auto": f"auto (memory_weight {config.memory_weight:g})",
        "time": "measured time",
        "params": "parameter count",
        "explicit": "explicit stage sizes",
    }[config.partition]
    lines = [
        f"parallel: {dims}",
        f"  pipelines (pp groups): {_groups(dims.groups('pp'))}",
        f"  data parallel ({dp_kind}): {_groups(_dp_groups(dims))}",
        f"  schedule {config.schedule}, {config.microbatches} microbatches, partition {partition}",
    ]
    return "\n".join(lines)


def _dp_groups(dims: ParallelDims) -> list[list[int]]:
    by_stage: dict[tuple[int, int], list[int]] = {}
    for rank in range(dims.world_size):
        c = dims.coords(rank)
        by_stage.setdefault((c["pp"], c["tp"]), []).append(rank)
    return sorted(by_stage.values())


def _groups(groups: list[list[int]]) -> str:
    return " ".join("[" + ",".join(map(str, g)) + "]" for g in groups)
