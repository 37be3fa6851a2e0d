"""Pipeline parallelism: a chain of blocks, split into balanced stages, run by torch's schedules.

:func:`pipeline` applies, in this order (torchtitan's order; the one place it is written):

1. :func:`tenter.parallel.split.plan_partition` -- measure or count each block, split into
   contiguous stages (:mod:`tenter.parallel.partition`); every rank computes the same split.
2. :func:`apply_pipeline` -- keep this rank's stages (one, or ``virtual_stages`` for the
   interleaved schedule), move them to the device.
3. :func:`tenter.parallel.tensor_parallel.apply_tp` -- with ``tp`` > 1, split each block
   over the tp ranks by the plan registered for its type.
4. :func:`apply_activation_memory` -- activation checkpointing and CPU offload, per block.
5. data parallelism over each stage's data-parallel ranks
   (:mod:`tenter.parallel.data_parallel`: FSDP2, replicating, sharding over ``dp_shard``,
   with its mixed-precision policy).
6. torch's ``PipelineStage`` and schedule (``ScheduleGPipe``, ``Schedule1F1B``,
   ``ScheduleInterleaved1F1B``): tenter does not re-implement schedules.

The model stays single-device code: an ``nn.Sequential``, a list or ``ModuleList`` of blocks,
or a ``ModuleDict`` (or dict) of named blocks, each block taking the previous block's output
(a tensor, or a tuple of tensors spread as arguments). An embedding and a head are just the
first and last blocks; they are weighed like any other block.

Losses and gradients: ``loss_fn(output, target)`` should be a mean over its microbatch. Each
microbatch's loss is divided by the number of microbatches and data parallelism averages over
replicas, so a step's gradients are those of the mean loss over the global batch, as in
single-process training on that batch, and further steps before ``optimizer.step()``
accumulate onto them;
:meth:`Pipeline.step` returns that mean loss on the last stage.
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.autograd.graph import save_on_cpu
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.pipelining import (
    PipelineStage,
    Schedule1F1B,
    ScheduleGPipe,
    ScheduleInterleaved1F1B,
)
from torch.torch_version import TorchVersion
from torch.utils.checkpoint import checkpoint

from tenter.parallel import data_parallel
from tenter.parallel.dims import ParallelDims, dims_of
from tenter.parallel.mapping import DataParallelMode, MixedPrecision, PartitionMode, Schedule
from tenter.parallel.partition import Partition, stages_of_rank
from tenter.parallel.split import plan_partition
from tenter.parallel.tensor_parallel import apply_tp
from tenter.runtime import steps

Blocks = (
    nn.Sequential | nn.ModuleList | nn.ModuleDict | Sequence[nn.Module] | Mapping[str, nn.Module]
)
LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

_SCHEDULES = {
    "gpipe": ScheduleGPipe,
    "1f1b": Schedule1F1B,
    "interleaved": ScheduleInterleaved1F1B,
}


class StageModule(nn.Sequential):
    """Contiguous blocks under their original names (so parameter names match the whole
    model's), passing tuples on as positional arguments. ``checkpoint``: recompute each
    block's activations in backward rather than keep them; ``offload``: keep what autograd
    saves in host memory (torch's ``save_on_cpu``). A block of integer inputs (the token
    embedding) is not checkpointed (:func:`_is_activation`). Both are per block rather than module
    wrappers, so that parameter names stay the whole model's."""

    checkpoint: bool = False
    offload: bool = False

    def forward(self, *args: Any) -> Any:
        x: Any = args
        for block in self:
            x = self._run(block, x if isinstance(x, tuple) else (x,))
        return x

    def _run(self, block: nn.Module, args: tuple[Any, ...]) -> Any:
        saving = (
            save_on_cpu(pin_memory=torch.cuda.is_available())
            if self.offload
            else contextlib.nullcontext()
        )
        with saving:
            if self.checkpoint and any(_is_activation(a) for a in args):
                return checkpoint(block, *args, use_reentrant=False)
            return block(*args)


def _is_activation(x: Any) -> bool:
    """A floating-point tensor: a block taking none (an embedding of token ids) saves little
    more than its integer inputs, which checkpointing keeps as well; and its recomputation,
    which torch stops at the last tensor backward needs, would leave a tensor-parallel
    collective issued before it never waited for (torch warns of them at exit)."""
    return isinstance(x, torch.Tensor) and x.is_floating_point()


class LocalStages(nn.Module):
    """The blocks of every stage this rank holds, as one module under the whole model's
    parameter names: its parameters and ``state_dict()`` are exactly this rank's part of the
    model, what its optimizer steps and its checkpoint holds. Not run on its own: the
    schedule runs the stages."""

    def __init__(self, stages: Sequence[StageModule]) -> None:
        super().__init__()
        for stage in stages:
            for name, block in stage.named_children():
                self.add_module(name, block)

    def forward(self, *args: Any) -> Any:
        raise TypeError("a pipeline's stages run through Pipeline.step(), not on their own")


def named_blocks(blocks: Blocks) -> list[tuple[str, nn.Module]]:
    """The blocks in order, with the names their parameters are known by."""
    if isinstance(blocks, nn.ModuleDict | Mapping):
        return list(blocks.items())
    if isinstance(blocks, nn.Sequential | nn.ModuleList):
        return list(blocks.named_children())
    return [(str(i), b) for i, b in enumerate(blocks)]


def apply_pipeline(
    named: Sequence[tuple[str, nn.Module]],
    plan: Partition,
    stage_ids: Sequence[int],
    device: torch.device,
) -> list[StageModule]:
    """This rank's stage modules, on ``device``."""
    out = []
    for s in stage_ids:
        lo, hi = plan.bounds(s)
        out.append(StageModule(OrderedDict(named[lo:hi])).to(device))
    return out


def apply_activation_memory(
    modules: Sequence[StageModule], *, checkpointing: bool, offload: bool
) -> None:
    """Activation checkpointing and CPU offload of activations, block by block."""
    for module in modules:
        module.checkpoint, module.offload = checkpointing, offload


@dataclass
class Pipeline:
    """This rank's part of a pipelined model and the schedule that runs it."""

    partition: Partition
    dims: ParallelDims
    mesh: DeviceMesh
    stage_ids: list[int]
    modules: list[StageModule]
    """This rank's stage modules (data parallelism, FSDP2, wraps them in place)."""
    module: LocalStages
    """This rank's blocks of all its stages as one module: what ``Checkpointer`` saves."""
    stages: list[PipelineStage]
    schedule: ScheduleGPipe | Schedule1F1B | ScheduleInterleaved1F1B
    microbatches: int

    @property
    def is_first(self) -> bool:
        return any(stage.is_first for stage in self.stages)

    @property
    def is_last(self) -> bool:
        return any(stage.is_last for stage in self.stages)

    def parameters(self) -> Iterator[nn.Parameter]:
        """This rank's parameters: hand them to the optimizer."""
        return self.module.parameters()

    def named_parameters(self) -> Iterator[tuple[str, nn.Parameter]]:
        """This rank's parameters under their names in the whole model."""
        return self.module.named_parameters()

    def train(self, mode: bool = True) -> None:
        for module in self.modules:
            module.train(mode)

    def step(
        self, *inputs: torch.Tensor, target: torch.Tensor | None = None
    ) -> torch.Tensor | None:
        """One forward and backward over the batch, in ``microbatches`` microbatches; returns
        the mean loss over the global batch (all data-parallel replicas) on the last stage,
        ``None`` elsewhere. Every rank passes the same arguments; only the first stage reads
        ``inputs`` and only the last reads ``target``. Call ``optimizer.step()`` after it."""
        ref = inputs[0] if inputs else target
        if ref is not None and ref.shape[0] % self.microbatches:
            raise ValueError(
                f"the batch of {ref.shape[0]} does not split into {self.microbatches} equal "
                "microbatches (unequal ones would weigh samples unequally in the mean loss): "
                "make the per-rank batch a multiple of microbatches"
            )
        if self.is_last and target is None:
            raise ValueError("this rank runs the last stage: pass target= to step()")
        steps.counted_by_caller()  # not by its stages' FSDP2 forwards, one per microbatch
        losses: list[torch.Tensor] = []
        args = inputs if self.is_first else ()
        if self.is_last:
            self.schedule.step(*args, target=target, losses=losses)
        else:
            self.schedule.step(*args)
        steps.completed()  # the goodput ledger's step: no DDP module for tenter to count
        if not self.is_last:
            return None
        # Each microbatch's loss arrives divided by the number of microbatches already.
        mean = torch.stack([loss.detach() for loss in losses]).sum()
        return data_parallel.average_over_dp(mean, self.mesh)

    def describe(self) -> str:
        return f"pipeline: {self.dims}\n{self.partition.describe()}"


def build_pipeline(
    blocks: Blocks,
    mesh: DeviceMesh,
    *,
    loss_fn: LossFn,
    microbatches: int,
    schedule: Schedule = "1f1b",
    partition: PartitionMode | Sequence[int] = "auto",
    example_input: torch.Tensor | tuple[torch.Tensor, ...] | None = None,
    virtual_stages: int | None = None,
    data_parallel_mode: DataParallelMode = "ddp",
    memory_weight: float = 0.8,
    memory_cap: float | None = None,
    activation_checkpointing: bool = False,
    offload_activations: bool = False,
    mixed_precision: MixedPrecision = "fp32",
    allow_empty_shards: bool = False,
) -> Pipeline:
    """Split ``blocks`` into stages over ``mesh``'s ``pp`` dimension and return this rank's
    :class:`Pipeline`. Every rank calls it with the same whole model, built with the same
    seed. :func:`tenter.parallel.pipeline` is this with the job's distribution as defaults."""
    dims = dims_of(mesh)
    if dims.device_type == "cpu":
        require_torch("2.8", "tenter.parallel on CPU (pipeline stages and FSDP2 over gloo)")
    virtual_stages = checked_schedule(schedule, virtual_stages, microbatches, dims.pp)
    device = _device(dims.device_type)
    named = named_blocks(blocks)
    num_stages = dims.pp * virtual_stages
    plan = plan_partition(
        named,
        num_stages,
        dims.pp,
        partition,
        example_input=example_input,
        device=device,
        memory_weight=memory_weight,
        memory_cap=memory_cap,
    )
    pp_mesh = mesh["pp"]
    stage_ids = stages_of_rank(pp_mesh.get_local_rank(), dims.pp, virtual_stages)
    modules = apply_pipeline(named, plan, stage_ids, device)
    if dims.tp > 1:
        blocks_here = [block for module in modules for block in module.children()]
        apply_tp(blocks_here, mesh["tp"], allow_empty_shards=allow_empty_shards)
    apply_activation_memory(
        modules, checkpointing=activation_checkpointing, offload=offload_activations
    )
    policy = data_parallel.mixed_precision_policy(mixed_precision)
    for module in modules:
        _apply_data_parallel(module, mesh, dims, data_parallel_mode, policy)
    stages = [
        PipelineStage(m, s, num_stages, device, group=pp_mesh.get_group())
        for m, s in zip(modules, stage_ids, strict=True)
    ]
    # torch's scale_grads divides *all* gradients by the microbatch count after each step,
    # so a second step() before optimizer.step() (gradient accumulation) would shrink the
    # first one's gradients again. Dividing each microbatch's loss instead accumulates right.
    scaled = _MicrobatchLoss(loss_fn, microbatches)
    # Both single-stage schedules take one stage, the interleaved one a list.
    runner = (
        ScheduleInterleaved1F1B([*stages], microbatches, loss_fn=scaled, scale_grads=False)
        if schedule == "interleaved"
        else _SCHEDULES[schedule](stages[0], microbatches, loss_fn=scaled, scale_grads=False)
    )
    return Pipeline(
        plan, dims, mesh, stage_ids, modules, LocalStages(modules), stages, runner, microbatches
    )


def checked_schedule(
    schedule: Schedule, virtual_stages: int | None, microbatches: int, pp: int
) -> int:
    """The stages per rank of ``schedule`` (``virtual_stages``; by default 2 interleaved,
    else 1), once the schedule, its stages and microbatches are known to fit ``pp`` ranks."""
    if schedule not in _SCHEDULES:
        raise ValueError(f"schedule={schedule!r} is not known: use one of {list(_SCHEDULES)}")
    if virtual_stages is None:
        virtual_stages = 2 if schedule == "interleaved" else 1
    if virtual_stages > 1 and schedule != "interleaved":
        raise ValueError(
            f"virtual_stages={virtual_stages} needs schedule='interleaved' (the {schedule} "
            "schedule runs one stage per rank)"
        )
    if microbatches < 1:
        raise ValueError(f"microbatches ({microbatches}) must be at least 1")
    if schedule == "1f1b" and microbatches < pp:
        raise ValueError(
            f"1F1B needs at least as many microbatches as stages: microbatches {microbatches} "
            f"< pp {pp}; raise microbatches"
        )
    return virtual_stages


@dataclass(frozen=True)
class _MicrobatchLoss:
    """``loss_fn / microbatches``: summed over the microbatches, the mean loss."""

    loss_fn: LossFn
    microbatches: int

    def __call__(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return self.loss_fn(output, target) / self.microbatches


def _apply_data_parallel(
    module: nn.Module,
    mesh: DeviceMesh,
    dims: ParallelDims,
    mode: DataParallelMode,
    policy: data_parallel.MixedPrecisionPolicy | None,
) -> None:
    if dims.dp == 1 and policy is None:
        return
    pipelined = dims.pp > 1
    if mode == "ddp":
        data_parallel.apply_ddp(module, mesh, pipelined=pipelined, policy=policy)
    elif mode == "fsdp" or dims.dp == 1:  # one rank: FSDP2 only for its mixed precision
        data_parallel.apply_fsdp(module, mesh, pipelined=pipelined, policy=policy)
    else:
        raise ValueError(
            f"the mesh has {dims.dp} data-parallel ranks but data_parallel is {mode!r}: use "
            "'ddp' or 'fsdp' (SMP: ddp: true)"
        )


def require_torch(version: str, feature: str) -> None:
    """Raise a clear error where ``feature`` needs a newer torch than the one installed."""
    if TorchVersion(torch.__version__) < version:
        raise RuntimeError(
            f"{feature} needs torch >= {version}; this is torch {torch.__version__}: "
            f"pip install 'torch>={version}'"
        )


def _device(device_type: str) -> torch.device:
    if device_type == "cuda":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device(device_type)
