"""Memory per rank of the GPT example under each layout of tenter.parallel, against theory.

    python benchmarks/parallel_memory.py [--dim 128] [--layers 4] [--batch 16]

For each layout (dp, fsdp, hsdp, tp 2, pp 2 and a 3-D pp 2 x fsdp 2 x tp 2) every rank
trains one AdamW step and reports the bytes it holds of

- parameters, gradients and optimizer state: its local shards (DTensor ``to_local()``);
- activations: the peak of what autograd saves for backward during ``pipe.step`` (the
  second step: the first also infers the stages' shapes), counted
  by a ``saved_tensors_hooks`` pair, parameters excluded (FSDP2's gathered parameters and the
  local tp weights that a matmul saves are weights, not activations).

Theory: the replicated states are 16 bytes per parameter (fp32 parameter, gradient and
AdamW's two moments); a layout that splits them n ways holds 16P/n per rank, n being the
product of its shard, tensor and pipeline degrees. Activations: the single-process run's,
divided by the data-parallel degree (each rank sees its share of the batch), by tp (sequence
and heads split), and for a pipeline stage by pp times the share of the m microbatches that
1F1B keeps in flight on it, min(m, p - stage) / m. Each row prints measured / theory.
Everything runs on CPU processes (gloo, 1 thread each).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from pipeline_bench import run
from torch import nn

from tenter import parallel
from tenter.parallel.pipeline import Pipeline

GPT = Path(__file__).resolve().parents[1] / "examples" / "gpt" / "model.py"
MICROBATCHES = 4

# name: world size, mesh kwargs, pipeline kwargs
LAYOUTS: dict[str, tuple[int, dict[str, int], dict[str, Any]]] = {
    "single": (1, {"pp": 1}, {"schedule": "gpipe", "microbatches": 1}),
    "dp 4": (4, {"pp": 1}, {"schedule": "gpipe", "microbatches": 1, "data_parallel": "ddp"}),
    "fsdp 4": (
        4,
        {"pp": 1, "dp_shard": 4},
        {"schedule": "gpipe", "microbatches": 1, "data_parallel": "fsdp"},
    ),
    "hsdp 2x2": (
        4,
        {"pp": 1, "dp_shard": 2},
        {"schedule": "gpipe", "microbatches": 1, "data_parallel": "fsdp"},
    ),
    "tp 2 x dp 2": (4, {"pp": 1, "tp": 2}, {"schedule": "gpipe", "microbatches": 1}),
    "pp 2 x dp 2": (4, {"pp": 2}, {"schedule": "1f1b", "microbatches": MICROBATCHES}),
    # Checkpointing keeps only each block's input: far under the theory without it.
    "fsdp 4, checkpointed": (
        4,
        {"pp": 1, "dp_shard": 4},
        {
            "schedule": "gpipe",
            "microbatches": 1,
            "data_parallel": "fsdp",
            "activation_checkpointing": True,
        },
    ),
    "pp 2 x fsdp 2 x tp 2": (
        8,
        {"pp": 2, "dp_shard": 2, "tp": 2},
        {"schedule": "1f1b", "microbatches": MICROBATCHES, "data_parallel": "fsdp"},
    ),
}


def gpt_module() -> Any:
    spec = importlib.util.spec_from_file_location("examples_gpt_model", GPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def local_bytes(tensors: Any) -> int:
    total = 0
    for t in tensors:
        if isinstance(t, torch.Tensor):
            local = t.to_local() if hasattr(t, "to_local") else t
            total += local.numel() * local.element_size()
    return total


class SavedActivations:
    """Live and peak bytes autograd holds for backward, parameters excluded: each saved
    tensor is wrapped in a holder that counts it until autograd lets it go."""

    def __init__(self, modules: list[nn.Module]) -> None:
        self.modules, self.live, self.peak = modules, 0, 0

    def _weights(self) -> set[int | None]:
        # Read at each save: FSDP2 swaps the gathered parameters in during forward.
        return {_storage(p) for m in self.modules for p in m.parameters()}

    def pack(self, t: torch.Tensor) -> _Held:
        local = t.to_local() if hasattr(t, "to_local") else t
        is_weight = _storage(local) in self._weights()
        return _Held(self, t, 0 if is_weight else local.numel() * local.element_size())

    @staticmethod
    def unpack(held: _Held) -> torch.Tensor:
        return held.tensor


def _storage(t: torch.Tensor) -> int | None:
    """The address of ``t``'s (local) storage; ``None`` for tensors without one (wrappers)."""
    local = t.to_local() if hasattr(t, "to_local") else t
    try:
        return int(local.untyped_storage().data_ptr())
    except RuntimeError:
        return None


class _Held:
    def __init__(self, counter: SavedActivations, tensor: torch.Tensor, nbytes: int) -> None:
        self.counter, self.tensor, self.nbytes = counter, tensor, nbytes
        counter.live += nbytes
        counter.peak = max(counter.peak, counter.live)

    def __del__(self) -> None:
        self.counter.live -= self.nbytes


def measure(pipe: Pipeline, batch: tuple[torch.Tensor, torch.Tensor]) -> dict[str, int]:
    info = parallel.rank_info(pipe.mesh)
    x, y = (t.chunk(info.dp_size)[info.dp_rank] for t in batch)
    # The first step also infers the stages' shapes (a forward of its own): not counted.
    pipe.step(x, target=y)
    for module in pipe.modules:
        module.zero_grad(set_to_none=True)
    saved = SavedActivations(list(pipe.modules))
    with torch.autograd.graph.saved_tensors_hooks(saved.pack, saved.unpack):
        pipe.step(x, target=y)
    grads = local_bytes(p.grad for p in pipe.parameters())
    opt = torch.optim.AdamW(pipe.parameters(), lr=1e-3)
    opt.step()
    return {
        "params": local_bytes(pipe.parameters()),
        "grads": grads,
        "optimizer": local_bytes(v for s in opt.state.values() for v in s.values()),
        "activations": saved.peak,
        "pp_rank": info.pp_rank,
        "pp": info.pp_size,
        "dp": info.dp_size,
        "tp": info.tp_size,
    }


def worker(rank: int, world: int, store_path: str, task: dict[str, Any], out: Any) -> None:
    torch.set_num_threads(1)
    store = dist.FileStore(store_path, world)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world)
    gpt = gpt_module()
    mesh_kwargs, pipe_kwargs = task["mesh"], task["pipeline"]
    mesh = parallel.mesh(**mesh_kwargs)
    torch.manual_seed(0)
    shape = task["shape"]
    model = gpt.gpt(shape["vocab"], shape["seq"], shape["dim"], shape["layers"], shape["heads"])
    pipe = parallel.pipeline(model, mesh, loss_fn=gpt.loss_fn, partition="params", **pipe_kwargs)
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(shape["vocab"], (task["batch"], shape["seq"] + 1), generator=gen)
    result = measure(pipe, (ids[:, :-1], ids[:, 1:]))
    out.put((rank, [result]))
    dist.destroy_process_group()


def theory(row: dict[str, int], single: dict[str, int], shards: int) -> tuple[float, float]:
    """(states, activations) bytes a rank should hold; see the module docstring."""
    states = (single["params"] + single["grads"] + single["optimizer"]) / shards
    acts = single["activations"] / row["dp"] / row["tp"]
    if row["pp"] > 1:
        in_flight = min(MICROBATCHES, row["pp"] - row["pp_rank"])
        acts = acts / row["pp"] * in_flight / MICROBATCHES
    return states, acts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--layouts", nargs="+", choices=list(LAYOUTS), help="default: all")
    args = ap.parse_args()
    chosen = ["single", *(args.layouts or LAYOUTS)]  # single: the reference of the theory
    shape = {"vocab": 64, "seq": args.seq, "dim": args.dim, "layers": args.layers}
    shape["heads"] = args.heads
    rows, single = [], None
    mib = 2**20
    header = (
        f"{'layout':<22}{'rank':>5}{'states MiB':>12}{'/theory':>9}{'acts MiB':>10}{'/theory':>9}"
    )
    print(header)
    for name in dict.fromkeys(chosen):
        world, mesh_kwargs, pipe_kwargs = LAYOUTS[name]
        task = {"mesh": mesh_kwargs, "pipeline": pipe_kwargs, "shape": shape, "batch": args.batch}
        per_rank = [r[0] for r in run(world, task, target=worker)]
        single = single or per_rank[0]
        shards = mesh_kwargs.get("dp_shard", 1) * mesh_kwargs.get("tp", 1) * mesh_kwargs["pp"]
        for rank, row in enumerate(per_rank):
            states = row["params"] + row["grads"] + row["optimizer"]
            want_states, want_acts = theory(row, single, shards)
            rows.append({"layout": name, "rank": rank, **row})
            print(
                f"{name:<22}{rank:>5}{states / mib:>12.3f}{states / want_states:>9.2f}"
                f"{row['activations'] / mib:>10.3f}{row['activations'] / want_acts:>9.2f}",
                flush=True,
            )
    print(json.dumps(rows), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
