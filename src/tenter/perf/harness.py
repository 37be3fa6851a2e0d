"""The benchmark harness: one sweep for every collective (nccl-tests' ``common.cu``).

For each element type and reduction, it warms every size up, then ``-N`` times over the
sizes, for each half (out-of-place, in-place): fills the buffers with verifiable data,
times the calls (:mod:`tenter.perf.timing`), combines the per-rank times as ``-a`` says,
and with ``-c N`` runs the collective N more times on fresh data and counts the wrong
elements, summed over ranks. Rank 0 prints each row as it is measured and, with ``-J``,
writes nccl-tests' JSON file at the end.
"""

from __future__ import annotations

import functools
import itertools
import os
import time
from collections.abc import Callable, Iterable
from typing import TextIO

import torch
import torch.distributed as dist
from torch.torch_version import TorchVersion

import tenter
from tenter.perf import report, results_json
from tenter.perf.collectives import Call, Collective, Geometry
from tenter.perf.compat import nccl_premul_sum
from tenter.perf.options import PerfOptions
from tenter.perf.report import DeviceInfo, Half, IterStats, Row
from tenter.perf.resources import MemoryProbe, PerfError, check_memory, gather_devices
from tenter.perf.timing import time_calls
from tenter.perf.verifiable import DTYPES, Pattern, premul_factor

__all__ = ["PerfError", "refuse_what_cannot_run", "run", "unsupported"]

_OPS = {
    "sum": dist.ReduceOp.SUM,
    "prod": dist.ReduceOp.PRODUCT,
    "min": dist.ReduceOp.MIN,
    "max": dist.ReduceOp.MAX,
    "avg": dist.ReduceOp.AVG,
}


def run(
    collective: Collective,
    opts: PerfOptions,
    device: torch.device,
    out: TextIO,
    memory_before_init: int | None = None,
) -> int:
    """Benchmark ``collective`` in the current process group; return the exit status
    (0, or 1 when any value was wrong). Raises :class:`PerfError` on every rank alike.
    ``memory_before_init``: :func:`memory_in_use` before the process group was created
    (for ``-M``)."""
    nranks, backend = dist.get_world_size(), dist.get_backend()
    refuse_what_cannot_run(collective, opts, backend, nranks)
    min_busbw = _min_busbw()
    start_time = time.strftime(report.TIME_FORMAT)
    memory = MemoryProbe(device, memory_before_init)
    devices = gather_devices(device)
    check_memory(collective, opts, devices, nranks)
    emit = _printer(out)
    results_file = None
    if opts.output_file is not None and dist.get_rank() == 0:
        results_file = results_json.open_exclusive(opts.output_file)
        emit(
            [f"# Writing JSON output to {results_file[1]}"]
            if results_file
            else [f"# skipping json output; {opts.output_file} not accessible"]
        )
    program = f"{collective.name}_perf"
    rows: list[Row] = []
    try:
        _benchmark(collective, opts, device, emit, memory, devices, rows, min_busbw)
    finally:
        if results_file:
            with results_file[0] as f:
                info = results_json.RunInfo(
                    args=[program, *opts.argv()[1:]],
                    env=dict(os.environ),
                    nccl_version=_nccl_version(),
                    start_time=start_time,
                    end_time=time.strftime(report.TIME_FORMAT),
                    devices=devices,
                    errors=[""],  # ncclGetLastError(NULL): "" when there is none
                    min_busbw=min_busbw,
                )
                f.write(results_json.dumps(results_json.document(opts, info, rows)))
    failed = report.out_of_bounds(rows) or report.bandwidth_ok(rows, min_busbw) is False
    return 1 if failed else 0


def _min_busbw() -> float | None:
    """nccl-tests' ``NCCL_TESTS_MIN_BW`` (GB/s): the run fails when its average busbw is
    below 90% of it."""
    text = os.environ.get("NCCL_TESTS_MIN_BW")
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        raise PerfError(
            f"NCCL_TESTS_MIN_BW={text!r} is not a number; set it to the lowest acceptable "
            "average bus bandwidth in GB/s, e.g. NCCL_TESTS_MIN_BW=100, or unset it"
        ) from None


def _benchmark(
    collective: Collective,
    opts: PerfOptions,
    device: torch.device,
    emit: Callable[[list[str]], None],
    memory: MemoryProbe,
    devices: list[DeviceInfo],
    rows: list[Row],
    min_busbw: float | None,
) -> None:
    """Print the table, appending each row to ``rows`` as it is measured."""
    program = f"{collective.name}_perf"
    backend, nranks = dist.get_backend(), dist.get_world_size()
    version = (
        f"tenter perf {tenter.__version__} torch {torch.__version__} "
        f"backend {backend} device {device.type} nranks {nranks}"
    )
    emit(report.preamble(opts, program, version, devices) + report.header(opts))
    for type_name in opts.datatypes:
        for op_name in opts.ops if collective.reduces else (None,):
            if reason := unsupported(backend, type_name, op_name):
                emit([f"# Skipping {type_name} {op_name or ''}".rstrip() + f": {reason}"])
                continue
            memory.start()
            sweep = _Sweep(collective, opts, device, type_name, op_name)
            memory.allocated()
            sweep.warm_up()
            for size in _cycles(opts):
                rows.append(sweep.measure(size))
                emit([report.row_line(rows[-1])])
            memory.ran()
            del sweep
    emit(report.footer(rows, program, min_busbw))
    if opts.memory_report:
        emit([report.memory_line(memory.result(), device.type)])
    emit(["#"])


def _cycles(opts: PerfOptions) -> Iterable[int]:
    """The sizes of every ``-N`` cycle (``-N 0``: until interrupted, as nccl-tests)."""
    cycles: Iterable[int] = itertools.count() if opts.run_cycles == 0 else range(opts.run_cycles)
    return (size for _ in cycles for size in opts.sizes())


def refuse_what_cannot_run(
    collective: Collective, opts: PerfOptions, backend: str, nranks: int
) -> None:
    """Raise :class:`PerfError` for flags this job cannot run (also called by ``tenter
    perf`` before it launches anything)."""
    _min_busbw()
    if collective.rooted and opts.root >= nranks:
        raise PerfError(
            f"-r/--root {opts.root} is not a rank of this job ({nranks} ranks); "
            f"pass -r between 0 and {nranks - 1}"
        )
    ops: tuple[str | None, ...] = opts.ops if collective.reduces else (None,)
    combos = [(t, o) for t in opts.datatypes for o in ops]
    if all(unsupported(backend, t, o) for t, o in combos):
        t, o = combos[0]
        flags = f"-o/--op {o} with -d/--datatype {t}" if o else f"-d/--datatype {t}"
        raise PerfError(f"{flags}: {unsupported(backend, t, o)}")


_AVG_ON_GLOO = TorchVersion("2.8")
_PREMUL_TYPES = ("half", "float", "double", "bfloat16")


def unsupported(backend: str, type_name: str, op_name: str | None) -> str | None:
    """Why ``backend`` cannot run this combination, or None. Checked up front because the
    backend fails inside the collective, after the ranks have started it."""
    if type_name in ("uint32", "uint64") and backend in ("gloo", "nccl"):
        return (
            f"torch.distributed's {backend} backend has no {type_name} tensors; "
            f"-d int{type_name[4:]} moves as many bytes"
        )
    if type_name.startswith("f8") and backend == "gloo":
        return "torch.distributed's gloo backend has no fp8 tensors; -d int8 moves as many bytes"
    if op_name == "mulsum":
        if backend != "nccl":
            return (
                "mulsum is NCCL's pre-multiplied sum (ReduceOp.PREMUL_SUM), which only "
                "torch's nccl backend runs: pass --device cuda"
            )
        if type_name not in _PREMUL_TYPES:
            return (
                "torch's nccl backend pre-multiplies only half, float, double and bfloat16; "
                "choose one of those with -d"
            )
        if type_name == "bfloat16":
            # Seen on torch 2.11.0 (NCCL 2.28.9): every element came back wrong. No torch
            # release tenter checks is known to carry the fix (pytorch/pytorch#190747).
            return (
                "torch's nccl backend hands NCCL bfloat16's pre-multiply factor as a 4-byte "
                "float, which NCCL reads as 0 (pytorch/pytorch#190745); choose half, float "
                "or double with -d"
            )
    if op_name == "avg" and type_name.startswith("f8") and backend == "nccl":
        # Seen on NCCL 2.28.9: ncclInvalidArgument, which ends the run in the first call.
        return "NCCL does not average fp8 tensors (ncclAvg); use -o sum, or a wider -d"
    if backend == "gloo" and op_name == "avg":
        if TorchVersion(torch.__version__) < _AVG_ON_GLOO:
            return (
                f"gloo averages (ReduceOp.AVG) from torch 2.8 on, and this is torch "
                f"{torch.__version__}; upgrade torch, or use -o sum"
            )
        if not DTYPES[type_name].is_floating_point:
            return (
                "gloo averages by true division, which integer tensors cannot hold; "
                "choose a floating-point -d or another -o"
            )
    return None


def _reduce_op(op_name: str | None, rank: int) -> dist.ReduceOp | dist.ReduceOp.RedOpType | None:
    if op_name == "mulsum":
        return nccl_premul_sum(float(premul_factor(rank)))
    return _OPS[op_name] if op_name else None


def _printer(out: TextIO) -> Callable[[list[str]], None]:
    def emit(lines: list[str]) -> None:
        if dist.get_rank() == 0:
            out.write("".join(line + "\n" for line in lines))
            out.flush()

    return emit


def _nccl_version() -> int:
    """NCCL_VERSION_CODE of torch's NCCL (what nccl-tests records), 0 without one."""
    try:
        major, minor, patch = torch.cuda.nccl.version()  # type: ignore[no-untyped-call]
    except (AttributeError, RuntimeError, TypeError):
        return 0
    return int(major) * 10000 + int(minor) * 100 + int(patch)


class _Sweep:
    """The buffers and data of one (collective, type, reduction); sized for the largest
    message once, as nccl-tests allocates them."""

    def __init__(
        self,
        collective: Collective,
        opts: PerfOptions,
        device: torch.device,
        type_name: str,
        op_name: str | None,
    ) -> None:
        self.coll, self.opts, self.device = collective, opts, device
        self.type_name, self.op_name = type_name, op_name
        self.dtype = DTYPES[type_name]
        self.rank, self.nranks = dist.get_rank(), dist.get_world_size()
        self.op = _reduce_op(op_name, self.rank)
        self.data = Pattern(self.dtype, op_name, self.nranks, device)
        self.itemsize = self.dtype.itemsize
        largest = self.geometry(opts.maxbytes)
        self.send_buf = self._buffer(largest.send)
        self.recv_buf = self._buffer(largest.recv)
        self.inplace_buf = self._buffer(max(largest.send, largest.recv))

    def _buffer(self, count: int) -> torch.Tensor:
        # -u: start `unalign` elements into the allocation, off the allocator's alignment.
        # Zeroed, not empty: garbage floats (NaN, denormals) would slow the warm-up.
        skip = self.opts.unalign
        return torch.zeros(count + skip, dtype=self.dtype, device=self.device)[skip:]

    def geometry(self, size: int) -> Geometry:
        return self.coll.geometry(size // self.itemsize, self.nranks)

    def calls(self, g: Geometry) -> tuple[Call, Call]:
        """The out-of-place and the in-place call of one size."""
        send_at, recv_at = self.rank * g.send_offset, self.rank * g.recv_offset
        buf = self.inplace_buf[: max(g.send, g.recv)]
        common = (self.op, self.opts.root, self.rank, self.nranks)
        return (
            Call(self.send_buf[: g.send], self.recv_buf[: g.recv], *common),
            Call(buf[send_at : send_at + g.send], buf[recv_at : recv_at + g.recv], *common),
        )

    def warm_up(self) -> None:
        for size in self.opts.sizes():
            for call in self.calls(self.geometry(size)):
                self.coll.prepare(call)
                for _ in range(self.opts.warmup_iters):
                    self.coll.run(call)
        self.sync()

    def measure(self, size: int) -> Row:
        g = self.geometry(size)
        nbytes = max(g.send, g.recv) * self.itemsize
        out_of_place, in_place = self.calls(g)
        oop = self.half(out_of_place, g, nbytes, checked=True)
        ip = self.half(in_place, g, nbytes, checked=self.coll.checks_in_place)
        return Row(
            size=nbytes,
            count=g.param,
            type=self.type_name,
            redop=self.op_name or "none",
            root=self.opts.root if self.coll.rooted else -1,
            out_of_place=oop,
            in_place=ip,
            timestamp=time.strftime(report.TIME_FORMAT) if self.opts.report_timestamps else None,
        )

    def half(self, call: Call, g: Geometry, nbytes: int, checked: bool) -> Half:
        self.fill(call, g)
        self.coll.prepare(call)
        self.sync()  # the copy is not in the first timed call
        self.barrier()
        timed = time_calls(
            functools.partial(self.coll.run, call), self.opts, self.device, self.sync, self.barrier
        )
        seconds, cpu_seconds = self.combine(timed.seconds, timed.cpu_seconds)
        algbw = nbytes / 1e9 / seconds
        wrong, errors = self.check(call, g) if checked and self.opts.check else (None, 0)
        shown = cpu_seconds if self.opts.report_cputime else seconds
        return Half(
            time_us=shown * 1e6,
            algbw=algbw,
            busbw=algbw * self.coll.busbw_factor(self.nranks),
            wrong=wrong,
            errors=errors,
            per_iter=self.gather_iterations(timed.per_iter),
        )

    def combine(self, *seconds: float) -> tuple[float, ...]:
        """Per-rank times combined over ranks as ``-a`` says."""
        times = torch.tensor(seconds, dtype=torch.float64, device=self.device)
        if self.opts.average == 0:
            dist.broadcast(times, src=0)
        else:
            op = {1: dist.ReduceOp.SUM, 2: dist.ReduceOp.MIN, 3: dist.ReduceOp.MAX}
            dist.all_reduce(times, op=op[self.opts.average])
            if self.opts.average == 1:
                times /= self.nranks
        return tuple(float(t) for t in times.tolist())

    def gather_iterations(self, per_iter: list[float] | None) -> IterStats | None:
        if per_iter is None:
            return None
        mine = torch.tensor(per_iter, dtype=torch.float64, device=self.device) * 1e6
        everyone = [torch.empty_like(mine) for _ in range(self.nranks)]
        dist.all_gather(everyone, mine)
        rows = [t.tolist() for t in everyone]
        return IterStats(per_process_us=rows, skipped=self.opts.per_iter_skip)

    def fill(self, call: Call, g: Geometry) -> None:
        # Zero first: in place, the send buffer lies inside the receive buffer.
        call.recv.zero_()
        call.send.copy_(self.data.values(self.rank, 0, g.send))

    def check(self, call: Call, g: Geometry) -> tuple[int, int]:
        """Wrong elements summed over ranks, and nccl-tests' error count: the ranks with a
        wrong element, summed over the ``-c`` runs (which stop at the first with any)."""
        expected = self.coll.expected(self.data, g, self.rank, self.nranks, self.opts.root)
        counts = torch.zeros(2, dtype=torch.int64, device=self.device)
        errors = 0
        for _ in range(self.opts.check):
            self.fill(call, g)
            self.coll.prepare(call)
            self.coll.run(call)
            self.sync()
            local = 0 if expected is None else self.data.count_wrong(call.recv, expected)
            counts[0], counts[1] = local, int(local > 0)
            dist.all_reduce(counts)
            wrong, failed = (int(v) for v in counts.tolist())
            errors += failed
            if wrong:
                break
        return wrong, errors

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def barrier(self) -> None:
        if self.device.type == "cuda":
            dist.barrier(device_ids=[self.device.index])
        else:
            dist.barrier()
