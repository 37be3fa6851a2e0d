"""``smdistributed.modelparallel.parameters``: SageMaker model parallelism settings, SMP v1
(``smdistributed.modelparallel``) and SMP v2 (``torch.sagemaker``) alike.

The two versions share the key but not the parameters: v1 pipelines (``pipeline_parallel_degree``,
``microbatches``, ``ddp``...), v2 shards with FSDP (``hybrid_shard_degree``,
``context_parallel_degree``...); ``tensor_parallel_degree`` and ``activation_loading_horizon``
belong to both. Which version a spec speaks is read from the parameters that differ from their
defaults (the launcher hands workers every field, set or not), and mixing them is an error.
Kept as data for :mod:`tenter.parallel`; the documented rules are checked here so a spec fails
before launch rather than inside the library after minutes of queueing.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, NonNegativeInt, PositiveInt

from tenter.spec import smp_rules
from tenter.spec.base import StrictModel
from tenter.spec.errors import Problem

V2_ONLY = (
    "hybrid_shard_degree",
    "sm_activation_offloading",
    "fsdp_cache_flush_warnings",
    "allow_empty_shards",
    "context_parallel_degree",
    "expert_parallel_degree",
    "random_seed",
)
SHARED = ("tensor_parallel_degree", "activation_loading_horizon")
"""Parameters of both versions; every other field is SMP v1's only."""


_HORIZON = (
    "torch's save_on_cpu brings each offloaded activation back when backward reaches it; "
    "there is no prefetch horizon to set"
)
# Parameters tenter.parallel does not implement: accepted at SMP's default only, with why
# (checked with the spec, so a job asking for them is refused before launch).
_UNSUPPORTED_V1 = {
    "optimize": "'memory' trades speed for memory inside SMP's tensor parallelism",
    "horovod": "Horovod is not a data-parallel engine of tenter; use ddp: true",
    "active_microbatches": "1F1B already bounds the microbatches in flight by the stage count",
    "contiguous": "the partitioner only makes contiguous stages",
    "fp16": "fp16 needs a loss scaler; use bf16: true (FSDP2 mixed precision)",
    "fp16_params": "fp16 needs a loss scaler; use bf16: true (FSDP2 mixed precision)",
    "delayed_parameter_initialization": "build the model on the meta device yourself",
    "prescaled_batch": "tensor-parallel ranks here all read the same whole batch",
    "shard_optimizer_state": "use sharded_data_parallel_degree (FSDP2) instead",
    "activation_loading_horizon": _HORIZON,
    "ddp_port": "replicas use the job's process group (MASTER_ADDR/MASTER_PORT)",
    "ddp_dist_backend": "replicas use the job's process group; set TENTER_PG_BACKEND to choose it",
    "fast_mode": "it only applies to SMP's own tensor-parallel kernels",
    "static_mode": "the schedules already infer shapes once",
    "predefined_hooks": "it only applies to SMP's own tensor-parallel module rewrites",
}
_UNSUPPORTED_V2 = {
    "context_parallel_degree": (
        "torch's context_parallel has no sharding rule for the CPU attention kernel, so it "
        "needs CUDA, and tenter.parallel does not apply it on CUDA yet"
    ),
    "expert_parallel_degree": "tenter.parallel has no mixture-of-experts layers to shard",
    "activation_loading_horizon": _HORIZON,
}


class ModelParallelParameters(StrictModel):
    """The SMP v1 and v2 parameters, with SMP's defaults. ``partitions``, the old name of
    ``pipeline_parallel_degree``, is renamed by :func:`tenter.spec.parse.parse`."""

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
    activation_loading_horizon: PositiveInt | None = None
    """``None``: the version's default (v1: 4, v2: 2)."""
    ddp_port: int | None = Field(default=None, ge=1, le=65535)
    ddp_dist_backend: Literal["auto", "nccl", "gloo"] = "auto"
    fast_mode: bool = False
    static_mode: bool = False
    predefined_hooks: bool = True
    # SMP v2 (torch.sagemaker) only.
    hybrid_shard_degree: NonNegativeInt = 0
    """0: shard over all data-parallel ranks; 1: replicate; N: shard over N, replicate over
    the rest (HSDP)."""
    sm_activation_offloading: bool = False
    fsdp_cache_flush_warnings: bool = True
    allow_empty_shards: bool = False
    context_parallel_degree: PositiveInt = 1
    expert_parallel_degree: PositiveInt = 1
    random_seed: NonNegativeInt | None = None

    def _differing(self, names: tuple[str, ...]) -> list[str]:
        return [n for n in names if getattr(self, n) != type(self).model_fields[n].default]

    @property
    def v1_parameters(self) -> list[str]:
        """SMP v1-only parameters set to something other than their default."""
        v1_only = tuple(n for n in type(self).model_fields if n not in V2_ONLY + SHARED)
        return self._differing(v1_only)

    @property
    def v2_parameters(self) -> list[str]:
        """SMP v2-only parameters set to something other than their default."""
        return self._differing(V2_ONLY)

    @property
    def version(self) -> Literal[1, 2]:
        """2 when a v2-only parameter is set, or tensor parallelism without any v1 parameter
        (v1 always names pipeline_parallel_degree); else 1."""
        if self.v2_parameters:
            return 2
        return 2 if not self.v1_parameters and self.tensor_parallel_degree > 1 else 1

    def unsupported(self, path: str) -> list[Problem]:
        """A problem for each parameter of this version set to something tenter.parallel
        does not do (see the tables above)."""
        table = _UNSUPPORTED_V2 if self.version == 2 else _UNSUPPORTED_V1
        out = []
        for name, why in table.items():
            value, default = getattr(self, name), type(self).model_fields[name].default
            if value != default:
                fix = "remove it" if default is None else f"remove it or set it to {default!r}"
                out.append(
                    Problem(
                        f"{path}.{name}",
                        f"{value!r} is not supported yet by tenter.parallel ({why})",
                        fix,
                    )
                )
        return out

    def problems(self, world_size: int, path: str) -> list[Problem]:
        """The documented SMP rules that involve more than one field, or the world size."""
        v1, v2 = self.v1_parameters, self.v2_parameters
        if v1 and v2:
            return [
                Problem(
                    path,
                    f"mixes SMP v1 parameters ({', '.join(v1)}) with SMP v2 parameters "
                    f"({', '.join(v2)}); SMP v2 (torch.sagemaker) replaced v1's settings",
                    "keep one set, v2 (hybrid_shard_degree, tensor_parallel_degree, ...) or v1 "
                    "(pipeline_parallel_degree, ddp, ...)",
                )
            ]
        if self.version == 2:
            return smp_rules.v2_problems(self, world_size, path)
        return smp_rules.v1_problems(self, world_size, path)
