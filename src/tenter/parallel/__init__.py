"""``tenter.parallel``: pipeline parallelism with automatic partitioning, tensor parallelism by
per-block plans, and FSDP2 data parallelism (replicated, sharded, hybrid), on one device mesh
configured by the job's ``distribution`` (SageMaker's model-parallel parameters, SMP v1 or v2).

.. code-block:: python

    import tenter
    from tenter import parallel

    tenter.init()
    mesh = parallel.mesh()          # pp x dp x tp from the job (SMP v1 or v2 parameters)
    pipe = parallel.pipeline(model, mesh, loss_fn=loss, example_input=x)
    optimizer = torch.optim.AdamW(pipe.parameters())
    for inputs, targets in loader:
        loss = pipe.step(inputs, target=targets)   # the global mean loss on the last stage
        optimizer.step()
        optimizer.zero_grad()
    parallel.rank_info(mesh)        # pp_rank, dp_rank, tp_rank and the sizes

Explicit arguments override what the job's distribution says. No state is kept here: every
helper is handed the mesh (as torchtitan hands its ``ParallelDims``). See docs/parallel.md.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh

from tenter.parallel.dims import ParallelDims, dims_of
from tenter.parallel.mapping import (
    DataParallelMode,
    MixedPrecision,
    ParallelConfig,
    PartitionMode,
    Schedule,
    describe_mesh,
    from_env,
    layout,
)
from tenter.parallel.partition import Partition, balance
from tenter.parallel.pipeline import Blocks, LossFn, Pipeline, build_pipeline
from tenter.parallel.tensor_parallel import apply_tp, tp_plan
from tenter.runtime import api

__all__ = [
    "ParallelConfig",
    "ParallelDims",
    "Partition",
    "Pipeline",
    "RankInfo",
    "apply_tp",
    "balance",
    "config",
    "describe",
    "describe_mesh",
    "dp_rank",
    "dp_size",
    "layout",
    "mesh",
    "mesh_device_type",
    "pipeline",
    "pp_rank",
    "pp_size",
    "rank_info",
    "tp_plan",
    "tp_rank",
    "tp_size",
]


def config(
    *,
    pp: int | None = None,
    dp_shard: int | None = None,
    tp: int | None = None,
    placement: str | None = None,
) -> ParallelConfig:
    """The job's :class:`ParallelConfig` (from ``TENTER_DISTRIBUTION``), with the arguments
    that are not ``None`` overriding it (an explicit ``dp_shard`` leaves the replicas to
    whatever the other degrees leave)."""
    base = from_env()
    return dataclasses.replace(
        base,
        pp=base.pp if pp is None else pp,
        dp_replicate=base.dp_replicate if dp_shard is None else -1,
        dp_shard=base.dp_shard if dp_shard is None else dp_shard,
        tp=base.tp if tp is None else tp,
        placement=base.placement if placement is None else placement,
    )


def mesh(
    *,
    pp: int | None = None,
    dp_shard: int | None = None,
    tp: int | None = None,
    placement: str | None = None,
    device_type: str | None = None,
) -> DeviceMesh:
    """The device mesh of this job, dimensions ``pp``, ``dp_replicate``, ``dp_shard``,
    ``tp``, ordered by the placement. Call after ``tenter.init()``, on every rank, before
    building the model: with SMP v2's ``random_seed`` it seeds torch here."""
    if not dist.is_initialized():
        raise RuntimeError(
            "tenter.parallel.mesh() needs the process group: call tenter.init() first"
        )
    cfg = config(pp=pp, dp_shard=dp_shard, tp=tp, placement=placement)
    available = torch.cuda.is_available()
    device_type = mesh_device_type(
        device_type,
        cuda_available=available,
        visible_gpus=torch.cuda.device_count() if available else 0,
        local_rank=api.local_rank(),
        local_world_size=api.local_world_size(),
    )
    dims = cfg.dims(dist.get_world_size(), device_type)
    if cfg.random_seed is not None:
        torch.manual_seed(cfg.random_seed)
    return dims.mesh


def mesh_device_type(
    requested: str | None,
    *,
    cuda_available: bool,
    visible_gpus: int,
    local_rank: int,
    local_world_size: int,
) -> str:
    """The mesh's device type: ``requested``, else ``cuda`` when this rank has a GPU of its
    own (:func:`tenter.runtime.api.own_gpu`), else ``cpu``. A CUDA mesh on ranks that share
    GPUs is refused here: NCCL would abort the ranks ("Duplicate GPU detected")."""
    own = api.own_gpu(cuda_available, visible_gpus, local_rank, local_world_size)
    if requested is None:
        return "cpu" if own is None else "cuda"
    if requested == "cuda" and own is None:
        why = (
            "CUDA is not available"
            if not cuda_available
            else f"{local_world_size} ranks on this host and {visible_gpus} visible GPUs"
        )
        raise ValueError(
            f"device_type='cuda' needs a GPU per rank and this rank has none of its own "
            f"({why}); run at most one process per GPU, or leave device_type out for a CPU mesh"
        )
    return requested


def pipeline(
    blocks: Blocks,
    device_mesh: DeviceMesh,
    *,
    loss_fn: LossFn,
    microbatches: int | None = None,
    schedule: Schedule | None = None,
    partition: PartitionMode | Sequence[int] | None = None,
    example_input: torch.Tensor | tuple[torch.Tensor, ...] | None = None,
    virtual_stages: int | None = None,
    data_parallel: DataParallelMode | None = None,
    memory_weight: float | None = None,
    memory_cap: float | None = None,
    activation_checkpointing: bool | None = None,
    offload_activations: bool | None = None,
    mixed_precision: MixedPrecision | None = None,
) -> Pipeline:
    """:func:`tenter.parallel.pipeline.build_pipeline`, with every argument left ``None``
    taken from the job's distribution (:func:`from_env`; :func:`mesh`'s arguments override
    only the degrees, which ``device_mesh`` carries).

    ``partition``: ``"auto"`` (measured time blended with parameters by ``memory_weight``),
    ``"time"``, ``"params"``, or a list of blocks per stage. ``memory_cap``: the most
    parameter bytes a stage may hold. With ``tp`` > 1 each block is split by the plan
    registered for its type (:func:`tp_plan`). ``activation_checkpointing``: recompute each
    block's activations in backward; ``offload_activations``: keep saved activations in host
    memory; ``mixed_precision="bf16"``: FSDP2 computes in bf16, reduces in fp32."""
    cfg = from_env()
    return build_pipeline(
        blocks,
        device_mesh,
        loss_fn=loss_fn,
        microbatches=cfg.microbatches if microbatches is None else microbatches,
        schedule=cfg.schedule if schedule is None else schedule,
        partition=cfg.partition if partition is None else partition,
        example_input=example_input,
        virtual_stages=virtual_stages,
        data_parallel_mode=cfg.data_parallel if data_parallel is None else data_parallel,
        memory_weight=cfg.memory_weight if memory_weight is None else memory_weight,
        memory_cap=memory_cap,
        activation_checkpointing=_given(activation_checkpointing, cfg.activation_checkpointing),
        offload_activations=_given(offload_activations, cfg.offload_activations),
        mixed_precision=cfg.mixed_precision if mixed_precision is None else mixed_precision,
        allow_empty_shards=cfg.allow_empty_shards,
    )


def _given(value: bool | None, default: bool) -> bool:
    return default if value is None else value


@dataclass(frozen=True)
class RankInfo:
    """Where this rank sits in the mesh (SMP's ``smp.pp_rank()``, ``smp.dp_rank()``, ...)."""

    rank: int
    world_size: int
    pp_rank: int
    pp_size: int
    dp_rank: int
    dp_size: int
    tp_rank: int
    tp_size: int
    dp_replicate_rank: int
    dp_shard_rank: int


def rank_info(device_mesh: DeviceMesh) -> RankInfo:
    """This rank's coordinates in ``device_mesh`` (the one :func:`mesh` returned)."""
    dims = dims_of(device_mesh)
    rank = dist.get_rank()
    c = dims.coords(rank)
    return RankInfo(
        rank=rank,
        world_size=dims.world_size,
        pp_rank=c["pp"],
        pp_size=dims.pp,
        dp_rank=c["dp_replicate"] * dims.dp_shard + c["dp_shard"],
        dp_size=dims.dp,
        tp_rank=c["tp"],
        tp_size=dims.tp,
        dp_replicate_rank=c["dp_replicate"],
        dp_shard_rank=c["dp_shard"],
    )


def pp_rank(device_mesh: DeviceMesh) -> int:
    return rank_info(device_mesh).pp_rank


def pp_size(device_mesh: DeviceMesh) -> int:
    return rank_info(device_mesh).pp_size


def dp_rank(device_mesh: DeviceMesh) -> int:
    return rank_info(device_mesh).dp_rank


def dp_size(device_mesh: DeviceMesh) -> int:
    return rank_info(device_mesh).dp_size


def tp_rank(device_mesh: DeviceMesh) -> int:
    return rank_info(device_mesh).tp_rank


def tp_size(device_mesh: DeviceMesh) -> int:
    return rank_info(device_mesh).tp_size


def describe(pipe: Pipeline) -> str:
    """The partition of ``pipe``: blocks, parameters and estimated time of every stage."""
    return pipe.describe()
