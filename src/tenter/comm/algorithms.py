"""Collectives among the ranks of one host, over a shared-memory :class:`Channel`.

Every function takes flat (1-D, contiguous) CPU tensors and runs in rounds of at most one
chunk per rank (see :mod:`tenter.comm.shm`). The data moves with torch's own vectorised
kernels (``copy_``, ``add``, ``maximum``, ...) on tensors that view the shared memory, so
there is no compiled extension and no Python loop over elements.

AllReduce picks its algorithm by size:

* small (``<= small_bytes``): every rank copies its tensor into its slot, one barrier, and
  every rank reduces all slots in rank order into its own tensor. One barrier, no second
  pass: the latency path.
* large: per chunk, rank ``r`` owns the ``r``-th portion. Every rank stages the portions it
  does not own, barrier, rank ``r`` reduces the peers' ``r``-th portions into its own tensor
  and publishes the result (reduce-scatter), barrier, every rank copies the portions it does
  not own back (all-gather). The reduction work is split across ranks, each rank moves
  ``(n-1)/n`` of the bytes each way, and the chunks alternate between two buffers.

Results are deterministic: the small path reduces the same inputs in the same order with
the same kernel on every rank, and the large path computes each element on one rank only,
in a fixed order, and copies it to the others; integer arithmetic is exact (wrapping like
C, as gloo does).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from tenter.comm.descriptors import Op, Reduction
from tenter.comm.movement import ShmMovement, clamp
from tenter.comm.shm import Channel

_COMBINE: dict[Reduction, Callable[..., torch.Tensor]] = {
    Reduction.SUM: torch.add,
    Reduction.PRODUCT: torch.mul,
    Reduction.MIN: torch.minimum,
    Reduction.MAX: torch.maximum,
    Reduction.BAND: torch.bitwise_and,
    Reduction.BOR: torch.bitwise_or,
    Reduction.BXOR: torch.bitwise_xor,
}
_ALIGN = 16  # elements; portions start on 64-byte boundaries for 4-byte types


@dataclass(slots=True)
class _Pending:
    """A small all_reduce between its two halves."""

    parity: int
    mine: tuple[int, ...]
    stack: torch.Tensor
    out: torch.Tensor
    red: Reduction


def combine_fn(red: Reduction, dtype: torch.dtype) -> Callable[..., torch.Tensor]:
    """The elementwise ``fn(a, b, out=...)`` of a reduction. Reductions are chains of these
    in a fixed order, not ``torch.sum(stack, 0)``: for two ranks a plain add is twice as
    fast as a dim-0 sum over the strided stack, and the chain rounds like NCCL's."""
    if dtype == torch.bool and red in (Reduction.SUM, Reduction.PRODUCT):
        # NCCL treats bool as uint8: a sum is nonzero when any is, a product when all are.
        return torch.logical_or if red is Reduction.SUM else torch.logical_and
    return _COMBINE[red]


def reduce_into(stack: torch.Tensor, out: torch.Tensor, red: Reduction) -> None:
    """``out = stack[0] (op) stack[1] (op) ...``, reducing along dim 0 in rank order."""
    if stack.shape[0] == 1:
        out.copy_(stack[0])
        return
    fn = combine_fn(red, out.dtype)
    fn(stack[0], stack[1], out=out)
    for i in range(2, stack.shape[0]):
        fn(out, stack[i], out=out)


def _portion(count: int, parts: int, index: int) -> tuple[int, int]:
    """The ``index``-th of ``parts`` near-equal, aligned ranges of ``range(count)``."""
    step = -(-count // parts)
    step = -(-step // _ALIGN) * _ALIGN
    lo = min(index * step, count)
    return lo, min(lo + step, count)


class ShmCollectives(ShmMovement):
    """The collectives of the ranks of one host: the reductions here, the data movement
    :class:`~tenter.comm.movement.ShmMovement`'s. ``describe_rank`` names a local rank in
    error messages (its group and global rank)."""

    def __init__(
        self, channel: Channel, small_bytes: int, describe_rank: Callable[[int], str]
    ) -> None:
        super().__init__(channel, describe_rank)
        self.small_bytes = min(small_bytes, channel.chunk_bytes)
        self._views: dict[tuple[int, int, torch.dtype], torch.Tensor] = {}

    def _stack(self, parity: int, nbytes: int, dtype: torch.dtype) -> torch.Tensor:
        """``[size, n]`` view of every rank's slot; cached because slicing costs
        microseconds and the same sizes recur (DDP buckets, optimizer scalars)."""
        key = (parity, nbytes, dtype)
        view = self._views.get(key)
        if view is None:
            if len(self._views) >= 256:
                self._views.clear()
            view = self._views[key] = self.ch.slots[parity, :, :nbytes].view(dtype)
        return view

    def small_all_reduce_start(self, t: torch.Tensor, red: Reduction, seq: int) -> _Pending:
        """First half of the latency path: publish ``t`` and arrive; never blocks."""
        parity, mine = self.desc.begin(Op.ALL_REDUCE, seq, t.dtype, t.numel(), red)
        stack = self._stack(parity, t.nbytes, t.dtype)
        stack[self.me].copy_(t)
        self.ch.arrive()
        return _Pending(parity, mine, stack, t, red)

    def small_all_reduce_finish(self, p: _Pending, arrived: bool = False) -> None:
        """Second half: wait for the peers (unless the caller saw them all ``arrived``),
        check they agree, reduce in rank order."""
        ch = self.ch
        if not arrived:
            ch.wait()
        if not ch.peers_posted(p.parity, p.mine):
            self.desc.check(p.parity, p.mine, True)  # raises, naming both collectives
        if p.red is Reduction.SUM and p.out.dtype != torch.bool:
            # One kernel over the rank dimension: at these sizes each kernel call costs
            # more than its arithmetic, and a chain makes L-1 of them. Deterministic too.
            torch.sum(p.stack, 0, out=p.out)
        else:
            reduce_into(p.stack, p.out, p.red)

    def all_reduce(self, t: torch.Tensor, red: Reduction, seq: int) -> None:
        ch, dtype, es, n = self.ch, t.dtype, t.element_size(), t.numel()
        if n * es <= self.small_bytes:
            self.small_all_reduce_finish(self.small_all_reduce_start(t, red, seq))
            return
        fn = combine_fn(red, dtype)
        per = ch.chunk_bytes // es
        for lo in range(0, n, per):
            if lo == 0:
                parity, mine = self.desc.begin(Op.ALL_REDUCE, seq, dtype, n, red)
            else:
                parity = ch.next_round()
            width = min(per, n - lo)
            chunk = t[lo : lo + width]
            stack = ch.slots[parity, :, : width * es].view(dtype)
            result = ch.result[parity, : width * es].view(dtype)
            # This rank reduces portion [a, b) straight from its own tensor, so only the
            # other portions are staged for the peers and copied back: (n-1)/n of the
            # bytes each way instead of all of them.
            a, b = _portion(width, self.size, self.me)
            staged = stack[self.me]
            staged[:a].copy_(chunk[:a])
            staged[b:].copy_(chunk[b:])
            ch.sync()
            if lo == 0:
                self.desc.check(parity, mine, True)
            own = chunk[a:b]
            for j in ch.peers:  # a fixed order per portion: the result is deterministic
                fn(own, stack[j, a:b], out=own)
            result[a:b].copy_(own)
            ch.sync()
            chunk[:a].copy_(result[:a])
            chunk[b:].copy_(result[b:])

    def reduce(self, t: torch.Tensor, root: int, red: Reduction, seq: int) -> None:
        """Reduce into ``t`` on local rank ``root``; other ranks' ``t`` is unchanged."""
        ch, dtype, es, n = self.ch, t.dtype, t.element_size(), t.numel()
        per = ch.chunk_bytes // es
        for k in range(max(1, math.ceil(n / per))):
            if k == 0:
                parity, mine = self.desc.begin(Op.REDUCE, seq, dtype, n, red, root)
            else:
                parity = ch.next_round()
            lo = k * per
            width = clamp(n, lo, per)
            stack = ch.slots[parity, :, : width * es].view(dtype)
            stack[self.me].copy_(t[lo : lo + width])
            ch.sync()
            if k == 0:
                self.desc.check(parity, mine, True)
            if self.me == root:
                reduce_into(stack, t[lo : lo + width], red)

    def reduce_scatter(
        self,
        ins: Sequence[torch.Tensor],
        out: torch.Tensor,
        red: Reduction,
        seq: int,
        matrix: torch.Tensor | None = None,
    ) -> None:
        """``out = reduce over ranks of their ins[me]``; ``matrix`` is ``ins`` as one
        ``[size, n]`` tensor when the caller has it (one copy per round)."""
        ch, dtype, es, n = self.ch, out.dtype, out.element_size(), out.numel()
        size = self.size
        m = ch.chunk_bytes // es // size
        for k in range(max(1, math.ceil(n / m))):
            if k == 0:
                parity, mine = self.desc.begin(Op.REDUCE_SCATTER, seq, dtype, n, red)
            else:
                parity = ch.next_round()
            lo = k * m
            width = clamp(n, lo, m)
            staged = ch.slots[parity, :, : size * m * es].view(dtype).view(size, size, m)
            if width:
                if matrix is not None:
                    staged[self.me, :, :width].copy_(matrix[:, lo : lo + width])
                else:
                    for j, piece in enumerate(ins):
                        staged[self.me, j, :width].copy_(piece[lo : lo + width])
            ch.sync()
            if k == 0:
                self.desc.check(parity, mine, True)
            if width:
                reduce_into(staged[:, self.me, :width], out[lo : lo + width], red)
