"""The collectives of ``tenter perf``: each one a small declarative definition.

A definition gives only what differs between collectives, as nccl-tests' ``struct testColl``
does: the buffer geometry for a message of ``count`` elements, the bus-bandwidth factor, the
expected result, and the one ``torch.distributed`` call. The harness does everything else.

Bus bandwidth (nccl-tests' doc/PERFORMANCE.md): ``algbw = S / t`` with S the size column
(the larger of the send and receive buffers: the whole gathered buffer for all_gather, the
whole input for reduce_scatter and alltoall). ``busbw = algbw * factor`` where the factor
turns the algorithm's traffic into what each rank's link must carry, so that busbw is
comparable across world sizes and to the hardware's peak:

- all_reduce, 2(n-1)/n: a ring reduce-scatter then all-gather, each moving (n-1)/n of S;
- all_gather, reduce_scatter, alltoall, (n-1)/n: each rank receives (sends) every chunk
  but its own;
- broadcast, reduce, sendrecv, 1: S crosses each link once.

torch.distributed's all_reduce, broadcast and reduce only work in place; their out-of-place
half copies the send buffer into the receive buffer first (``prepare``), as a torch program
wanting out-of-place semantics must. That copy is made once before the timed calls, not in
the timing: nccl-tests' out-of-place call reads one buffer and writes the other with no copy,
and the time per call is then the collective's own, as torch's eager loop measures it
(benchmarks/perf_harness_overhead.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist

from tenter.perf.verifiable import Pattern


@dataclass(frozen=True)
class Geometry:
    """Element counts of one message size (nccl-tests' ``getCollByteCount``)."""

    send: int
    recv: int
    param: int
    """The count column: what the collective is called with."""
    send_offset: int = 0
    """In place, the send buffer starts ``rank * send_offset`` elements into the receive
    buffer (all_gather)."""
    recv_offset: int = 0
    """In place, the result starts ``rank * recv_offset`` elements into the buffer
    (reduce_scatter)."""


@dataclass(frozen=True)
class Call:
    """The arguments of one collective call on one rank."""

    send: torch.Tensor
    recv: torch.Tensor
    op: dist.ReduceOp | dist.ReduceOp.RedOpType | None
    """The reduction; mulsum's (PREMUL_SUM) carries this rank's factor."""
    root: int
    rank: int
    nranks: int


Expected = Callable[[Pattern, Geometry, int, int, int], "torch.Tensor | None"]
"""``(pattern, geometry, rank, nranks, root)`` -> this rank's result (None: undefined)."""


@dataclass(frozen=True)
class Collective:
    name: str
    geometry: Callable[[int, int], Geometry]
    """``(count, nranks)`` -> element counts, for a message of ``count`` elements."""
    busbw_factor: Callable[[int], float]
    expected: Expected
    run: Callable[[Call], None]
    """The one ``torch.distributed`` call (the timed part)."""
    prepare: Callable[[Call], None] = lambda call: None
    """What the buffers need once before ``run`` (the in-place collectives' copy, out of
    place)."""
    reduces: bool = False
    """Takes a reduction (``-o``); the others print redop ``none``."""
    rooted: bool = False
    """Takes a root (``-r``); the others print root ``-1``."""
    checks_in_place: bool = True
    """nccl-tests does not check the in-place result of alltoall and sendrecv."""


def _copy_if_out_of_place(call: Call) -> None:
    if call.send.data_ptr() != call.recv.data_ptr():
        call.recv.copy_(call.send)


def _copy_on_the_root(call: Call) -> None:
    if call.rank == call.root:
        _copy_if_out_of_place(call)


def _sendrecv(call: Call) -> None:
    ops = [
        dist.P2POp(dist.isend, call.send, (call.rank + 1) % call.nranks),
        dist.P2POp(dist.irecv, call.recv, (call.rank - 1) % call.nranks),
    ]
    for work in dist.batch_isend_irecv(ops):
        work.wait()


# torch 2.13 renamed the tensor forms (the old names warn); tenter supports torch 2.7 to 2.15.
_all_gather_tensor = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter_tensor = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


def _ring(n: int) -> float:
    return (n - 1) / n


ALL_REDUCE = Collective(
    name="all_reduce",
    geometry=lambda count, n: Geometry(count, count, count),
    busbw_factor=lambda n: 2 * _ring(n),
    expected=lambda data, g, rank, n, root: data.reduced(0, g.param),
    run=lambda call: dist.all_reduce(call.recv, op=call.op),
    prepare=_copy_if_out_of_place,
    reduces=True,
)

ALL_GATHER = Collective(
    name="all_gather",
    geometry=lambda count, n: Geometry(
        count // n, count // n * n, count // n, send_offset=count // n
    ),
    busbw_factor=_ring,
    expected=lambda data, g, rank, n, root: torch.cat(
        [data.values(peer, 0, g.param) for peer in range(n)]
    ),
    run=lambda call: _all_gather_tensor(call.recv, call.send),
)

REDUCE_SCATTER = Collective(
    name="reduce_scatter",
    geometry=lambda count, n: Geometry(
        count // n * n, count // n, count // n, recv_offset=count // n
    ),
    busbw_factor=_ring,
    expected=lambda data, g, rank, n, root: data.reduced(rank * g.param, g.param),
    run=lambda call: _reduce_scatter_tensor(call.recv, call.send, op=call.op),
    reduces=True,
)

BROADCAST = Collective(
    name="broadcast",
    geometry=lambda count, n: Geometry(count, count, count),
    busbw_factor=lambda n: 1.0,
    expected=lambda data, g, rank, n, root: data.values(root, 0, g.param),
    run=lambda call: dist.broadcast(call.recv, src=call.root),
    prepare=_copy_on_the_root,
    rooted=True,
)

REDUCE = Collective(
    name="reduce",
    geometry=lambda count, n: Geometry(count, count, count),
    busbw_factor=lambda n: 1.0,
    # Only the root's buffer is defined after a reduce.
    expected=lambda data, g, rank, n, root: data.reduced(0, g.param) if rank == root else None,
    run=lambda call: dist.reduce(call.recv, dst=call.root, op=call.op),
    prepare=_copy_if_out_of_place,
    reduces=True,
    rooted=True,
)

ALLTOALL = Collective(
    name="alltoall",
    geometry=lambda count, n: Geometry(count // n * n, count // n * n, count // n),
    busbw_factor=_ring,
    expected=lambda data, g, rank, n, root: torch.cat(
        [data.values(peer, rank * g.param, g.param) for peer in range(n)]
    ),
    run=lambda call: dist.all_to_all_single(call.recv, call.send),
    checks_in_place=False,
)

SENDRECV = Collective(
    name="sendrecv",
    geometry=lambda count, n: Geometry(count, count, count),
    busbw_factor=lambda n: 1.0,
    expected=lambda data, g, rank, n, root: data.values((rank - 1) % n, 0, g.param),
    run=_sendrecv,
    checks_in_place=False,
)

COLLECTIVES: dict[str, Collective] = {
    c.name: c
    for c in (ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, BROADCAST, REDUCE, ALLTOALL, SENDRECV)
}
