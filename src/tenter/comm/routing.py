"""The routing table: where each collective of a ``tenter`` process group runs.

Every call takes one of three routes::

    route          chosen                          runs on
    CUDA           per call: a CUDA tensor in it   the group's ProcessGroupNCCL, under the
                                                   method name in COLLECTIVES[...].nccl
    one host       per group, from its topology    ShmCollectives over /dev/shm
                                                   (SoloCollectives for a group of one rank)
    several hosts  per group, from its topology    HostsCollectives (hierarchical
                                                   all_reduce, gloo for the rest)

The CPU routes implement one protocol, :class:`CpuCollectives`, so a collective is
written once: its entry in :data:`COLLECTIVES` validates and flattens the caller's tensors
(in the caller's thread, so bad calls raise where they were made) and returns a
:class:`Plan` whose ``run`` the group's worker thread calls with the group's
:class:`CpuCollectives`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch.distributed import (
    AllreduceOptions,
    AllToAllOptions,
    BarrierOptions,
    BroadcastOptions,
    GatherOptions,
    ReduceOptions,
    ReduceScatterOptions,
    ScatterOptions,
)

from tenter.comm.compat import AllgatherOptions, method_names
from tenter.comm.descriptors import Reduction
from tenter.comm.tensors import Flat, Tensors, expect, flats, reduction, same_dtype, split_rows


class CpuCollectives(Protocol):
    """The CPU collectives of one route. Tensors are flat and contiguous, ``seq`` is the
    collective's sequence number in the group (for mismatch checks and errors), roots are
    group ranks."""

    def barrier(self, seq: int) -> None: ...

    def all_reduce(self, t: torch.Tensor, red: Reduction, seq: int) -> None: ...

    def reduce(self, t: torch.Tensor, root: int, red: Reduction, seq: int) -> None: ...

    def broadcast(self, t: torch.Tensor, root: int, seq: int) -> None: ...

    def all_gather(
        self,
        inp: torch.Tensor,
        outs: Sequence[torch.Tensor],
        matrix: torch.Tensor | None = None,
        *,
        root: int = -1,
        seq: int,
    ) -> None:
        """Every rank's ``inp`` into ``outs[rank]``; ``matrix`` is ``outs`` as one
        ``[size, n]`` tensor where the caller has one; ``root >= 0`` makes it a gather."""

    def reduce_scatter(
        self,
        ins: Sequence[torch.Tensor],
        out: torch.Tensor,
        red: Reduction,
        seq: int,
        matrix: torch.Tensor | None = None,
    ) -> None: ...

    def scatter(
        self, ins: Sequence[torch.Tensor], out: torch.Tensor, root: int, seq: int
    ) -> None: ...

    def all_to_all(
        self, ins: Sequence[torch.Tensor], outs: Sequence[torch.Tensor], seq: int
    ) -> None: ...


@dataclass(frozen=True, slots=True)
class Plan:
    """A validated collective: ``run(cpu, seq)`` executes it, ``result`` is its future's
    value."""

    run: Callable[[CpuCollectives, int], None]
    result: object


@dataclass(frozen=True)
class Collective:
    """One row of the routing table."""

    label: str
    """Its name in errors (torch.distributed's spelling)."""
    nccl: tuple[str, ...]
    """ProcessGroupNCCL methods that run it on CUDA tensors, newest name first."""
    options: Callable[[], Any]
    """Its options' type, for calls that pass none."""
    plan: Callable[..., Plan]
    """``plan(rank, size, *args, opts)``: check the arguments, return the CPU plan."""


def _done(items: Sequence[Flat]) -> None:
    for item in items:
        item.done()


def _all_reduce(rank: int, size: int, tensors: Tensors, opts: Any) -> Plan:
    jobs = [(Flat(t), *reduction(opts.reduceOp, t.dtype)) for t in tensors]

    def run(cpu: CpuCollectives, seq: int) -> None:
        for flat, red, avg in jobs:
            cpu.all_reduce(flat.flat, red, seq)
            if avg:
                flat.flat.div_(size)
            flat.done()

    return Plan(run, tensors)


def _broadcast(rank: int, size: int, tensors: Tensors, opts: Any) -> Plan:
    items, root = flats(tensors), opts.rootRank

    def run(cpu: CpuCollectives, seq: int) -> None:
        for flat in items:
            cpu.broadcast(flat.flat, root, seq)
            flat.done()

    return Plan(run, tensors)


def _reduce(rank: int, size: int, tensors: Tensors, opts: Any) -> Plan:
    jobs = [(Flat(t), *reduction(opts.reduceOp, t.dtype)) for t in tensors]
    root = opts.rootRank

    def run(cpu: CpuCollectives, seq: int) -> None:
        for flat, red, avg in jobs:
            cpu.reduce(flat.flat, root, red, seq)
            if avg and rank == root:
                flat.flat.div_(size)
            flat.done()

    return Plan(run, tensors)


def _all_gather(
    rank: int, size: int, output_lists: list[Tensors], inputs: Tensors, opts: Any
) -> Plan:
    expect(len(output_lists) == len(inputs), "allgather: one output list per input")
    jobs = []
    for outs, inp in zip(output_lists, inputs, strict=True):
        expect(len(outs) == size, f"allgather: needs {size} outputs")
        same_dtype(inp, outs)
        jobs.append((Flat(inp), flats(outs, read=False)))

    def run(cpu: CpuCollectives, seq: int) -> None:
        for inp, outs in jobs:
            cpu.all_gather(inp.flat, [o.flat for o in outs], seq=seq)
            _done(outs)

    return Plan(run, output_lists)


def _expect_whole(
    label: str, what: str, whole: torch.Tensor, part: torch.Tensor, size: int
) -> None:
    """Check the one-tensor form: ``whole`` holds ``size`` parts like ``part``."""
    same_dtype(part, [whole])
    expect(
        whole.numel() == part.numel() * size,
        f"{label}: {what} has {whole.numel()} elements, expected {size} x {part.numel()}",
    )


def _all_gather_single(
    rank: int, size: int, output: torch.Tensor, inp: torch.Tensor, opts: Any
) -> Plan:
    _expect_whole("all_gather_into_tensor", "output", output, inp, size)
    src, dst = Flat(inp), Flat(output, read=False)

    def run(cpu: CpuCollectives, seq: int) -> None:
        matrix = dst.flat.view(size, -1)
        cpu.all_gather(src.flat, list(matrix), matrix, seq=seq)
        dst.done()

    return Plan(run, [output])


def _reduce_scatter(
    rank: int, size: int, outputs: Tensors, input_lists: list[Tensors], opts: Any
) -> Plan:
    jobs = []
    for out, ins in zip(outputs, input_lists, strict=True):
        expect(len(ins) == size, f"reduce_scatter: needs {size} inputs")
        same_dtype(out, ins)
        for i in ins:
            expect(i.numel() == out.numel(), "reduce_scatter: unequal input sizes")
        jobs.append((Flat(out, read=False), flats(ins), *reduction(opts.reduceOp, out.dtype)))

    def run(cpu: CpuCollectives, seq: int) -> None:
        for out, ins, red, avg in jobs:
            cpu.reduce_scatter([i.flat for i in ins], out.flat, red, seq)
            if avg:
                out.flat.div_(size)
            out.done()

    return Plan(run, outputs)


def _reduce_scatter_single(
    rank: int, size: int, output: torch.Tensor, inp: torch.Tensor, opts: Any
) -> Plan:
    _expect_whole("reduce_scatter_tensor", "input", inp, output, size)
    red, avg = reduction(opts.reduceOp, output.dtype)
    src, dst = Flat(inp), Flat(output, read=False)

    def run(cpu: CpuCollectives, seq: int) -> None:
        matrix = src.flat.view(size, -1)
        cpu.reduce_scatter(list(matrix), dst.flat, red, seq, matrix)
        if avg:
            dst.flat.div_(size)
        dst.done()

    return Plan(run, [output])


def _all_to_all_single(
    rank: int,
    size: int,
    output: torch.Tensor,
    inp: torch.Tensor,
    output_split_sizes: list[int],
    input_split_sizes: list[int],
    opts: Any,
) -> Plan:
    same_dtype(inp, [output])
    src, dst = Flat(inp), Flat(output, read=False)
    ins = split_rows(src.flat, inp, input_split_sizes, size, "input")
    outs = split_rows(dst.flat, output, output_split_sizes, size, "output")

    def run(cpu: CpuCollectives, seq: int) -> None:
        cpu.all_to_all(ins, outs, seq)
        dst.done()

    return Plan(run, [output])


def _all_to_all(rank: int, size: int, outputs: Tensors, inputs: Tensors, opts: Any) -> Plan:
    expect(len(outputs) == len(inputs) == size, "all_to_all: list sizes")
    same_dtype(inputs[0], [*inputs, *outputs])
    ins, outs = flats(inputs), flats(outputs, read=False)

    def run(cpu: CpuCollectives, seq: int) -> None:
        cpu.all_to_all([i.flat for i in ins], [o.flat for o in outs], seq)
        _done(outs)

    return Plan(run, outputs)


def _gather(rank: int, size: int, output_lists: list[Tensors], inputs: Tensors, opts: Any) -> Plan:
    root = opts.rootRank
    inp = Flat(inputs[0])
    outs = flats(output_lists[0] if output_lists else [], read=False)
    if rank == root:
        expect(len(outs) == size, f"gather: root needs {size} outputs")

    def run(cpu: CpuCollectives, seq: int) -> None:
        cpu.all_gather(inp.flat, [o.flat for o in outs], root=root, seq=seq)
        _done(outs)

    return Plan(run, output_lists)


def _scatter(rank: int, size: int, outputs: Tensors, input_lists: list[Tensors], opts: Any) -> Plan:
    root = opts.rootRank
    out = Flat(outputs[0], read=False)
    ins = flats(input_lists[0] if input_lists else [])
    if rank == root:
        expect(len(ins) == size, f"scatter: root needs {size} inputs")

    def run(cpu: CpuCollectives, seq: int) -> None:
        cpu.scatter([i.flat for i in ins], out.flat, root, seq)
        out.done()

    return Plan(run, outputs)


def _barrier(rank: int, size: int, opts: Any) -> Plan:
    def run(cpu: CpuCollectives, seq: int) -> None:
        cpu.barrier(seq)

    return Plan(run, [])


COLLECTIVES: dict[str, Collective] = {
    c.nccl[0]: c
    for c in (
        Collective("all_reduce", ("allreduce",), AllreduceOptions, _all_reduce),
        Collective("broadcast", ("broadcast",), BroadcastOptions, _broadcast),
        Collective("reduce", ("reduce",), ReduceOptions, _reduce),
        Collective("all_gather", ("allgather",), AllgatherOptions, _all_gather),
        Collective(
            "all_gather_into_tensor",
            method_names("all_gather_single"),
            AllgatherOptions,
            _all_gather_single,
        ),
        Collective("reduce_scatter", ("reduce_scatter",), ReduceScatterOptions, _reduce_scatter),
        Collective(
            "reduce_scatter_tensor",
            method_names("reduce_scatter_single"),
            ReduceScatterOptions,
            _reduce_scatter_single,
        ),
        Collective(
            "all_to_all_single",
            method_names("all_to_all_single"),
            AllToAllOptions,
            _all_to_all_single,
        ),
        Collective("all_to_all", ("alltoall",), AllToAllOptions, _all_to_all),
        Collective("gather", ("gather",), GatherOptions, _gather),
        Collective("scatter", ("scatter",), ScatterOptions, _scatter),
        Collective("barrier", ("barrier",), BarrierOptions, _barrier),
    )
}
"""Keyed by the ProcessGroup method that runs the collective (torch >= 2.8's name)."""
