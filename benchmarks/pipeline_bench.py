"""Pipeline schedules and the partitioner, measured on CPU processes (1 thread each, gloo).

    python benchmarks/pipeline_bench.py bubble [--pp 2 4] [--microbatches 4 8]
    python benchmarks/pipeline_bench.py partition [--pp 2]

bubble: for GPipe and 1F1B, each stage's idle fraction per step, 1 - (its forward+backward
compute time) / (step wall time), against the theoretical (p-1)/(m+p-1), and the peak bytes of
activations it holds for backward (saved tensors, counted by a saved_tensors_hooks pair):
GPipe keeps all m microbatches, 1F1B at most p - stage. Where the idle time beyond theory
goes: ``ideal_idle`` is the bubble a perfect schedule would leave given the measured compute
of the slowest stage (stage imbalance included), ``wait_frac`` the share of the step spent
blocked on the schedule's sends and receives (the bubble proper plus gloo transfers), and
``other_frac`` / ``other_per_mb_ms`` the rest: the schedule's own work per microbatch
(splitting the batch, building and posting point-to-point ops, loss bookkeeping).

partition: a chain of blocks of very unequal cost, split by tenter's partition='time'
(measured) and by a naive equal number of blocks per stage; the ratio of their step times.

Timings are medians over the measured steps; the stages of one pipeline must each have a core
for the bubble to mean anything (p=4 on a 2-core machine overlaps stages: read it as such).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from typing import Any

import compat
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.distributed.pipelining import PipelineStage

from tenter import parallel
from tenter.parallel.pipeline import build_pipeline

WARMUP, STEPS = 2, 6


class Counters:
    """Per-step compute seconds and live/peak saved-activation bytes of this rank."""

    busy = 0.0
    wait = 0.0
    """Seconds blocked on the schedule's point-to-point receives and sends."""
    live = 0
    peak = 0
    weights: frozenset[int] = frozenset()
    """Storages of parameters: autograd saves weights too, but they are not activations."""


class _Held:
    """A saved tensor, counted while autograd holds it."""

    def __init__(self, t: torch.Tensor) -> None:
        self.t = t
        is_weight = t.untyped_storage().data_ptr() in Counters.weights
        self.nbytes = 0 if is_weight else t.numel() * t.element_size()
        Counters.live += self.nbytes
        Counters.peak = max(Counters.peak, Counters.live)

    def __del__(self) -> None:
        Counters.live -= self.nbytes


def _timed(method: Any) -> Any:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        with torch.autograd.graph.saved_tensors_hooks(_Held, lambda h: h.t):
            out = method(*args, **kwargs)
        Counters.busy += time.perf_counter() - start
        return out

    return wrapper


def instrument(stage: PipelineStage) -> None:
    stage.forward_one_chunk = _timed(stage.forward_one_chunk)  # type: ignore[method-assign]
    stage.backward_one_chunk = _timed(stage.backward_one_chunk)  # type: ignore[method-assign]


def _add_wait(seconds: float) -> None:
    Counters.wait += seconds


WAITS_TIMED = compat.time_pipeline_waits(_add_wait)


def chain(widths: list[int], dim: int) -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(
        *[nn.Sequential(nn.Linear(dim, w), nn.ReLU(), nn.Linear(w, dim)) for w in widths]
    )


def run_steps(rank: int, pipe: Any, x: torch.Tensor) -> dict[str, float]:
    walls, busy, waits = [], [], []
    for step in range(WARMUP + STEPS):
        Counters.busy, Counters.wait, Counters.peak = 0.0, 0.0, Counters.live
        dist.barrier()
        start = time.perf_counter()
        pipe.step(x, target=x)
        dist.barrier()
        if step >= WARMUP:
            walls.append(time.perf_counter() - start)
            busy.append(Counters.busy)
            waits.append(Counters.wait)
        for module in pipe.modules:
            module.zero_grad(set_to_none=True)
    wall = statistics.median(walls)
    return {
        "wall_s": wall,
        "busy_s": statistics.median(busy),
        "wait_s": statistics.median(waits),
        "idle": 1 - statistics.median(busy) / wall,
        "act_bytes": float(Counters.peak),
    }


def worker(rank: int, world: int, store_path: str, task: dict[str, Any], out: Any) -> None:
    torch.set_num_threads(1)
    store = dist.FileStore(store_path, world)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world)
    mesh = parallel.mesh(pp=world)
    results = []
    for case in task["cases"]:
        model = chain(case["widths"], task["dim"])
        x = torch.randn(task["batch"], task["dim"], generator=torch.Generator().manual_seed(1))
        pipe = build_pipeline(
            model,
            mesh,
            loss_fn=nn.functional.mse_loss,
            microbatches=case["microbatches"],
            schedule=case["schedule"],
            partition=case["partition"],
            example_input=x[: task["batch"] // case["microbatches"]],
        )
        for stage in pipe.stages:
            instrument(stage)
        Counters.weights = frozenset(
            p.untyped_storage().data_ptr() for m in pipe.modules for p in m.parameters()
        )
        results.append({**case, **run_steps(rank, pipe, x), "sizes": pipe.partition.sizes})
    out.put((rank, results))
    dist.destroy_process_group()


def run(world: int, task: dict[str, Any], target: Any = None) -> list[list[dict[str, Any]]]:
    """``target(rank, world, store_path, task, queue)`` (default: :func:`worker`) on ``world``
    spawned processes; each puts ``(rank, results)`` on the queue."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "store")
        procs = [
            ctx.Process(target=target or worker, args=(r, world, store, task, out))
            for r in range(world)
        ]
        for p in procs:
            p.start()
        try:
            got = dict(out.get(timeout=600) for _ in procs)
        finally:
            for p in procs:
                p.join(timeout=30)
                if p.is_alive():
                    p.kill()
    return [got[r] for r in range(world)]


def bubble(pps: list[int], mbs: list[int]) -> list[dict[str, Any]]:
    rows = []
    for p in pps:
        cases = [
            {"schedule": s, "microbatches": m, "partition": [2] * p, "widths": [2048] * (2 * p)}
            for s in ("gpipe", "1f1b")
            for m in mbs
        ]
        per_rank = run(p, {"dim": 512, "batch": 256, "cases": cases})
        for i, case in enumerate(cases):
            m = int(str(case["microbatches"]))
            stages = [per_rank[stage][i] for stage in range(p)]
            # The bubble theory assumes equal stages: with the slowest stage's measured
            # compute per microbatch, a perfect schedule takes (m + p - 1) of them.
            slowest = max(r["busy_s"] for r in stages) / m
            for stage, r in enumerate(stages):
                ideal_wall = (m + p - 1) * slowest
                rows.append(
                    {
                        "p": p,
                        "schedule": case["schedule"],
                        "m": m,
                        "stage": stage,
                        "idle": round(r["idle"], 3),
                        "theory": round((p - 1) / (m + p - 1), 3),
                        "ideal_idle": round(1 - r["busy_s"] / ideal_wall, 3),
                        **_wait_split(r, m),
                        "wall_ms": round(r["wall_s"] * 1e3, 1),
                        "act_MiB": round(r["act_bytes"] / 2**20, 2),
                    }
                )
    return rows


def _wait_split(r: dict[str, float], m: int) -> dict[str, float | None]:
    """The step's share blocked on sends and receives and the rest (None where this torch's
    schedules cannot be timed: compat.time_pipeline_waits)."""
    if not WAITS_TIMED:
        return {"wait_frac": None, "other_frac": None, "other_per_mb_ms": None}
    return {
        "wait_frac": round(r["wait_s"] / r["wall_s"], 3),
        "other_frac": round(1 - (r["busy_s"] + r["wait_s"]) / r["wall_s"], 3),
        "other_per_mb_ms": round((r["wall_s"] - r["busy_s"] - r["wait_s"]) / m * 1e3, 2),
    }


def partition(pps: list[int]) -> list[dict[str, Any]]:
    rows = []
    for p in pps:
        # Cheap blocks first, expensive ones last: an equal count of blocks per stage puts all
        # the expensive blocks on the last stage.
        widths = [128] * 6 + [2048] * 2
        cases = [
            {"schedule": "1f1b", "microbatches": 8, "partition": part, "widths": widths}
            for part in ("time", [len(widths) // p] * p)
        ]
        per_rank = run(p, {"dim": 512, "batch": 256, "cases": cases})
        auto, naive = (per_rank[0][0], per_rank[0][1])
        rows.append(
            {
                "p": p,
                "auto_sizes": auto["sizes"],
                "naive_sizes": naive["sizes"],
                "auto_ms": round(auto["wall_s"] * 1e3, 1),
                "naive_ms": round(naive["wall_s"] * 1e3, 1),
                "naive_over_auto": round(naive["wall_s"] / auto["wall_s"], 2),
            }
        )
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=["bubble", "partition"])
    ap.add_argument("--pp", type=int, nargs="+", default=[2])
    ap.add_argument("--microbatches", type=int, nargs="+", default=[4, 8])
    args = ap.parse_args()
    rows = bubble(args.pp, args.microbatches) if args.what == "bubble" else partition(args.pp)
    keys = list(rows[0])
    print("  ".join(f"{k:>12}" for k in keys))
    for row in rows:
        print("  ".join(f"{row[k]!s:>12}" for k in keys))
    print(json.dumps(rows), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
