"""tenter.comm vs gloo: latency and bus bandwidth of CPU collectives, in one run.

    .venv/bin/python benchmarks/comm_collectives.py --nprocs 2 4

For each world size it runs the same sweep on a gloo world and on a tenter world (one
after the other, same machine, same script), then prints per size: time per call,
busbw (nccl-tests' definition, see below), tenter/gloo ratios, and tenter's busbw as a
fraction of this machine's single-core memory-copy bandwidth (measured first, here).

busbw = algbw x factor, algbw = bytes / time, with nccl-tests' factors so numbers compare:
all_reduce 2(n-1)/n (``bytes`` = the tensor), all_gather and reduce_scatter (n-1)/n
(``bytes`` = the whole gathered / scattered tensor).

Each rank uses one intra-op thread (torchrun's default), so ranks do not fight over the
cores. The figures are as noisy as the machine: run on an idle one for numbers to quote.
This is a plain timing loop (barrier, N calls, barrier) rather than ``tenter perf``, so
that both backends run back to back in one process tree and the ratios are like for like.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import tenter.comm  # noqa: F401  # registers "tenter"

KIB, MIB = 1 << 10, 1 << 20
# torch 2.13 renamed these (the old names warn); older torch has only the old names.
_all_gather_tensor = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter_tensor = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


@dataclass(frozen=True)
class Collective:
    name: str
    sizes: tuple[int, ...]
    """Bytes of the full tensor (all_reduce) or of the whole gathered tensor."""

    def busbw_factor(self, n: int) -> float:
        return 2 * (n - 1) / n if self.name == "all_reduce" else (n - 1) / n

    def buffers(self, nbytes: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        count = max(1, nbytes // 4)
        if self.name == "all_reduce":
            t = torch.ones(count)
            return t, t
        count = max(n, count // n * n)
        return torch.ones(count // n), torch.empty(count)

    def run(self, a: torch.Tensor, b: torch.Tensor) -> None:
        if self.name == "all_reduce":
            dist.all_reduce(a)
        elif self.name == "all_gather":
            _all_gather_tensor(b, a)
        else:
            _reduce_scatter_tensor(a, b)


COLLECTIVES = (
    Collective("all_reduce", (8, 1 * KIB, 64 * KIB, 1 * MIB, 4 * MIB, 16 * MIB, 64 * MIB)),
    Collective("all_gather", (1 * MIB, 4 * MIB, 16 * MIB, 64 * MIB)),
    Collective("reduce_scatter", (1 * MIB, 4 * MIB, 16 * MIB, 64 * MIB)),
)


def _iters(nbytes: int) -> int:
    return max(5, min(2000, int(2e8 / max(nbytes, 1))))


def _worker(rank: int, world: int, port: int, backend: str, out: Any) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group(backend, rank=rank, world_size=world)
    results = {}
    for coll in COLLECTIVES:
        for nbytes in coll.sizes:
            a, b = coll.buffers(nbytes, world)
            iters = _iters(nbytes)
            for _ in range(max(3, iters // 10)):
                coll.run(a, b)
            dist.barrier()
            start = time.perf_counter()
            for _ in range(iters):
                coll.run(a, b)
            dist.barrier()
            elapsed = (time.perf_counter() - start) / iters
            t = torch.tensor([elapsed], dtype=torch.float64)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)  # the slowest rank's time
            results[f"{coll.name}/{nbytes}"] = t.item()
    if rank == 0:
        out.put(results)
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def measure(backend: str, world: int) -> dict[str, float]:
    ctx = mp.get_context("spawn")
    out = ctx.SimpleQueue()
    mp.start_processes(  # type: ignore[no-untyped-call]
        _worker, args=(world, _free_port(), backend, out), nprocs=world, start_method="spawn"
    )
    return dict(out.get())


def memcpy_bandwidth() -> float:
    """Single-core copy bandwidth (bytes read + written per second / 2, i.e. copy rate)."""
    torch.set_num_threads(1)
    src, dst = torch.ones(16 * MIB), torch.empty(16 * MIB)
    for _ in range(3):
        dst.copy_(src)
    best = float("inf")
    for _ in range(10):
        start = time.perf_counter()
        dst.copy_(src)
        best = min(best, time.perf_counter() - start)
    return src.numel() * 4 / best


def _fmt_size(n: int) -> str:
    for unit, scale in (("M", MIB), ("K", KIB)):
        if n >= scale:
            return f"{n // scale}{unit}"
    return f"{n}B"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nprocs", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--json", help="also write the figures as JSON here")
    args = parser.parse_args()
    copy_bw = memcpy_bandwidth()
    print(f"single-core memcpy bandwidth: {copy_bw / 1e9:.2f} GB/s")
    report: dict[str, Any] = {"memcpy_GBps": copy_bw / 1e9, "worlds": {}}
    for world in args.nprocs:
        gloo, tenter = measure("gloo", world), measure("tenter", world)
        report["worlds"][world] = {"gloo": gloo, "tenter": tenter}
        print(f"\n== {world} ranks ==")
        print(
            f"{'collective':>15} {'size':>6} {'gloo us':>10} {'tenter us':>10} "
            f"{'gloo busbw':>10} {'tenter busbw':>12} {'t/g time':>8} {'t/g bw':>7} "
            f"{'of memcpy':>9}"
        )
        for coll in COLLECTIVES:
            for nbytes in coll.sizes:
                key = f"{coll.name}/{nbytes}"
                tg, tt = gloo[key], tenter[key]
                factor = coll.busbw_factor(world)
                bg, bt = nbytes / tg * factor / 1e9, nbytes / tt * factor / 1e9
                print(
                    f"{coll.name:>15} {_fmt_size(nbytes):>6} {tg * 1e6:10.1f} {tt * 1e6:10.1f} "
                    f"{bg:8.2f}GB {bt:10.2f}GB {tt / tg:8.3f} {bt / bg:6.2f}x "
                    f"{bt * 1e9 / copy_bw:8.0%}"
                )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
