"""The model, data and training loops shared by the parity tests and their spawned ranks.

Reference and pipelined runs build the same model from the same seed and see the same global
batches; a pipelined run's data-parallel rank d trains on rows d::dp ... of each batch (the
contiguous d-th slice), so together the replicas see exactly the reference batch.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from tenter import parallel

STEPS = 3
BATCH = 16
LR = 0.05


def make_model() -> nn.Sequential:
    """Six blocks of unequal size, first and last shaped like an embedding and a head."""
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Sequential(nn.Linear(8, 32), nn.Tanh()),
        nn.Sequential(nn.Linear(32, 32), nn.Tanh()),
        nn.Sequential(nn.Linear(32, 64), nn.Tanh()),
        nn.Sequential(nn.Linear(64, 32), nn.Tanh()),
        nn.Sequential(nn.Linear(32, 32), nn.Tanh()),
        nn.Linear(32, 4),
    )


def make_batches(n: int = STEPS) -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(1)
    return [
        (torch.randn(BATCH, 8, generator=gen), torch.randn(BATCH, 4, generator=gen))
        for _ in range(n)
    ]


def loss_fn(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return nn.functional.mse_loss(output, target)


def reference(accumulate: int = 1) -> tuple[list[float], dict[str, torch.Tensor]]:
    """Single-process training; with ``accumulate`` > 1 each batch is cut into that many
    pieces whose losses are backpropagated one after another before the optimizer step."""
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    losses = []
    for x, y in make_batches():
        total = 0.0
        for xs, ys in zip(x.chunk(accumulate), y.chunk(accumulate), strict=True):
            loss = loss_fn(model(xs), ys)
            loss.backward()
            total += loss.item()
        losses.append(total / accumulate)
        opt.step()
        opt.zero_grad()
    return losses, {k: v.detach().clone() for k, v in model.named_parameters()}


def train_pipelined(rank: int, size: int, scenarios: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Each scenario: ``mesh`` (kwargs of parallel.mesh), ``pipeline`` (of parallel.pipeline),
    optional ``accumulate``. Returns per scenario this rank's losses (last stage only), its
    parameters (full tensors) and its rank info."""
    out: dict[str, Any] = {}
    for name, scenario in scenarios.items():
        mesh = parallel.mesh(**scenario.get("mesh", {}))
        info = parallel.rank_info()
        example = make_batches(1)[0][0][: BATCH // info.dp_size]
        pipe = parallel.pipeline(
            make_model(), mesh, loss_fn=loss_fn, example_input=example, **scenario["pipeline"]
        )
        opt = torch.optim.SGD(pipe.parameters(), lr=LR, momentum=0.9)
        accumulate = scenario.get("accumulate", 1)
        losses = []
        for x, y in make_batches():
            # This replica's contiguous share of the global batch.
            xs = x.chunk(info.dp_size)[info.dp_rank]
            ys = y.chunk(info.dp_size)[info.dp_rank]
            total = 0.0
            for xa, ya in zip(xs.chunk(accumulate), ys.chunk(accumulate), strict=True):
                loss = pipe.step(xa, target=ya)
                total += 0.0 if loss is None else loss.item()
            if pipe.is_last:
                losses.append(total / accumulate)
            opt.step()
            opt.zero_grad()
        params = {}
        for k, v in pipe.named_parameters():
            full = v.full_tensor() if hasattr(v, "full_tensor") else v
            # As lists: a tensor would travel as a shared-memory handle that dies with the rank.
            params[k] = full.detach().tolist()
        out[name] = {
            "losses": losses,
            "params": params,
            "info": info,
            "stages": pipe.stage_ids,
            "sizes": pipe.partition.sizes,
        }
    return out
