"""The models, data and training loops shared by the parity and checkpoint tests and their ranks.

Reference and pipelined runs build the same model from the same seed and see the same global
batches; a pipelined run's data-parallel rank d trains on the contiguous d-th slice of each
batch, so together the replicas see exactly the reference batch. Two workloads: ``mlp``, a
chain of unequal linear blocks, and ``gpt``, the tiny GPT of examples/gpt with its
tensor-parallel plan.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from torch import nn
from torch.distributed.tensor import Replicate
from torch.distributed.tensor.parallel import ColwiseParallel, ParallelStyle

from tenter import parallel
from tenter.checkpoint import Checkpointer
from tenter.parallel.pipeline import build_pipeline

STEPS = 3
BATCH = 16
LR = 0.05
GPT_MODEL = Path(__file__).resolve().parents[2] / "examples" / "gpt" / "model.py"
GPT_SHAPE = {"vocab": 16, "seq": 8, "dim": 16, "layers": 2, "heads": 4}

Batches = list[tuple[torch.Tensor, torch.Tensor]]


def make_model(seed: int = 0) -> nn.Sequential:
    """Six blocks of unequal size, first and last shaped like an embedding and a head."""
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Sequential(nn.Linear(8, 32), nn.Tanh()),
        nn.Sequential(nn.Linear(32, 32), nn.Tanh()),
        nn.Sequential(nn.Linear(32, 64), nn.Tanh()),
        nn.Sequential(nn.Linear(64, 32), nn.Tanh()),
        nn.Sequential(nn.Linear(32, 32), nn.Tanh()),
        nn.Linear(32, 4),
    )


def make_batches(n: int = STEPS) -> Batches:
    gen = torch.Generator().manual_seed(1)
    return [
        (torch.randn(BATCH, 8, generator=gen), torch.randn(BATCH, 4, generator=gen))
        for _ in range(n)
    ]


def loss_fn(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return nn.functional.mse_loss(output, target)


@cache
def gpt_module() -> ModuleType:
    """examples/gpt/model.py, imported once per process (it registers the tp plans)."""
    spec = importlib.util.spec_from_file_location("examples_gpt_model", GPT_MODEL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def make_gpt(seed: int = 0) -> nn.Sequential:
    torch.manual_seed(seed)
    model: nn.Sequential = gpt_module().gpt(**GPT_SHAPE)
    return model


def make_token_batches(n: int) -> Batches:
    gen = torch.Generator().manual_seed(1)
    shape = (BATCH, GPT_SHAPE["seq"])
    return [
        (
            torch.randint(GPT_SHAPE["vocab"], shape, generator=gen),
            torch.randint(GPT_SHAPE["vocab"], shape, generator=gen),
        )
        for _ in range(n)
    ]


def gpt_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return gpt_module().loss_fn(logits, targets)  # type: ignore[no-any-return]


@dataclass(frozen=True)
class Workload:
    make_model: Callable[[int], nn.Module]
    make_batches: Callable[[int], Batches]
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    steps: int


WORKLOADS = {
    "mlp": Workload(make_model, make_batches, loss_fn, STEPS),
    "gpt": Workload(make_gpt, make_token_batches, gpt_loss, 10),
}


def reference(
    accumulate: int = 1, workload: str = "mlp"
) -> tuple[list[float], dict[str, torch.Tensor]]:
    """Single-process training; with ``accumulate`` > 1 each batch is cut into that many
    pieces whose losses are backpropagated one after another before the optimizer step."""
    work = WORKLOADS[workload]
    model = work.make_model(0)
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    losses = []
    for x, y in work.make_batches(work.steps):
        total = 0.0
        for xs, ys in zip(x.chunk(accumulate), y.chunk(accumulate), strict=True):
            loss = work.loss_fn(model(xs), ys)
            loss.backward()
            total += loss.item()
        losses.append(total / accumulate)
        opt.step()
        opt.zero_grad()
    return losses, {k: v.detach().clone() for k, v in model.named_parameters()}


def whole(tensor: torch.Tensor) -> torch.Tensor:
    """The whole tensor of a (DTensor) shard: every holder must call this, in the same order."""
    return tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor


def train_pipelined(rank: int, size: int, scenarios: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Each scenario: ``mesh`` (kwargs of parallel.mesh), ``pipeline`` (of parallel.pipeline),
    optional ``accumulate`` and ``workload``. Returns per scenario this rank's losses (last
    stage only), its parameters (full tensors) and its rank info."""
    out: dict[str, Any] = {}
    for name, scenario in scenarios.items():
        work = WORKLOADS[scenario.get("workload", "mlp")]
        mesh = parallel.mesh(**scenario.get("mesh", {}))
        info = parallel.rank_info(mesh)
        example = work.make_batches(1)[0][0][: BATCH // info.dp_size]
        pipe = parallel.pipeline(
            work.make_model(0),
            mesh,
            loss_fn=work.loss_fn,
            example_input=example,
            **scenario["pipeline"],
        )
        opt = torch.optim.SGD(pipe.parameters(), lr=LR, momentum=0.9)
        accumulate = scenario.get("accumulate", 1)
        losses = []
        for x, y in work.make_batches(work.steps):
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
        params = {k: whole(v).detach().tolist() for k, v in pipe.named_parameters()}
        out[name] = {
            "losses": losses,
            "params": params,
            "info": info,
            "stages": pipe.stage_ids,
            "sizes": pipe.partition.sizes,
        }
    return out


SAVED_AT = 2
"""Steps before the checkpoint; as many follow it."""


def _train_steps(
    pipe: parallel.Pipeline,
    opt: torch.optim.Optimizer,
    sched: torch.optim.lr_scheduler.LRScheduler,
    batches: list[tuple[torch.Tensor, torch.Tensor]],
) -> list[float]:
    info = parallel.rank_info(pipe.mesh)
    losses = []
    for x, y in batches:
        xs, ys = x.chunk(info.dp_size)[info.dp_rank], y.chunk(info.dp_size)[info.dp_rank]
        loss = pipe.step(xs, target=ys)
        if loss is not None:
            losses.append(loss.item())
        opt.step()
        opt.zero_grad()
        sched.step()
    return losses


def _build(
    scenario: dict[str, Any], seed: int
) -> tuple[parallel.Pipeline, torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
    work = WORKLOADS[scenario.get("workload", "mlp")]
    mesh = parallel.mesh(**scenario["mesh"])
    pipe = parallel.pipeline(
        work.make_model(seed), mesh, loss_fn=work.loss_fn, **scenario["pipeline"]
    )
    opt = torch.optim.Adam(pipe.parameters(), lr=0.01)
    return pipe, opt, torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.7)


def _state(pipe: parallel.Pipeline, opt: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
    """This rank's parameters and Adam state, whole tensors by parameter name (gathered
    from the data-parallel peers, which all call this in the same order)."""
    out = {}
    for name, p in pipe.named_parameters():
        for key, value in [("param", p), *opt.state[p].items()]:
            out[f"{name}:{key}"] = whole(value).detach().clone()
    return out


def save_pipelined(
    rank: int, size: int, root: Path, scenarios: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    """Per scenario: train SAVED_AT steps, checkpoint (through the pipeline, or its module
    if ``by_module``), train as many more, the uninterrupted run the resumed one must equal."""
    out: dict[str, Any] = {}
    for name, scenario in scenarios.items():
        batches = WORKLOADS[scenario.get("workload", "mlp")].make_batches(2 * SAVED_AT)
        pipe, opt, sched = _build(scenario, seed=0)
        _train_steps(pipe, opt, sched, batches[:SAVED_AT])
        model = pipe.module if scenario.get("by_module") else pipe
        ckpt = Checkpointer(
            model, opt, sched, dir=root / name, async_save=scenario.get("async", False)
        )
        ckpt.save(SAVED_AT)
        saved = _state(pipe, opt)
        losses = _train_steps(pipe, opt, sched, batches[SAVED_AT:])
        ckpt.close()
        out[name] = {
            "saved": saved,
            "losses": losses,
            "final": _state(pipe, opt),
            "sizes": pipe.partition.sizes,
        }
    return out


def resume_pipelined(
    rank: int, size: int, root: Path, scenarios: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    """Per scenario: build the pipeline from another seed, resume the checkpoint of
    ``scenario["from"]`` (default: its own), train the steps that followed it."""
    out: dict[str, Any] = {}
    for name, scenario in scenarios.items():
        batches = WORKLOADS[scenario.get("workload", "mlp")].make_batches(2 * SAVED_AT)
        pipe, opt, sched = _build(scenario, seed=1)
        ckpt = Checkpointer(pipe, opt, sched, dir=root / scenario.get("from", name))
        step = ckpt.resume()
        restored = _state(pipe, opt)
        losses = _train_steps(pipe, opt, sched, batches[step:])
        ckpt.close()
        out[name] = {
            "step": step,
            "restored": restored,
            "losses": losses,
            "final": _state(pipe, opt),
        }
    return out


class Unplanned(nn.Module):
    """A block type no tensor-parallel plan is registered for."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x)


class Narrow(nn.Module):
    """A block with a 1-row weight: a column split over 2 ranks leaves one of them empty."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x)


@parallel.tp_plan(Narrow)
def _narrow_plan(_: Narrow) -> dict[str, ParallelStyle]:
    return {"lin": ColwiseParallel(output_layouts=Replicate())}


def _one_stage(model: nn.Module, mesh: Any, *, allow_empty_shards: bool) -> parallel.Pipeline:
    return build_pipeline(
        model,
        mesh,
        loss_fn=loss_fn,
        microbatches=1,
        schedule="gpipe",
        partition="params",
        allow_empty_shards=allow_empty_shards,
    )


def tp_refusals(rank: int, size: int) -> dict[str, str]:
    """The errors of tensor parallelism that cannot place a model, on a tp ``size`` mesh."""
    mesh = parallel.mesh(pp=1, dp_shard=1, tp=size)
    out = {}
    refused = {
        "unplanned": nn.Sequential(nn.Linear(4, 4), Unplanned(), nn.ReLU()),
        "empty_shard": nn.Sequential(Narrow()),
    }
    for name, model in refused.items():
        try:
            _one_stage(model, mesh, allow_empty_shards=False)
        except ValueError as e:
            out[name] = str(e)
    # Allowed, the narrow block trains: rank 1 holds an empty shard of its weight.
    pipe = _one_stage(nn.Sequential(Narrow()), mesh, allow_empty_shards=True)
    loss = pipe.step(torch.ones(2, 4), target=torch.zeros(2, 1))
    out["allowed_loss"] = str(loss is not None and bool(torch.isfinite(loss)))
    out["local_rows"] = str(next(pipe.parameters()).to_local().shape[0])
    return out
