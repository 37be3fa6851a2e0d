"""How a tenter process group's collectives run: each on the route its tensors and the
group's topology pick (NCCL for CUDA tensors; the CPU route through the group's worker
thread, in call order), numbered, and none after one failed (the ranks' shared-memory state
no longer agrees); a small all_reduce with nothing queued in the caller's thread."""

from __future__ import annotations

import collections
import functools
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from tenter.comm.compat import TRAMPOLINE_OWNS_WORK, call_by_any_name
from tenter.comm.errors import CommShutdownError
from tenter.comm.routing import COLLECTIVES
from tenter.comm.setup import GroupParts
from tenter.comm.tensors import SUPPORTED_DTYPES, Tensors, any_cuda, reduction
from tenter.comm.work import CompletedWork, TenterWork, WorkLike
from tenter.comm.worker import Worker

_INLINE_SPIN_S = 50e-6  # how long the caller's thread waits for late peers itself

_AnyWork = TypeVar("_AnyWork")


class Dispatch:
    """The calls of one process group (``rank`` of ``size``, named ``label`` in errors)."""

    def __init__(self, rank: int, size: int, label: str, parts: GroupParts, worker: Worker) -> None:
        self.rank, self.size, self.label = rank, size, label
        self.topology = parts.topology
        self.cpu, self.shm, self.nccl = parts.cpu, parts.shm, parts.nccl
        self.worker = worker
        self.seq = 0
        self.failure: BaseException | None = None
        self.closed = False
        self.recent: collections.deque[object] | None = (
            None if TRAMPOLINE_OWNS_WORK else collections.deque(maxlen=8)
        )

    def route(self, name: str, *args: Any, opts: Any = None) -> WorkLike:
        """Run collective ``name`` (a key of the routing table) on the route its tensors
        and this group's topology pick."""
        collective = COLLECTIVES[name]
        opts = opts if opts is not None else collective.options()
        if any_cuda(args):
            return self.on_nccl(collective.nccl, *args, opts)
        plan = collective.plan(self.rank, self.size, *args, opts)
        return self.enqueue(collective.label, functools.partial(plan.run, self.cpu), plan.result)

    def on_nccl(self, names: Sequence[str], *args: Any) -> Any:
        if self.nccl is None:
            raise ValueError("tenter.comm: CUDA tensors need NCCL, which is not available.")
        return call_by_any_name(self.nccl, names, *args)

    def enqueue(
        self, name: str, fn: Callable[[int], None], result: object, seq: int | None = None
    ) -> TenterWork:
        if self.closed:
            raise CommShutdownError(f"tenter.comm: {name} on a shut-down process group.")
        if seq is None:
            seq = self.seq
            self.seq += 1

        def run() -> object:
            if self.failure is not None:
                raise CommShutdownError(
                    f"tenter.comm: {name} (collective #{seq}) on process group "
                    f"{self.label} cannot run: the group failed earlier: {self.failure}"
                ) from self.failure
            try:
                fn(seq)
            except BaseException as e:
                self.failure = e
                raise
            return result

        return self.keep(TenterWork(self.worker.submit(run)))

    def keep(self, work: _AnyWork) -> _AnyWork:
        """Where torch's trampoline does not own the Python Work it hands to C++
        (:data:`~tenter.comm.compat.TRAMPOLINE_OWNS_WORK`), holding the last few keeps
        them alive until C++ has asked for their futures."""
        if self.recent is not None:
            self.recent.append(work)
        return work

    def allreduce_inline(self, tensors: Tensors, op: Any) -> WorkLike | None:
        """A small all_reduce with nothing queued runs in the caller's thread, saving two
        thread hand-offs. It publishes its data and arrives, then spins briefly; if a peer
        is late, the rest (wait + reduce) goes to the worker so the caller (DDP's
        backward) is never held up by a slow peer. Every microsecond here is Python on
        the critical path of each step, so it avoids what the general path builds
        (flat views, plans, futures, events). ``None``: take the general path."""
        (t,) = tensors
        shm, worker = self.shm, self.worker
        if (
            shm is None
            or not t.is_cpu
            or t.nbytes > shm.small_bytes
            or not t.is_contiguous()
            or t.dtype not in SUPPORTED_DTYPES  # the general path names the problem
            or self.topology.num_hosts != 1
            or self.closed
            or self.failure is not None
        ):
            return None
        red, avg = reduction(op, t.dtype)
        flat = t if t.dim() == 1 else t.view(-1)
        if not worker.claim():
            return None
        seq = self.seq
        self.seq += 1
        finished = False
        try:
            state = shm.small_all_reduce_start(flat, red, seq)
            if shm.ch.poll(_INLINE_SPIN_S):
                shm.small_all_reduce_finish(state, arrived=True)
                if avg:
                    t.div_(self.size)
                finished = True
        except BaseException as e:
            self.failure = e
            finished = True
            raise
        finally:
            worker.unclaim()
            if finished:
                worker.settle()
        if finished:
            return self.keep(CompletedWork(tensors))

        def finish(seq: int) -> None:
            shm.small_all_reduce_finish(state)
            if avg:
                t.div_(self.size)

        work = self.enqueue("all_reduce", finish, tensors, seq)
        worker.settle()  # the queued half now holds the count for this collective
        return work
