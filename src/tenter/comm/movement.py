"""Collectives that move data among the ranks of one host without reducing it (broadcast,
all_gather and gather, scatter, all_to_all), over a shared-memory :class:`Channel`, in rounds
of at most one chunk per rank (see :mod:`tenter.comm.shm` and :mod:`tenter.comm.algorithms`,
whose :class:`~tenter.comm.algorithms.ShmCollectives` adds the reductions)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

from tenter.comm.descriptors import Descriptors, Op
from tenter.comm.shm import Channel


def clamp(count: int, lo: int, width: int) -> int:
    """The elements of a round of ``width`` from ``lo`` that a tensor of ``count`` has."""
    return max(0, min(width, count - lo))


class ShmMovement:
    """The data movement of the ranks of one host, and the state every collective shares."""

    def __init__(self, channel: Channel, describe_rank: Callable[[int], str]) -> None:
        self.ch = channel
        self.size = channel.size
        self.me = channel.me
        self.desc = Descriptors(channel, describe_rank)

    def barrier(self, seq: int) -> None:
        parity, mine = self.desc.begin(Op.BARRIER, seq, None, 0)
        self.ch.sync()
        self.desc.check(parity, mine, True)

    def broadcast(self, t: torch.Tensor, root: int, seq: int) -> None:
        ch, dtype, es, n = self.ch, t.dtype, t.element_size(), t.numel()
        per = ch.chunk_bytes // es
        for k in range(max(1, math.ceil(n / per))):
            if k == 0:
                parity, mine = self.desc.begin(Op.BROADCAST, seq, dtype, n, -1, root)
            else:
                parity = ch.next_round()
            lo = k * per
            width = clamp(n, lo, per)
            staged = ch.slots[parity, root, : width * es].view(dtype)
            if self.me == root:
                staged.copy_(t[lo : lo + width])
            ch.sync()
            if k == 0:
                self.desc.check(parity, mine, True)
            if self.me != root:
                t[lo : lo + width].copy_(staged)

    def all_gather(
        self,
        inp: torch.Tensor,
        outs: Sequence[torch.Tensor],
        matrix: torch.Tensor | None = None,
        *,
        root: int = -1,
        seq: int,
    ) -> None:
        """Gather every rank's ``inp`` into ``outs[j]`` (flat, one per local rank).

        ``matrix`` (``[size, n]``, optional) is ``outs`` as one tensor, for equal sizes: one
        copy per round instead of one per rank. With ``root >= 0`` this is a gather: only
        ``root`` reads, and only ``root`` needs ``outs``.
        """
        ch, dtype, es, n = self.ch, inp.dtype, inp.element_size(), inp.numel()
        per = ch.chunk_bytes // es
        op = Op.ALL_GATHER if root < 0 else Op.GATHER
        reads = root < 0 or self.me == root
        rounds, k, numels = 1, 0, [n]
        while k < rounds:
            if k == 0:
                parity, mine = self.desc.begin(op, seq, dtype, n, -1, root)
            else:
                parity = ch.next_round()
            lo = k * per
            width = clamp(n, lo, per)
            if width:
                ch.slots[parity, self.me, : width * es].view(dtype).copy_(inp[lo : lo + width])
            ch.sync()
            if k == 0:
                numels = self.desc.check(parity, mine, False)
                rounds = max(1, max(math.ceil(m / per) for m in numels))
                if reads:
                    self.desc.check_sizes("output", [o.numel() for o in outs], numels)
            if reads:
                if matrix is not None and len(set(numels)) == 1:
                    if width:
                        matrix[:, lo : lo + width].copy_(
                            ch.slots[parity, :, : width * es].view(dtype)
                        )
                else:
                    for j, out in enumerate(outs):
                        w = clamp(numels[j], lo, per)
                        if w:
                            out[lo : lo + w].copy_(ch.slots[parity, j, : w * es].view(dtype))
            k += 1

    def scatter(self, ins: Sequence[torch.Tensor], out: torch.Tensor, root: int, seq: int) -> None:
        """``out = ins[me]`` of local rank ``root`` (only ``root`` needs ``ins``)."""
        ch, dtype, es, n = self.ch, out.dtype, out.element_size(), out.numel()
        size = self.size
        m = ch.chunk_bytes // es // size
        for k in range(max(1, math.ceil(n / m))):
            if k == 0:
                parity, mine = self.desc.begin(Op.SCATTER, seq, dtype, n, -1, root)
                if self.me == root:
                    self.desc.check_sizes("input", [i.numel() for i in ins], [n] * size)
            else:
                parity = ch.next_round()
            lo = k * m
            width = clamp(n, lo, m)
            staged = ch.slots[parity, root, : size * m * es].view(dtype).view(size, m)
            if self.me == root and width:
                for d, piece in enumerate(ins):
                    staged[d, :width].copy_(piece[lo : lo + width])
            ch.sync()
            if k == 0:
                self.desc.check(parity, mine, True)
            if width:
                out[lo : lo + width].copy_(staged[self.me, :width])

    def all_to_all(
        self, ins: Sequence[torch.Tensor], outs: Sequence[torch.Tensor], seq: int
    ) -> None:
        """Rank ``i`` sends ``ins[j]`` to rank ``j``, which receives it in ``outs[i]``;
        blocks may differ in size (uneven splits)."""
        ch, size = self.ch, self.size
        dtype = outs[0].dtype if outs else ins[0].dtype
        es = torch.empty((), dtype=dtype).element_size()
        m = ch.chunk_bytes // es // size
        in_sizes = [i.numel() for i in ins]
        rounds, k = 1, 0
        while k < rounds:
            if k == 0:
                parity, mine = self.desc.begin(
                    Op.ALL_TO_ALL, seq, dtype, sum(in_sizes), extra=in_sizes
                )
            else:
                parity = ch.next_round()
            lo = k * m
            staged = ch.slots[parity, self.me, : size * m * es].view(dtype).view(size, m)
            for d, piece in enumerate(ins):
                w = clamp(in_sizes[d], lo, m)
                if w:
                    staged[d, :w].copy_(piece[lo : lo + w])
            ch.sync()
            if k == 0:
                self.desc.check(parity, mine, False)
                sent_to_me = [self.desc.extra(parity, j)[self.me] for j in range(size)]
                self.desc.check_sizes("output split", [o.numel() for o in outs], sent_to_me)
                longest = max(max(self.desc.extra(parity, j)) for j in range(size))
                rounds = max(1, math.ceil(longest / m))
            for j, out in enumerate(outs):
                w = clamp(out.numel(), lo, m)
                if w:
                    src = ch.slots[parity, j, : size * m * es].view(dtype).view(size, m)
                    out[lo : lo + w].copy_(src[self.me, :w])
            k += 1
