"""The documented SMP rules that involve more than one parameter of
:class:`tenter.spec.modelparallel.ModelParallelParameters`, or the world size: SMP v1's
(pipelines) and SMP v2's (FSDP shards), each checked before launch."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

from tenter.spec.errors import Problem

if TYPE_CHECKING:
    from tenter.spec.modelparallel import ModelParallelParameters

PLACEMENTS = {"cluster", "spread"} | {"".join(p) for p in itertools.permutations("DPT")}
"""SMP v1's ``placement_strategy`` values."""


def v2_problems(params: ModelParallelParameters, world_size: int, path: str) -> list[Problem]:
    out: list[Problem] = []
    for name in ("tensor_parallel_degree", "context_parallel_degree", "expert_parallel_degree"):
        degree = getattr(params, name)
        if world_size % degree:
            out.append(
                Problem(
                    f"{path}.{name}",
                    f"{degree} does not divide the world size {world_size} (hosts x "
                    "processes_per_host)",
                    "choose a divisor or change the number of processes",
                )
            )
    tp, hsd, cp = (
        params.tensor_parallel_degree,
        params.hybrid_shard_degree,
        params.context_parallel_degree,
    )
    if hsd > world_size:
        out.append(
            Problem(
                f"{path}.hybrid_shard_degree",
                f"{hsd} exceeds the world size {world_size}",
                f"use 0 (shard over every data-parallel rank) up to {world_size}",
            )
        )
    elif hsd and world_size % tp == 0 and (world_size // tp) % hsd:
        out.append(
            Problem(
                f"{path}.hybrid_shard_degree",
                f"{hsd} does not divide the {world_size // tp} data-parallel ranks (world "
                f"size {world_size} / tensor_parallel_degree {tp})",
                "choose a divisor",
            )
        )
    if hsd and cp > hsd:
        out.append(
            Problem(
                f"{path}.context_parallel_degree",
                f"{cp} exceeds hybrid_shard_degree ({hsd}): SMP v2 shards context-parallel "
                "ranks' states within one shard group",
                "lower it or raise hybrid_shard_degree",
            )
        )
    return out


def v1_problems(params: ModelParallelParameters, world_size: int, path: str) -> list[Problem]:
    """SMP v1's rules: its degrees against the world size, its partitions, its options."""
    pp = params.pipeline_parallel_degree or 1
    return [
        *_v1_degrees(params, world_size, path),
        *_v1_options(params, path),
        *_v1_sharding(params, world_size, pp, path),
    ]


def _v1_degrees(params: ModelParallelParameters, world_size: int, path: str) -> list[Problem]:
    out: list[Problem] = []
    pp = params.pipeline_parallel_degree
    if pp is None:
        out.append(
            Problem(
                f"{path}.pipeline_parallel_degree",
                "is required when modelparallel is enabled",
                "set pipeline_parallel_degree: 1 for no pipelining, or the number of pipeline "
                "stages (SMP v1), or write SMP v2 parameters such as hybrid_shard_degree",
            )
        )
        pp = 1
    tp = params.tensor_parallel_degree
    if world_size % (pp * tp):
        out.append(
            Problem(
                path,
                f"the world size {world_size} (hosts x processes_per_host) is not divisible by "
                f"pipeline_parallel_degree x tensor_parallel_degree = {pp} x {tp} = {pp * tp}",
                "change the degrees or the number of processes",
            )
        )
    if not params.auto_partition and params.default_partition is None:
        out.append(
            Problem(
                f"{path}.default_partition",
                "is required when auto_partition is false",
                f"set the partition index (0..{pp - 1}) that modules without an explicit "
                "partition go to",
            )
        )
    if params.default_partition is not None and params.default_partition >= pp:
        out.append(
            Problem(
                f"{path}.default_partition",
                f"{params.default_partition} is not a partition",
                f"make it less than pipeline_parallel_degree ({pp})",
            )
        )
    if params.placement_strategy not in PLACEMENTS:
        out.append(
            Problem(
                f"{path}.placement_strategy",
                f"'{params.placement_strategy}' is not valid",
                "use 'cluster', 'spread', or a permutation of the letters D, P and T such as "
                "'DPT' or 'PDT'",
            )
        )
    return out


def _v1_options(params: ModelParallelParameters, path: str) -> list[Problem]:
    out: list[Problem] = []
    if params.active_microbatches is not None and params.active_microbatches > params.microbatches:
        out.append(
            Problem(
                f"{path}.active_microbatches",
                f"{params.active_microbatches} exceeds microbatches ({params.microbatches})",
                "lower it or raise microbatches",
            )
        )
    if params.ddp and params.horovod:
        out.append(Problem(path, "ddp and horovod are both true", "choose one"))
    if params.fp16 and params.bf16:
        out.append(Problem(path, "fp16 and bf16 are both true", "choose one precision"))
    return out


def _v1_sharding(
    params: ModelParallelParameters, world_size: int, pp: int, path: str
) -> list[Problem]:
    out: list[Problem] = []
    sdp = params.sharded_data_parallel_degree
    if sdp > 1:
        if world_size % sdp:
            out.append(
                Problem(
                    f"{path}.sharded_data_parallel_degree",
                    f"{sdp} does not divide the world size {world_size}",
                    "choose a divisor or change the number of processes",
                )
            )
        if pp > 1:
            out.append(
                Problem(
                    f"{path}.sharded_data_parallel_degree",
                    "sharded data parallelism does not compose with pipeline parallelism in SMP",
                    "set pipeline_parallel_degree: 1 or sharded_data_parallel_degree: 1",
                )
            )
        if params.shard_optimizer_state:
            out.append(
                Problem(
                    f"{path}.shard_optimizer_state",
                    "is redundant with sharded_data_parallel_degree > 1 (which shards the "
                    "optimizer state already)",
                    "remove it",
                )
            )
    return out
