"""Run a function on real ranks: one Python process per rank, joined over gloo through a
FileStore.

Plain subprocesses rather than multiprocessing: its spawn start method leaves a resource
tracker process running until pytest exits, which the no-leftover checks would see. The
call travels to the ranks as a pickle, each rank's return value comes back through a file
(``torch.save``), and a failing rank's output is in the assertion message. Every process is
waited for, or killed at the deadline, before :func:`run_ranks` returns.
"""

from __future__ import annotations

import gc
import importlib
import os
import pickle
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

DEADLINE_S = 120.0


def run_ranks(fn: Callable[..., Any], world_size: int, workdir: Path, *args: Any) -> list[Any]:
    """``fn(rank, world_size, *args)`` on every rank; their return values, by rank.
    ``fn`` must be importable by module and name from this folder."""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "tmp").mkdir(exist_ok=True)
    (workdir / "call.pkl").write_bytes(pickle.dumps((fn.__module__, fn.__name__, args)))
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "TMPDIR": str(workdir / "tmp"),
        # DDP creates torch's compile cache; `tenter run` keeps it out of TMPDIR too.
        "TORCHINDUCTOR_CACHE_DIR": str(workdir / "torchinductor"),
    }
    ranks = []
    try:
        for rank in range(world_size):
            with (workdir / f"rank-{rank}.log").open("wb") as log:
                ranks.append(
                    subprocess.Popen(
                        [sys.executable, __file__, str(workdir), str(rank), str(world_size)],
                        env=env,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                    )
                )
        deadline = time.monotonic() + DEADLINE_S
        for process in ranks:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
    finally:
        for process in ranks:
            process.kill()  # a no-op for the ones that exited
            process.wait()
    failed = [r for r, p in enumerate(ranks) if p.returncode != 0]
    if failed:
        logs = "\n".join(
            f"--- rank {r} (exit {ranks[r].returncode}):\n{(workdir / f'rank-{r}.log').read_text()}"
            for r in failed
        )
        raise AssertionError(f"ranks {failed} failed:\n{logs}")
    return [torch.load(workdir / f"result-{r}.pt", weights_only=False) for r in range(world_size)]


def _rank_main(workdir: Path, rank: int, world_size: int) -> None:
    module, name, args = pickle.loads((workdir / "call.pkl").read_bytes())
    fn = getattr(importlib.import_module(module), name)
    os.environ.update({"RANK": str(rank), "WORLD_SIZE": str(world_size)})
    torch.set_num_threads(1)
    store = dist.FileStore(str(workdir / "store"), world_size)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size)
    torch.save(fn(rank, world_size, *args), workdir / f"result-{rank}.pt")
    # DDP and FSDP keep the process group in reference cycles; freed by a later garbage
    # collection, it can deadlock with gloo's threads at exit (pytorch/pytorch#56297).
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    _rank_main(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
