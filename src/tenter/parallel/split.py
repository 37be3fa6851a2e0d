"""Step 1 of a pipeline (:mod:`tenter.parallel.pipeline`): measure or count each block and
split the chain into contiguous stages (:mod:`tenter.parallel.partition`'s balance), the same
split on every rank."""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from tenter.parallel.mapping import PartitionMode
from tenter.parallel.partition import Partition, balance, blend, check_sizes


def measure_blocks(
    blocks: Sequence[nn.Module],
    example_input: torch.Tensor | tuple[torch.Tensor, ...],
    device: torch.device,
    repeats: int = 3,
) -> list[float]:
    """Forward+backward seconds of each block on ``example_input`` (the median of
    ``repeats`` after one warm-up), averaged over all ranks so that every rank holds the same
    numbers and so computes the same partition."""
    times = []
    x: Any = _to(example_input, device)
    for block in blocks:
        if any(p.is_meta for p in block.parameters()):
            raise ValueError(
                "partition='time'/'auto' runs each block to measure it, but the model is on "
                "the meta device: use partition='params', or materialise the model first"
            )
        block.to(device)
        samples = []
        for _ in range(repeats + 1):
            inputs = _detached(x)
            start = _now(device)
            out = block(*inputs)
            outs = [t for t in (out if isinstance(out, tuple) else (out,)) if t.requires_grad]
            torch.autograd.backward(outs, [torch.ones_like(t) for t in outs])
            samples.append(_now(device) - start)
        block.zero_grad(set_to_none=True)
        times.append(statistics.median(samples[1:]))
        x = out.detach() if isinstance(out, torch.Tensor) else tuple(t.detach() for t in out)
    if dist.is_initialized() and dist.get_world_size() > 1:
        total = torch.tensor(times, dtype=torch.float64, device=device)
        dist.all_reduce(total)
        times = (total / dist.get_world_size()).tolist()
    return times


def _to(x: torch.Tensor | tuple[torch.Tensor, ...], device: torch.device) -> Any:
    return x.to(device) if isinstance(x, torch.Tensor) else tuple(t.to(device) for t in x)


def _detached(x: Any) -> tuple[torch.Tensor, ...]:
    xs = x if isinstance(x, tuple) else (x,)
    return tuple(t.detach().requires_grad_(t.is_floating_point()) for t in xs)


def _now(device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def plan_partition(
    named: Sequence[tuple[str, nn.Module]],
    num_stages: int,
    pp: int,
    partition: PartitionMode | Sequence[int],
    *,
    example_input: torch.Tensor | tuple[torch.Tensor, ...] | None,
    device: torch.device,
    memory_weight: float,
    memory_cap: float | None,
) -> Partition:
    """Split the blocks into ``num_stages`` stages (see the module docstring)."""
    names = [name for name, _ in named]
    params = [sum(p.numel() for p in b.parameters()) for _, b in named]
    param_bytes = [
        float(sum(p.numel() * p.element_size() for p in b.parameters())) for _, b in named
    ]
    times: list[float] | None = None
    if not isinstance(partition, str):
        sizes = check_sizes(partition, len(named), num_stages)
        return Partition(names, sizes, params, times, pp)
    if partition == "explicit":
        raise ValueError(
            "auto_partition is false, so the partition must be given: pass "
            f"partition=[blocks per stage, ...] ({num_stages} sizes adding up to {len(named)})"
        )
    if partition in ("time", "auto"):
        if example_input is None:
            raise ValueError(
                f"partition={partition!r} measures each block and needs example_input= (one "
                "microbatch of inputs); pass it, or use partition='params'"
            )
        times = measure_blocks([b for _, b in named], example_input, device)
    if partition == "params":
        costs = [float(p) for p in params]
    elif partition == "time":
        assert times is not None
        costs = times
    elif partition == "auto":
        assert times is not None
        costs = blend(times, [float(p) for p in params], memory_weight)
    else:
        raise ValueError(
            f"partition={partition!r} is not known: use 'auto', 'time', 'params' or a list of "
            "stage sizes"
        )
    sizes = balance(costs, num_stages, memory=param_bytes, memory_cap=memory_cap)
    return Partition(names, sizes, params, times, pp)
