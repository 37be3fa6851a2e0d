"""The ``tenter`` torch.distributed backend: a Python ``ProcessGroup``.

How a call flows::

    dist.all_reduce(t)            DDP's reducer (C++)
          |                               |
    TenterProcessGroup.allreduce  <-------+   (torch's PyProcessGroup trampoline)
          |  a small all_reduce with nothing queued: runs here, in the caller's thread
          |  CUDA tensors: handed straight to an internal ProcessGroupNCCL
          |  CPU tensors: checked here, then queued            (tenter.comm.routing)
    worker thread (one per group) runs, in call order, on the group's CPU route:
          one host:   ShmCollectives over /dev/shm                (tenter.comm.algorithms)
          several:    HostsCollectives: hierarchical all_reduce, gloo for the rest
          |                                                       (tenter.comm.hosts)
    TenterWork (its torch Future completes on the worker thread, so DDP's bucket
    callbacks and comm hooks chain on it while backward goes on in the caller's thread)

send/recv always go through the group's gloo backend (point-to-point is not on any hot
path tenter targets). The group is unusable after a collective fails (timeout, mismatch,
dead peer): the ranks' shared-memory state no longer agrees, so later calls raise
:class:`CommShutdownError` naming the first failure.
"""

from __future__ import annotations

import collections
import datetime
import functools
import weakref
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from torch.distributed import AllreduceOptions

from tenter.comm.compat import (
    TRAMPOLINE_OWNS_WORK,
    ProcessGroupBase,
    add_old_method_names,
    call_by_any_name,
    use_backend_for_cpu,
)
from tenter.comm.errors import CommShutdownError
from tenter.comm.routing import COLLECTIVES
from tenter.comm.setup import build_group, shutdown
from tenter.comm.tensors import SUPPORTED_DTYPES, Tensors, any_cuda, reduction
from tenter.comm.topology import Topology
from tenter.comm.work import CompletedWork, TenterWork, WorkLike, last_of
from tenter.comm.worker import Worker

BACKEND_NAME = "tenter"
_INLINE_SPIN_S = 50e-6  # how long the caller's thread waits for late peers itself

_AnyWork = TypeVar("_AnyWork")


@add_old_method_names
class TenterProcessGroup(ProcessGroupBase):  # type: ignore[misc]
    """A process group whose CPU collectives run over shared memory within a host.

    Created by ``init_process_group("tenter")`` / ``new_group(backend="tenter")``; see
    :mod:`tenter.comm` for the user-facing description.
    """

    def __init__(
        self,
        store: Any,
        rank: int,
        size: int,
        timeout: datetime.timedelta,
        group_name: str = "",
        global_ranks: Sequence[int] = (),
    ) -> None:
        super().__init__(rank, size)
        self._rank = rank
        self._size = size
        self._label = f"'{group_name}'" if group_name else "(unnamed)"
        self._group_name = group_name
        self._group_desc = ""
        self._seq = 0
        self._failure: BaseException | None = None
        self._closed = False
        parts = build_group(
            store, rank, size, timeout, self._label, list(global_ranks) or list(range(size))
        )
        self.topology: Topology = parts.topology
        self._cpu, self._shm, self._gloo, self._nccl = parts.cpu, parts.shm, parts.gloo, parts.nccl
        # A group with no C++ backend has nowhere to keep its name (functional collectives
        # and DeviceMesh resolve groups by name) and reports no device; registering gloo
        # for CPU fixes both. Collectives still come here: Python callers find these
        # methods first and C++ callers reach them through torch's trampoline.
        use_backend_for_cpu(self, self._gloo)
        self._recent: collections.deque[object] | None = (
            None if TRAMPOLINE_OWNS_WORK else collections.deque(maxlen=8)
        )
        self._worker = Worker(f"tenter-comm-{group_name or rank}")
        self._finalizer = weakref.finalize(self, shutdown, self._worker, parts.channel)

    def getBackendName(self) -> str:  # C++ virtual's name
        return BACKEND_NAME

    # -- routing -----------------------------------------------------------------------

    def _route(self, name: str, *args: Any, opts: Any = None) -> WorkLike:
        """Run collective ``name`` (a key of the routing table) on the route its tensors
        and this group's topology pick."""
        collective = COLLECTIVES[name]
        opts = opts if opts is not None else collective.options()
        if any_cuda(args):
            return self._on_nccl(collective.nccl, *args, opts)
        plan = collective.plan(self._rank, self._size, *args, opts)
        return self._enqueue(collective.label, functools.partial(plan.run, self._cpu), plan.result)

    def _on_nccl(self, names: Sequence[str], *args: Any) -> Any:
        if self._nccl is None:
            raise ValueError("tenter.comm: CUDA tensors need NCCL, which is not available.")
        return call_by_any_name(self._nccl, names, *args)

    def _enqueue(
        self, name: str, fn: Callable[[int], None], result: object, seq: int | None = None
    ) -> TenterWork:
        if self._closed:
            raise CommShutdownError(f"tenter.comm: {name} on a shut-down process group.")
        if seq is None:
            seq = self._seq
            self._seq += 1

        def run() -> object:
            if self._failure is not None:
                raise CommShutdownError(
                    f"tenter.comm: {name} (collective #{seq}) on process group "
                    f"{self._label} cannot run: the group failed earlier: {self._failure}"
                ) from self._failure
            try:
                fn(seq)
            except BaseException as e:
                self._failure = e
                raise
            return result

        return self._keep(TenterWork(self._worker.submit(run)))

    def _keep(self, work: _AnyWork) -> _AnyWork:
        """Where torch's trampoline does not own the Python Work it hands to C++
        (:data:`~tenter.comm.compat.TRAMPOLINE_OWNS_WORK`), holding the last few keeps
        them alive until C++ has asked for their futures."""
        if self._recent is not None:
            self._recent.append(work)
        return work

    # -- collectives: one line each, the routing table says the rest -------------------

    def allreduce(self, tensors: Tensors, opts: Any = None) -> WorkLike:
        opts = opts if opts is not None else AllreduceOptions()
        if len(tensors) == 1:
            work = self._allreduce_inline(tensors, opts.reduceOp)
            if work is not None:
                return work
        return self._route("allreduce", tensors, opts=opts)

    def allreduce_coalesced(self, tensors: Tensors, opts: Any = None) -> WorkLike:
        single = AllreduceOptions()
        if opts is not None:
            single.reduceOp = opts.reduceOp
        return self.allreduce(tensors, single)

    def broadcast(self, tensors: Tensors, opts: Any = None) -> WorkLike:
        return self._route("broadcast", tensors, opts=opts)

    def reduce(self, tensors: Tensors, opts: Any = None) -> WorkLike:
        return self._route("reduce", tensors, opts=opts)

    def allgather(self, output_lists: list[Tensors], inputs: Tensors, opts: Any = None) -> WorkLike:
        return self._route("allgather", output_lists, inputs, opts=opts)

    allgather_coalesced = allgather

    def all_gather_single(
        self, output: torch.Tensor, inp: torch.Tensor, opts: Any = None
    ) -> WorkLike:
        return self._route("all_gather_single", output, inp, opts=opts)

    def all_gather_single_coalesced(
        self, outputs: Tensors, inputs: Tensors, opts: Any = None
    ) -> WorkLike:
        works = [self.all_gather_single(o, i, opts) for o, i in zip(outputs, inputs, strict=True)]
        return self._keep(last_of(works, outputs))

    def reduce_scatter(
        self, outputs: Tensors, input_lists: list[Tensors], opts: Any = None
    ) -> WorkLike:
        return self._route("reduce_scatter", outputs, input_lists, opts=opts)

    def reduce_scatter_single(
        self, output: torch.Tensor, inp: torch.Tensor, opts: Any = None
    ) -> WorkLike:
        return self._route("reduce_scatter_single", output, inp, opts=opts)

    def reduce_scatter_single_coalesced(
        self, outputs: Tensors, inputs: Tensors, opts: Any = None
    ) -> WorkLike:
        works = [
            self.reduce_scatter_single(o, i, opts) for o, i in zip(outputs, inputs, strict=True)
        ]
        return self._keep(last_of(works, outputs))

    def all_to_all_single(
        self,
        output: torch.Tensor,
        inp: torch.Tensor,
        output_split_sizes: list[int],
        input_split_sizes: list[int],
        opts: Any = None,
    ) -> WorkLike:
        splits = (output_split_sizes, input_split_sizes)
        return self._route("all_to_all_single", output, inp, *splits, opts=opts)

    def alltoall(self, outputs: Tensors, inputs: Tensors, opts: Any = None) -> WorkLike:
        return self._route("alltoall", outputs, inputs, opts=opts)

    def gather(self, output_lists: list[Tensors], inputs: Tensors, opts: Any = None) -> WorkLike:
        return self._route("gather", output_lists, inputs, opts=opts)

    def scatter(self, outputs: Tensors, input_lists: list[Tensors], opts: Any = None) -> WorkLike:
        return self._route("scatter", outputs, input_lists, opts=opts)

    def barrier(self, opts: Any = None) -> WorkLike:
        return self._route("barrier", opts=opts)

    # -- point-to-point: NCCL for CUDA tensors, else gloo ------------------------------

    def send(self, tensors: Tensors, dst: int, tag: int = 0) -> Any:
        return self._point_to_point("send", tensors, dst, tag)

    def recv(self, tensors: Tensors, src: int, tag: int = 0) -> Any:
        return self._point_to_point("recv", tensors, src, tag)

    def recv_anysource(self, tensors: Tensors, tag: int = 0) -> Any:
        return self._gloo.recv_anysource(tensors, tag)

    def _point_to_point(self, name: str, tensors: Tensors, peer: int, tag: int) -> Any:
        if any_cuda(tensors):
            return self._on_nccl([name], tensors, peer, tag)
        return getattr(self._gloo, name)(tensors, peer, tag)

    # -- the latency path --------------------------------------------------------------

    def _allreduce_inline(self, tensors: Tensors, op: Any) -> WorkLike | None:
        """A small all_reduce with nothing queued runs in the caller's thread, saving two
        thread hand-offs. It publishes its data and arrives, then spins briefly; if a peer
        is late, the rest (wait + reduce) goes to the worker so the caller (DDP's
        backward) is never held up by a slow peer. Every microsecond here is Python on
        the critical path of each step, so it avoids what the general path builds
        (flat views, plans, futures, events). ``None``: take the general path."""
        (t,) = tensors
        shm, worker = self._shm, self._worker
        if (
            shm is None
            or not t.is_cpu
            or t.nbytes > shm.small_bytes
            or not t.is_contiguous()
            or t.dtype not in SUPPORTED_DTYPES  # the general path names the problem
            or self.topology.num_hosts != 1
            or self._closed
            or self._failure is not None
        ):
            return None
        red, avg = reduction(op, t.dtype)
        flat = t if t.dim() == 1 else t.view(-1)
        if not worker.claim():
            return None
        seq = self._seq
        self._seq += 1
        finished = False
        try:
            state = shm.small_all_reduce_start(flat, red, seq)
            if shm.ch.poll(_INLINE_SPIN_S):
                shm.small_all_reduce_finish(state, arrived=True)
                if avg:
                    t.div_(self._size)
                finished = True
        except BaseException as e:
            self._failure = e
            finished = True
            raise
        finally:
            worker.unclaim()
            if finished:
                worker.settle()
        if finished:
            return self._keep(CompletedWork(tensors))

        def finish(seq: int) -> None:
            shm.small_all_reduce_finish(state)
            if avg:
                t.div_(self._size)

        work = self._enqueue("all_reduce", finish, tensors, seq)
        worker.settle()  # the queued half now holds the count for this collective
        return work

    # -- lifecycle ---------------------------------------------------------------------

    def shutdown(self) -> None:
        """Stop the worker thread and unmap the segment (called by destroy_process_group)."""
        self._closed = True
        self._finalizer()

    def abort(self) -> None:
        self.shutdown()


def create_backend(dist_opts: Any, backend_opts: Any = None) -> TenterProcessGroup:
    """The creator torch calls for ``init_process_group("tenter")`` and ``new_group``."""
    return TenterProcessGroup(
        dist_opts.store,
        dist_opts.group_rank,
        dist_opts.group_size,
        dist_opts.timeout,
        getattr(dist_opts, "group_id", ""),
        list(getattr(dist_opts, "global_ranks_in_group", []) or []),
    )


def register() -> None:
    """Register ``"tenter"`` with torch.distributed (idempotent)."""
    if dist.is_backend_available(BACKEND_NAME):
        return
    dist.Backend.register_backend(
        BACKEND_NAME, create_backend, extended_api=True, devices=["cpu", "cuda"]
    )
