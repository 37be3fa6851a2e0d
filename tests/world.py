"""Run a function on a fresh world of real processes, one per rank, joined by
``init_process_group``: the one harness of every multi-process test.

::

    world = run_world(fn, 4, args=(scenarios,), env={"TENTER_DISTRIBUTION": ...})
    values = world.values()     # fn(rank, 4, scenarios) of every rank, or the failed ranks' report

``fn`` must be importable by module and name (a module-level function of a test folder's
helper module). Each rank is a plain subprocess rather than a multiprocessing child:
multiprocessing's spawn leaves a resource tracker running until pytest exits, and tensors
returned through its queue are shared-memory handles that die with the rank. The call travels
to the ranks as a pickle (with the parent's ``sys.path``), each return value comes back through
a file (``torch.save``: tensors are fine), and each rank's output goes to a log that a failure
report shows.

The parent hosts the TCPStore on a kernel-chosen port, so parallel test runs never race for
one; :func:`side_store` connects a rank to it for side-channel signalling. Every world gets its
own ``TENTER_JOB_ID`` (tenter.comm names its shared-memory segments after it) and its own
``TMPDIR``. Every process is waited for, or killed at the deadline, before :func:`run_world`
returns; once a rank has failed, the others get one collective timeout to notice and finish.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import os
import pickle
import subprocess
import sys
import tempfile
import time
import traceback
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

STORE_PORT_VAR = "TENTER_TEST_STORE_PORT"


@dataclass
class RankResult:
    rank: int
    value: Any = None
    error: str | None = None
    """The traceback of what the rank raised, or why it gave no result."""
    exitcode: int | None = None
    output: str = ""
    """Its stdout and stderr."""
    failed_at: float = float("inf")
    """When it wrote its traceback: the earliest failure is usually the root cause."""


@dataclass
class World:
    job_id: str
    results: list[RankResult]

    def values(self) -> list[Any]:
        """Every rank's return value; fails with the failed ranks' output and tracebacks,
        the first failure first."""
        failed = sorted((r for r in self.results if r.error is not None), key=lambda r: r.failed_at)
        if failed:
            report = "\n".join(
                f"--- rank {r.rank} (exit {r.exitcode}):\n{r.output}{r.error}" for r in failed
            )
            raise AssertionError(f"ranks failed, the first failure first:\n{report}")
        return [r.value for r in self.results]


def run_world(
    fn: Callable[..., Any],
    size: int,
    *,
    args: tuple[Any, ...] = (),
    backend: str = "gloo",
    env: Mapping[str, str] | None = None,
    rank_env: Callable[[int], Mapping[str, str]] | None = None,
    collective_timeout_s: float = 90.0,
    deadline_s: float = 150.0,
    workdir: Path | None = None,
    on_started: Callable[[list[subprocess.Popen[bytes]], dist.TCPStore], None] | None = None,
) -> World:
    """``fn(rank, size, *args)`` on ``size`` ranks over ``backend`` ("tenter": tenter.comm's).

    ``env`` goes to every rank, ``rank_env(rank)`` to one. ``workdir`` keeps the call, the
    logs, the results and the ranks' ``tmp/`` for the test to inspect (a temporary folder,
    removed, by default). ``on_started(processes, store)`` runs in the parent once every rank
    is started."""
    job_id = f"pytest{uuid.uuid4().hex[:10]}"
    with contextlib.ExitStack() as stack:
        if workdir is None:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="world-")))
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "tmp").mkdir(exist_ok=True)
        store = dist.TCPStore("127.0.0.1", 0, size + 1, is_master=True, wait_for_workers=False)
        # The path first: unpickling the call may import the test's own modules.
        (workdir / "sys_path.json").write_text(json.dumps(sys.path))
        call = (fn.__module__, fn.__name__, args, backend, collective_timeout_s, store.port)
        (workdir / "call.pkl").write_bytes(pickle.dumps(call))
        common = {
            **os.environ,
            "WORLD_SIZE": str(size),
            # One host, as torchrun's: tenter.device() gives a rank a GPU only when each has one.
            "LOCAL_WORLD_SIZE": str(size),
            "TENTER_JOB_ID": job_id,
            STORE_PORT_VAR: str(store.port),
            "OMP_NUM_THREADS": "1",
            "TMPDIR": str(workdir / "tmp"),
            # DDP creates torch's compile cache; `tenter run` keeps it out of TMPDIR too.
            "TORCHINDUCTOR_CACHE_DIR": str(workdir / "torchinductor"),
            **(env or {}),
        }
        with _ranks(workdir, size, common, rank_env) as procs:
            if on_started is not None:
                on_started(procs, store)
            killed = _wait(procs, deadline_s, grace_s=collective_timeout_s + 10)
        results = [
            _result(workdir, rank, p.returncode, killed.get(rank)) for rank, p in enumerate(procs)
        ]
    return World(job_id, results)


def side_store() -> dist.TCPStore:
    """A rank's client of the parent's store, for side-channel signalling inside a world."""
    return dist.TCPStore("127.0.0.1", int(os.environ[STORE_PORT_VAR]), is_master=False)


@contextlib.contextmanager
def _ranks(
    workdir: Path,
    size: int,
    common: Mapping[str, str],
    rank_env: Callable[[int], Mapping[str, str]] | None,
) -> Iterator[list[subprocess.Popen[bytes]]]:
    """The ranks' processes, killed (if still running) and reaped on the way out, whatever
    happens in between."""
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for rank in range(size):
            with (workdir / f"rank-{rank}.log").open("wb") as log:
                procs.append(
                    subprocess.Popen(
                        [sys.executable, __file__, str(workdir)],
                        env={
                            **common,
                            "RANK": str(rank),
                            "LOCAL_RANK": str(rank),
                            **(rank_env(rank) if rank_env else {}),
                        },
                        stdout=log,
                        stderr=subprocess.STDOUT,
                    )
                )
        yield procs
    finally:
        for p in procs:
            p.kill()  # a no-op for the ones that exited
            p.wait(timeout=60)


def _wait(
    procs: list[subprocess.Popen[bytes]], deadline_s: float, grace_s: float
) -> dict[int, str]:
    """Wait until every rank has exited, the deadline has passed, or ``grace_s`` since a rank
    failed (its peers' collectives time out by then); kill the rest. Returns why each killed
    rank was killed."""
    end = time.monotonic() + deadline_s
    why = f"the {deadline_s:.0f} s deadline"
    while running := [p for p in procs if p.poll() is None]:
        if any(p.returncode for p in procs) and time.monotonic() + grace_s < end:
            end = time.monotonic() + grace_s
            why = f"{grace_s:.0f} s after another rank failed"
        left = end - time.monotonic()
        if left <= 0:
            break
        # Polled rather than waited on one by one: a failure of any rank shortens the wait.
        with contextlib.suppress(subprocess.TimeoutExpired):
            running[0].wait(timeout=min(left, 0.2))
    killed = {
        rank: f"killed: still running {why} (hung?)"
        for rank, p in enumerate(procs)
        if p.poll() is None
    }
    for rank in killed:
        procs[rank].kill()
        procs[rank].wait(timeout=60)
    return killed


def _result(workdir: Path, rank: int, exitcode: int, killed: str | None) -> RankResult:
    out = RankResult(rank, exitcode=exitcode)
    out.output = (workdir / f"rank-{rank}.log").read_text(errors="replace")
    value, error = workdir / f"result-{rank}.pt", workdir / f"error-{rank}.txt"
    if value.exists():
        out.value = torch.load(value, weights_only=False)
    if error.exists():
        out.error = error.read_text()
        out.failed_at = error.stat().st_mtime
    elif killed:
        out.error = killed
    elif exitcode != 0 or not value.exists():
        out.error = f"no result: exit {exitcode} (killed or crashed)"
    return out


def _rank_main(workdir: Path) -> None:
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    try:
        sys.path[:] = json.loads((workdir / "sys_path.json").read_text())
        module, name, args, backend, timeout_s, port = pickle.loads(
            (workdir / "call.pkl").read_bytes()
        )
        if backend == "tenter":
            import tenter.comm  # noqa: F401  # registers the backend

        # Several worlds share two cores with other work: one thread per rank avoids
        # oversubscription (and fixes the CPU kernels' summation order).
        torch.set_num_threads(1)
        store = dist.TCPStore("127.0.0.1", port, size, is_master=False)
        dist.init_process_group(
            backend, store=store, rank=rank, world_size=size, timeout=timedelta(seconds=timeout_s)
        )
        value = getattr(importlib.import_module(module), name)(rank, size, *args)
        torch.save(value, workdir / f"result-{rank}.pt")
        # DDP and FSDP keep the process group in reference cycles; freed by a later garbage
        # collection, it can deadlock with gloo's threads at exit (pytorch/pytorch#56297).
        gc.collect()
        if dist.is_initialized():
            dist.destroy_process_group()
    except BaseException:
        (workdir / f"error-{rank}.txt").write_text(traceback.format_exc())
        raise SystemExit(1) from None


if __name__ == "__main__":
    _rank_main(Path(sys.argv[1]))
