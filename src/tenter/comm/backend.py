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

import datetime
import weakref
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed import AllreduceOptions

from tenter.comm.compat import (
    ProcessGroupBase,
    add_old_method_names,
    use_backend_for_cpu,
)
from tenter.comm.dispatch import Dispatch
from tenter.comm.setup import build_group, shutdown
from tenter.comm.tensors import Tensors, any_cuda
from tenter.comm.topology import Topology
from tenter.comm.work import WorkLike, last_of
from tenter.comm.worker import Worker

BACKEND_NAME = "tenter"


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
        self._label = f"'{group_name}'" if group_name else "(unnamed)"
        self._group_name = group_name
        self._group_desc = ""
        parts = build_group(
            store, rank, size, timeout, self._label, list(global_ranks) or list(range(size))
        )
        self.topology: Topology = parts.topology
        self._gloo = parts.gloo
        # The routes, as Dispatch runs them (tests look into the segment through them).
        self._cpu, self._shm = parts.cpu, parts.shm
        # A group with no C++ backend has nowhere to keep its name (functional collectives
        # and DeviceMesh resolve groups by name) and reports no device; registering gloo
        # for CPU fixes both. Collectives still come here: Python callers find these
        # methods first and C++ callers reach them through torch's trampoline.
        use_backend_for_cpu(self, self._gloo)
        worker = Worker(f"tenter-comm-{group_name or rank}")
        self._calls = Dispatch(rank, size, self._label, parts, worker)
        self._finalizer = weakref.finalize(self, shutdown, worker, parts.channel)

    def getBackendName(self) -> str:  # C++ virtual's name
        return BACKEND_NAME

    # -- collectives: one line each, the routing table says the rest -------------------

    def allreduce(self, tensors: Tensors, opts: Any = None) -> WorkLike:
        opts = opts if opts is not None else AllreduceOptions()
        if len(tensors) == 1:
            work = self._calls.allreduce_inline(tensors, opts.reduceOp)
            if work is not None:
                return work
        return self._calls.route("allreduce", tensors, opts=opts)

    def allreduce_coalesced(self, tensors: Tensors, opts: Any = None) -> WorkLike:
        single = AllreduceOptions()
        if opts is not None:
            single.reduceOp = opts.reduceOp
        return self.allreduce(tensors, single)

    def broadcast(self, tensors: Tensors, opts: Any = None) -> WorkLike:
        return self._calls.route("broadcast", tensors, opts=opts)

    def reduce(self, tensors: Tensors, opts: Any = None) -> WorkLike:
        return self._calls.route("reduce", tensors, opts=opts)

    def allgather(self, output_lists: list[Tensors], inputs: Tensors, opts: Any = None) -> WorkLike:
        return self._calls.route("allgather", output_lists, inputs, opts=opts)

    allgather_coalesced = allgather

    def all_gather_single(
        self, output: torch.Tensor, inp: torch.Tensor, opts: Any = None
    ) -> WorkLike:
        return self._calls.route("all_gather_single", output, inp, opts=opts)

    def all_gather_single_coalesced(
        self, outputs: Tensors, inputs: Tensors, opts: Any = None
    ) -> WorkLike:
        works = [self.all_gather_single(o, i, opts) for o, i in zip(outputs, inputs, strict=True)]
        return self._calls.keep(last_of(works, outputs))

    def reduce_scatter(
        self, outputs: Tensors, input_lists: list[Tensors], opts: Any = None
    ) -> WorkLike:
        return self._calls.route("reduce_scatter", outputs, input_lists, opts=opts)

    def reduce_scatter_single(
        self, output: torch.Tensor, inp: torch.Tensor, opts: Any = None
    ) -> WorkLike:
        return self._calls.route("reduce_scatter_single", output, inp, opts=opts)

    def reduce_scatter_single_coalesced(
        self, outputs: Tensors, inputs: Tensors, opts: Any = None
    ) -> WorkLike:
        works = [
            self.reduce_scatter_single(o, i, opts) for o, i in zip(outputs, inputs, strict=True)
        ]
        return self._calls.keep(last_of(works, outputs))

    def all_to_all_single(
        self,
        output: torch.Tensor,
        inp: torch.Tensor,
        output_split_sizes: list[int],
        input_split_sizes: list[int],
        opts: Any = None,
    ) -> WorkLike:
        splits = (output_split_sizes, input_split_sizes)
        return self._calls.route("all_to_all_single", output, inp, *splits, opts=opts)

    def alltoall(self, outputs: Tensors, inputs: Tensors, opts: Any = None) -> WorkLike:
        return self._calls.route("alltoall", outputs, inputs, opts=opts)

    def gather(self, output_lists: list[Tensors], inputs: Tensors, opts: Any = None) -> WorkLike:
        return self._calls.route("gather", output_lists, inputs, opts=opts)

    def scatter(self, outputs: Tensors, input_lists: list[Tensors], opts: Any = None) -> WorkLike:
        return self._calls.route("scatter", outputs, input_lists, opts=opts)

    def barrier(self, opts: Any = None) -> WorkLike:
        return self._calls.route("barrier", opts=opts)

    # -- point-to-point: NCCL for CUDA tensors, else gloo ------------------------------

    def send(self, tensors: Tensors, dst: int, tag: int = 0) -> Any:
        return self._point_to_point("send", tensors, dst, tag)

    def recv(self, tensors: Tensors, src: int, tag: int = 0) -> Any:
        return self._point_to_point("recv", tensors, src, tag)

    def recv_anysource(self, tensors: Tensors, tag: int = 0) -> Any:
        return self._gloo.recv_anysource(tensors, tag)

    def _point_to_point(self, name: str, tensors: Tensors, peer: int, tag: int) -> Any:
        if any_cuda(tensors):
            return self._calls.on_nccl([name], tensors, peer, tag)
        return getattr(self._gloo, name)(tensors, peer, tag)

    # -- lifecycle ---------------------------------------------------------------------

    def shutdown(self) -> None:
        """Stop the worker thread and unmap the segment (called by destroy_process_group)."""
        self._calls.closed = True
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
