"""Tensor parallelism: torch's ``torch.distributed.tensor.parallel`` styles, placed by a plan
function per block type, as torchtitan places them per model.

A plan function takes one block and returns ``{submodule name: ParallelStyle}``
(``ColwiseParallel``, ``RowwiseParallel``, ``SequenceParallel``, ``PrepareModuleInput``...),
the argument of torch's ``parallelize_module`` (the name ``""`` is the block itself). It is
registered for the block's type::

    @tenter.parallel.tp_plan(Block)
    def block_plan(block: Block) -> dict[str, ParallelStyle]:
        return {"attn.q": ColwiseParallel(), ..., "attn.proj": RowwiseParallel()}

and :func:`apply_tp` applies it to every block of a pipeline stage (the blocks are the
pipeline's units, so a stage boundary is always between two blocks, where the activations
have the layout the plans agree on). A block whose type has no plan and holds parameters is
an error that names the type: its parameters would be silently replicated, its
activations possibly of the wrong layout.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor, Shard
from torch.distributed.tensor.parallel import ParallelStyle, parallelize_module

TensorParallelPlan = Callable[[nn.Module], Mapping[str, ParallelStyle]]
"""A block -> the styles of its submodules, by name relative to the block."""

_PLANS: dict[type[nn.Module], TensorParallelPlan] = {}


def tp_plan(block_type: type[nn.Module]) -> Callable[[TensorParallelPlan], TensorParallelPlan]:
    """Register the decorated function as the tensor-parallel plan of ``block_type`` (and
    of its subclasses without a plan of their own)."""

    def register(plan: TensorParallelPlan) -> TensorParallelPlan:
        _PLANS[block_type] = plan
        return plan

    return register


def plan_of(block: nn.Module) -> TensorParallelPlan | None:
    """The plan registered for ``block``'s type or its nearest base class."""
    return next((_PLANS[t] for t in type(block).__mro__ if t in _PLANS), None)


def apply_tp(
    blocks: Sequence[nn.Module], tp_mesh: DeviceMesh, *, allow_empty_shards: bool = False
) -> None:
    """Split every block (in place) over ``tp_mesh`` by its type's plan. Raises, before
    changing anything, if a block with parameters has no plan; after, unless
    ``allow_empty_shards``, if a parameter is too small to give every rank a piece."""
    missing = sorted(
        {type(b).__qualname__ for b in blocks if plan_of(b) is None and _has_parameters(b)}
    )
    if missing:
        raise ValueError(
            f"tensor_parallel_degree {tp_mesh.size()}: no tensor-parallel plan for the block "
            f"types {', '.join(missing)}, so their parameters cannot be placed; register one "
            "per type with @tenter.parallel.tp_plan(<type>) returning {submodule: "
            "ColwiseParallel() | RowwiseParallel() | SequenceParallel() ...} (see "
            "examples/gpt/model.py), or set tensor_parallel_degree: 1"
        )
    for block in blocks:
        plan = plan_of(block)
        if plan is None:
            continue
        styles = dict(plan(block))
        own = styles.pop("", None)  # a style for the block itself, e.g. its output layout
        parallelize_module(block, tp_mesh, styles)
        if own is not None:
            parallelize_module(block, tp_mesh, own)
    if not allow_empty_shards:
        _check_no_empty_shards(blocks, tp_mesh.size())


def _has_parameters(module: nn.Module) -> bool:
    return next(module.parameters(), None) is not None


def _check_no_empty_shards(blocks: Sequence[nn.Module], tp: int) -> None:
    """SMP v2's ``allow_empty_shards: false``: every rank must hold part of every sharded
    parameter (DTensor would give a rank an empty shard of a dimension shorter than tp)."""
    small = [
        f"{name} {tuple(p.shape)} along dim {placement.dim}"
        for block in blocks
        for name, p in block.named_parameters()
        if isinstance(p, DTensor)
        for placement in p.placements
        if isinstance(placement, Shard) and p.shape[placement.dim] < tp
    ]
    if small:
        raise ValueError(
            f"tensor_parallel_degree {tp} leaves some ranks an empty shard of {', '.join(small)}; "
            "lower tensor_parallel_degree, widen the layer, or set allow_empty_shards: true"
        )
