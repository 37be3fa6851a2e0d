"""``smdistributed.modelparallel.parameters``: SageMaker model parallelism (SMP v1) settings.

Kept as data for :mod:`tenter.parallel`; the documented rules are checked here so a spec
fails before launch rather than inside the library after minutes of queueing.
"""

from __future__ import annotations

import itertools
from typing import Literal

from pydantic import Field, PositiveInt

from tenter.spec.base import StrictModel
from tenter.spec.errors import Problem

_PLACEMENTS = {"cluster", "spread"} | {"".join(p) for p in itertools.permutations("DPT")}


class ModelParallelParameters(StrictModel):
    """The SMP parameters, with SMP's defaults. ``partitions``, the old name of
    ``pipeline_parallel_degree``, is renamed by :func:`tenter.spec.validate.parse`."""

    pipeline_parallel_degree: PositiveInt | None = None
    microbatches: PositiveInt = 1
    pipeline: Literal["interleaved", "simple"] = "interleaved"
    optimize: Literal["speed", "memory"] = "speed"
    placement_strategy: str = "cluster"
    ddp: bool = False
    horovod: bool = False
    tensor_parallel_degree: PositiveInt = 1
    sharded_data_parallel_degree: PositiveInt = 1
    auto_partition: bool = True
    default_partition: int | None = Field(default=None, ge=0)
    active_microbatches: PositiveInt | None = None
    memory_weight: float = Field(default=0.8, ge=0.0, le=1.0)
    contiguous: bool = True
    fp16: bool = False
    bf16: bool = False
    fp16_params: bool = False
    delayed_parameter_initialization: bool = False
    prescaled_batch: bool = False
    shard_optimizer_state: bool = False
    skip_tracing: bool = False
    offload_activations: bool = False
    activation_loading_horizon: PositiveInt = 4
    ddp_port: int | None = Field(default=None, ge=1, le=65535)
    ddp_dist_backend: Literal["auto", "nccl", "gloo"] = "auto"
    fast_mode: bool = False
    static_mode: bool = False
    predefined_hooks: bool = True

    def problems(self, world_size: int, path: str) -> list[Problem]:
        """The documented SMP rules that involve more than one field, or the world size."""
        out: list[Problem] = []
        pp = self.pipeline_parallel_degree
        if pp is None:
            out.append(
                Problem(
                    f"{path}.pipeline_parallel_degree",
                    "is required when modelparallel is enabled; set pipeline_parallel_degree: 1 "
                    "for no pipelining, or the number of pipeline stages",
                )
            )
            pp = 1
        tp = self.tensor_parallel_degree
        if world_size % (pp * tp):
            out.append(
                Problem(
                    path,
                    f"the world size {world_size} (hosts x processes_per_host) is not divisible by "
                    f"pipeline_parallel_degree x tensor_parallel_degree = {pp} x {tp} = {pp * tp}; "
                    "change the degrees or the number of processes",
                )
            )
        if not self.auto_partition and self.default_partition is None:
            out.append(
                Problem(
                    f"{path}.default_partition",
                    "is required when auto_partition is false: set the partition index "
                    f"(0..{pp - 1}) that modules without an explicit partition go to",
                )
            )
        if self.default_partition is not None and self.default_partition >= pp:
            out.append(
                Problem(
                    f"{path}.default_partition",
                    f"{self.default_partition} is not a partition: it must be less than "
                    f"pipeline_parallel_degree ({pp})",
                )
            )
        if self.placement_strategy not in _PLACEMENTS:
            out.append(
                Problem(
                    f"{path}.placement_strategy",
                    f"'{self.placement_strategy}' is not valid: use 'cluster', 'spread', or a "
                    "permutation of the letters D, P and T such as 'DPT' or 'PDT'",
                )
            )
        if self.active_microbatches is not None and self.active_microbatches > self.microbatches:
            out.append(
                Problem(
                    f"{path}.active_microbatches",
                    f"{self.active_microbatches} exceeds microbatches ({self.microbatches}); "
                    "lower it or raise microbatches",
                )
            )
        if self.ddp and self.horovod:
            out.append(Problem(path, "ddp and horovod are both true; choose one"))
        if self.fp16 and self.bf16:
            out.append(Problem(path, "fp16 and bf16 are both true; choose one precision"))
        sdp = self.sharded_data_parallel_degree
        if sdp > 1:
            if world_size % sdp:
                out.append(
                    Problem(
                        f"{path}.sharded_data_parallel_degree",
                        f"{sdp} does not divide the world size {world_size}",
                    )
                )
            if pp > 1:
                out.append(
                    Problem(
                        f"{path}.sharded_data_parallel_degree",
                        "sharded data parallelism does not compose with pipeline parallelism "
                        "in SMP; set pipeline_parallel_degree: 1 or "
                        "sharded_data_parallel_degree: 1",
                    )
                )
            if self.shard_optimizer_state:
                out.append(
                    Problem(
                        f"{path}.shard_optimizer_state",
                        "is redundant with sharded_data_parallel_degree > 1 (which shards the "
                        "optimizer state already); remove it",
                    )
                )
        return out
