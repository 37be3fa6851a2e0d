"""From the job's ``distribution`` to a :class:`ParallelConfig`: SageMaker's model-parallel
parameters, SMP v1's and SMP v2's, mapped one by one (SMP v2: see :func:`_from_v2` and
docs/parallel.md; the spec tells the versions apart).

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
tensor_parallel_degree             ``tp``: each block split by its type's plan
bf16: true                         FSDP2's mixed-precision policy (bf16 compute, fp32 reduce)
offload_activations: true          activation checkpointing and ``save_on_cpu`` per block
=================================  ==========================================================

Every other parameter is accepted at its default value only; any other value is an error that
says "not supported yet", never silently ignored.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast

from tenter.parallel.dims import ParallelDims
from tenter.spec.distribution import Distribution
from tenter.spec.errors import Problem, SpecError
from tenter.spec.modelparallel import ModelParallelParameters

Schedule = Literal["gpipe", "1f1b", "interleaved"]
PartitionMode = Literal["auto", "time", "params", "explicit"]
DataParallelMode = Literal["ddp", "fsdp", "none"]
MixedPrecision = Literal["fp32", "bf16"]

ENV_DISTRIBUTION = "TENTER_DISTRIBUTION"
ENV_SMP_PARAMETERS = "SM_HP_MP_PARAMETERS"
SMP_PATH = "distribution.smdistributed.modelparallel.parameters"


@dataclass(frozen=True)
class ParallelConfig:
    """How to parallelise: what a job's distribution asks of :mod:`tenter.parallel`."""

    pp: int = 1
    """Pipeline stages."""
    dp_shard: int = 1
    """Data-parallel ranks that shard each stage (FSDP2); -1: all of them."""
    dp_replicate: int = -1
    """Data-parallel replicas; -1: what the other degrees leave."""
    tp: int = 1
    """Tensor-parallel ranks that split each block (:mod:`tenter.parallel.tensor_parallel`)."""
    placement: str = "cluster"
    microbatches: int = 1
    schedule: Schedule = "1f1b"
    partition: PartitionMode = "auto"
    memory_weight: float = 0.8
    """Weight of parameters (vs measured time) in ``partition="auto"``."""
    data_parallel: DataParallelMode = "ddp"
    activation_checkpointing: bool = False
    """Recompute each block's activations in backward instead of keeping them."""
    offload_activations: bool = False
    """Keep the checkpointed blocks' inputs in host memory (torch's ``save_on_cpu``)."""
    mixed_precision: MixedPrecision = "fp32"
    """``bf16``: FSDP2 computes in bf16 and reduces gradients in fp32."""
    random_seed: int | None = None
    """Seeds torch on every rank in :func:`tenter.parallel.mesh` (SMP v2 ``random_seed``)."""
    allow_empty_shards: bool = False
    """Let tensor parallelism leave a rank an empty shard of a small parameter."""

    def dims(self, world_size: int, device_type: str = "cpu") -> ParallelDims:
        """The degrees on ``world_size`` ranks: data parallelism takes what the others leave."""
        dims = ParallelDims(
            world_size=world_size,
            pp=self.pp,
            dp_replicate=self.dp_replicate,
            dp_shard=self.dp_shard,
            tp=self.tp,
            placement=self.placement,
            device_type=device_type,
        )
        if dims.dp > 1 and self.data_parallel == "none":
            raise ValueError(
                f"{dims.dp} data-parallel replicas ({world_size} ranks / pp {self.pp} / tp "
                f"{self.tp}) need data parallelism, but ddp is false: set {SMP_PATH}.ddp: true, "
                "or pipeline_parallel_degree x tensor_parallel_degree to the number of processes"
            )
        return dims


def from_smp(params: ModelParallelParameters) -> ParallelConfig:
    """The config of SMP v1 or v2 parameters; raises :class:`SpecError` listing every
    parameter that is set to something tenter.parallel does not do, or v1 and v2 mixed."""
    if params.v1_parameters and params.v2_parameters:
        raise SpecError(params.problems(world_size=1, path=SMP_PATH))
    v2 = params.version == 2
    problems = params.unsupported(SMP_PATH)
    if not v2 and params.auto_partition and params.default_partition is not None:
        problems.append(
            Problem(
                f"{SMP_PATH}.default_partition",
                f"{params.default_partition} has no effect with auto_partition: true "
                "(every block is placed by the partitioner)",
                "remove it",
            )
        )
    if problems:
        raise SpecError(problems)
    return _from_v2(params) if v2 else _from_v1(params)


def _from_v1(params: ModelParallelParameters) -> ParallelConfig:
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
        tp=params.tensor_parallel_degree,
        placement=params.placement_strategy,
        microbatches=params.microbatches,
        schedule="gpipe" if params.pipeline == "simple" else "1f1b",
        partition=partition,
        memory_weight=params.memory_weight,
        data_parallel=data_parallel,
        activation_checkpointing=params.offload_activations,
        offload_activations=params.offload_activations,
        mixed_precision="bf16" if params.bf16 else "fp32",
    )


def _from_v2(params: ModelParallelParameters) -> ParallelConfig:
    """SMP v2 is FSDP with tensor parallelism: no pipeline, so one stage and one microbatch.
    ``fsdp_cache_flush_warnings`` concerns SMP's CUDA cache flushes, which tenter never does
    (so it never warns), whatever its value."""
    hsd = params.hybrid_shard_degree
    if hsd == 1:  # NO_SHARD: replicas only
        dp_replicate, dp_shard, data_parallel = -1, 1, "ddp"
    elif hsd == 0:  # FULL_SHARD over every data-parallel rank
        dp_replicate, dp_shard, data_parallel = 1, -1, "fsdp"
    else:  # HYBRID_SHARD: shard within groups of hsd, replicate across them
        dp_replicate, dp_shard, data_parallel = -1, hsd, "fsdp"
    return ParallelConfig(
        pp=1,
        dp_replicate=dp_replicate,
        dp_shard=dp_shard,
        tp=params.tensor_parallel_degree,
        microbatches=1,
        schedule="gpipe",
        partition="params",
        data_parallel=cast(DataParallelMode, data_parallel),
        activation_checkpointing=params.sm_activation_offloading,
        offload_activations=params.sm_activation_offloading,
        random_seed=params.random_seed,
        allow_empty_shards=params.allow_empty_shards,
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


_DIM_SOURCE = {
    "pp": "pipeline stages (pipeline_parallel_degree)",
    "dp_replicate": "replicas (ddp; HSDP's outer dimension)",
    "dp_shard": "FSDP2 shards (sharded_data_parallel_degree, hybrid_shard_degree)",
    "tp": "tensor parallel (tensor_parallel_degree)",
}


def mesh_lines(dims: ParallelDims) -> list[str]:
    """The mesh of ``dims``: its dimensions outermost first, each with its size, the SMP
    parameter it comes from and the groups of ranks that share it."""
    lines = [f"mesh: {dims}"]
    for name in dims.order:
        size = getattr(dims, name)
        groups = _groups(dims.groups(name)) if size > 1 else "every rank alone"
        lines.append(f"  {name} {size}, {_DIM_SOURCE[name]}: {groups}")
    return lines


def describe_mesh(distribution: Mapping[str, Any], world_size: int) -> list[str]:
    """What ``tenter plan`` shows of a job's device mesh, from its ``distribution`` (the
    spec's, as a dict): dimensions, sizes, which ranks share each group. Pure; raises
    :class:`SpecError` or ``ValueError`` as the worker would."""
    config = from_distribution(Distribution.model_validate(distribution))
    return mesh_lines(config.dims(world_size))


def layout(config: ParallelConfig, world_size: int) -> str:
    """What ``tenter plan`` prints for a job's parallelism: the mesh (:func:`mesh_lines`),
    pipelines and data-parallel groups, the schedule, memory savers. The partition itself
    needs the model: the script prints it with ``tenter.parallel.describe(pipe)``."""
    dims = config.dims(world_size)
    dp_kind = {"ddp": "DDP", "fsdp": "FSDP2", "none": "none"}[config.data_parallel]
    partition = {
        "auto": f"auto (memory_weight {config.memory_weight:g})",
        "time": "measured time",
        "params": "parameter count",
        "explicit": "explicit stage sizes",
    }[config.partition]
    savers = [
        name
        for name, on in (
            ("activation checkpointing", config.activation_checkpointing),
            ("activations offloaded to CPU", config.offload_activations),
            ("bf16 compute (FSDP2 mixed precision)", config.mixed_precision == "bf16"),
        )
        if on
    ]
    lines = [
        f"parallel: {dims}",
        f"  pipelines (pp groups): {_groups(dims.groups('pp'))}",
        f"  data parallel ({dp_kind}): {_groups(_dp_groups(dims))}",
        f"  schedule {config.schedule}, {config.microbatches} microbatches, partition {partition}",
        *(["  " + ", ".join(savers)] if savers else []),
        *mesh_lines(dims)[1:],  # the first line repeats the degrees
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
