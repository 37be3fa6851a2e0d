"""The collectives of a process group whose ranks span several hosts.

AllReduce is hierarchical: the ranks of each host reduce over shared memory into the
host's leader (its lowest rank), the leaders all-reduce over gloo, and each leader
broadcasts the result over shared memory. The other collectives use gloo over the whole
group: they move every rank's data across hosts anyway, so a shared-memory stage would
only add a copy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed import (
    AllreduceOptions,
    AllToAllOptions,
    BarrierOptions,
    BroadcastOptions,
    GatherOptions,
    ReduceOptions,
    ScatterOptions,
)

from tenter.comm.algorithms import ShmCollectives
from tenter.comm.compat import AllgatherOptions, gloo_all_gather_into
from tenter.comm.descriptors import Reduction


def _rooted(options: Any, root: int) -> Any:
    options.rootRank = root
    return options


def _reducing(options: Any, red: Reduction) -> Any:
    options.reduceOp = getattr(dist.ReduceOp, red.name)
    return options


class HostsCollectives:
    """:class:`~tenter.comm.routing.CpuCollectives` across hosts.

    ``local`` runs the host's share of all_reduce (``None`` if this rank is alone on its
    host), ``leaders`` is the gloo group of the hosts' leaders (``None`` on other ranks),
    ``gloo`` the gloo group of all ranks.
    """

    def __init__(
        self, rank: int, size: int, local: ShmCollectives | None, leaders: Any, gloo: Any
    ) -> None:
        self._rank = rank
        self._size = size
        self._local = local
        self._leaders = leaders
        self._gloo = gloo

    def barrier(self, seq: int) -> None:
        self._gloo.barrier(BarrierOptions()).wait()

    def all_reduce(self, t: torch.Tensor, red: Reduction, seq: int) -> None:
        if self._local is not None:
            self._local.reduce(t, 0, red, seq)
        if self._leaders is not None:
            self._leaders_all_reduce(t, red)
        if self._local is not None:
            self._local.broadcast(t, 0, seq)

    def _leaders_all_reduce(self, t: torch.Tensor, red: Reduction) -> None:
        if t.dtype == torch.bool:
            # gloo has no bool: as bytes, OR is MAX and AND is MIN.
            t = t.view(torch.uint8)
            red = {Reduction.SUM: Reduction.MAX, Reduction.PRODUCT: Reduction.MIN}.get(red, red)
        self._leaders.allreduce([t], _reducing(AllreduceOptions(), red)).wait()

    def reduce(self, t: torch.Tensor, root: int, red: Reduction, seq: int) -> None:
        # gloo uses non-root tensors as scratch; torch's own backends leave them alone in
        # practice and so do we.
        buf = t if self._rank == root else t.clone()
        self._gloo.reduce([buf], _rooted(_reducing(ReduceOptions(), red), root)).wait()

    def broadcast(self, t: torch.Tensor, root: int, seq: int) -> None:
        self._gloo.broadcast([t], _rooted(BroadcastOptions(), root)).wait()

    def all_gather(
        self,
        inp: torch.Tensor,
        outs: Sequence[torch.Tensor],
        matrix: torch.Tensor | None = None,
        *,
        root: int = -1,
        seq: int,
    ) -> None:
        if root >= 0:
            lists = [list(outs)] if outs else []
            self._gloo.gather(lists, [inp], _rooted(GatherOptions(), root)).wait()
        elif matrix is not None:
            gloo_all_gather_into(self._gloo, matrix.view(-1), inp).wait()
        else:
            self._gloo.allgather([list(outs)], [inp], AllgatherOptions()).wait()

    def reduce_scatter(
        self,
        ins: Sequence[torch.Tensor],
        out: torch.Tensor,
        red: Reduction,
        seq: int,
        matrix: torch.Tensor | None = None,
    ) -> None:
        # gloo's reduce_scatter lacks dtypes and ops; the hierarchical all_reduce of a
        # copy has them all, and only our part is kept.
        full = torch.cat(list(ins))
        self.all_reduce(full, red, seq)
        out.copy_(full.view(self._size, -1)[self._rank])

    def scatter(self, ins: Sequence[torch.Tensor], out: torch.Tensor, root: int, seq: int) -> None:
        lists = [list(ins)] if ins else []
        self._gloo.scatter([out], lists, _rooted(ScatterOptions(), root)).wait()

    def all_to_all(
        self, ins: Sequence[torch.Tensor], outs: Sequence[torch.Tensor], seq: int
    ) -> None:
        # gloo before torch 2.6 has only the single-tensor all_to_all, so the blocks travel
        # as one tensor, split in elements.
        received = torch.empty(sum(o.numel() for o in outs), dtype=outs[0].dtype)
        self._gloo.alltoall_base(
            received,
            torch.cat(list(ins)),
            [o.numel() for o in outs],
            [i.numel() for i in ins],
            AllToAllOptions(),
        ).wait()
        at = 0
        for o in outs:
            o.copy_(received[at : at + o.numel()])
            at += o.numel()
