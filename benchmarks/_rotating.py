"""Three identical DDP MLPs trained in turn, one step each, timed: the first can carry what a
benchmark measures (the step counter, the replica check), the other two not, and load from
elsewhere hits all three alike. Called on each rank, once the process group is up."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def rotate(
    names: tuple[str, str, str], steps: int, after: Callable[[Any, int], None] | None = None
) -> tuple[dict[str, Any], dict[str, list[float]]]:
    """The models by name (``names[0]`` runs first), and each one's step times in seconds;
    ``after(model, k)`` ends the first one's ``k``-th step (from 1), inside its time."""
    import torch
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel

    torch.manual_seed(0)

    def mlp() -> DistributedDataParallel:
        return DistributedDataParallel(
            nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 256))
        )

    models = {name: mlp() for name in names}
    optimizers = {n: torch.optim.SGD(m.parameters(), lr=0.01) for n, m in models.items()}
    x = torch.randn(64, 256)
    times: dict[str, list[float]] = {name: [] for name in names}
    for step in range(steps):
        name = names[step % 3]
        started = time.perf_counter()
        optimizers[name].zero_grad()
        models[name](x).square().mean().backward()
        optimizers[name].step()
        if after is not None and name == names[0]:
            after(models[name], step // 3 + 1)
        times[name].append(time.perf_counter() - started)
    return models, times
