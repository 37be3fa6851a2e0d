"""The benchmark harness: one sweep for every collective (nccl-tests' ``common.cu``).

For each element type and reduction, it warms every size up, then for each size and each
half (out-of-place, in-place): fills the buffers with verifiable data, times ``iters``
calls between barriers (device-synchronised for CUDA), combines the per-rank times as
``-a`` says, and with ``-c N`` runs the collective N more times on fresh data and counts
the wrong elements, summed over ranks. Rank 0 prints each row as it is measured.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

import psutil
import torch
import torch.distributed as dist

import tenter
from tenter.perf import report
from tenter.perf.collectives import Call, Collective, Geometry
from tenter.perf.options import PerfOptions, format_size
from tenter.perf.report import DeviceInfo, Half, Row
from tenter.perf.verifiable import DTYPES, Pattern
from tenter.runtime import api as runtime

_OPS = {
    "sum": dist.ReduceOp.SUM,
    "prod": dist.ReduceOp.PRODUCT,
    "min": dist.ReduceOp.MIN,
    "max": dist.ReduceOp.MAX,
    "avg": dist.ReduceOp.AVG,
}


class PerfError(Exception):
    """A flag that cannot work in this job (a root outside it, buffers that cannot fit)."""


def run(collective: Collective, opts: PerfOptions, device: torch.device, out: TextIO) -> int:
    """Benchmark ``collective`` in the current process group; return the exit status
    (0, or 1 when any value was wrong). Raises :class:`PerfError` on every rank alike."""
    nranks = dist.get_world_size()
    if collective.rooted and opts.root >= nranks:
        raise PerfError(
            f"-r/--root {opts.root} is not a rank of this job ({nranks} ranks); "
            f"pass -r between 0 and {nranks - 1}"
        )
    backend = dist.get_backend()
    combos = [(t, o) for t in opts.datatypes for o in opts.ops if collective.reduces]
    if combos and all(unsupported(backend, t, o) for t, o in combos):
        t, o = combos[0]
        raise PerfError(
            f"-o/--op {o} with -d/--datatype {t}: {unsupported(backend, t, o)}; "
            "choose another -o or -d"
        )
    devices = _gather_devices(device)
    _check_memory(collective, opts, devices, nranks)
    program = f"{collective.name}_perf"
    emit = _printer(out)
    version = (
        f"tenter perf {tenter.__version__} torch {torch.__version__} "
        f"backend {dist.get_backend()} device {device.type} nranks {nranks}"
    )
    emit(
        report.preamble(
            program=program,
            version_line=version,
            minbytes=opts.minbytes,
            maxbytes=opts.maxbytes,
            stepfactor=opts.stepfactor,
            stepbytes=opts.stepbytes,
            warmup_iters=opts.warmup_iters,
            iters=opts.iters,
            check=opts.check,
            blocking=opts.blocking,
            devices=devices,
        )
        + report.header()
    )
    rows: list[Row] = []
    for type_name in opts.datatypes:
        for op_name in opts.ops if collective.reduces else (None,):
            if reason := unsupported(dist.get_backend(), type_name, op_name):
                emit([f"# Skipping {type_name} {op_name}: {reason}"])
                continue
            sweep = _Sweep(collective, opts, device, type_name, op_name)
            sweep.warm_up()
            for size in opts.sizes():
                rows.append(sweep.measure(size))
                emit([report.row_line(rows[-1])])
    emit(report.footer(rows, program))
    if opts.json and dist.get_rank() == 0:
        config = dataclasses.asdict(opts) | {"nranks": nranks, "backend": dist.get_backend()}
        doc = report.json_document(program=program, config=config, devices=devices, rows=rows)
        Path(opts.json).write_text(json.dumps(doc, indent=2) + "\n")
    return 1 if report.out_of_bounds(rows) else 0


def unsupported(backend: str, type_name: str, op_name: str | None) -> str | None:
    """Why ``backend`` cannot run this combination, or None. Checked up front because the
    backend fails inside the collective, after the ranks have started it."""
    if backend == "gloo" and op_name == "avg" and not DTYPES[type_name].is_floating_point:
        return "gloo averages by true division, which integer tensors cannot hold"
    return None


def _printer(out: TextIO) -> Callable[[list[str]], None]:
    def emit(lines: list[str]) -> None:
        if dist.get_rank() == 0:
            out.write("".join(line + "\n" for line in lines))
            out.flush()

    return emit


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
        self.data = Pattern(self.dtype, op_name, self.nranks, device)
        self.itemsize = self.dtype.itemsize
        largest = self.geometry(opts.maxbytes)
        # Zeroed, not empty: garbage floats (NaN, denormals) would slow the warm-up.
        self.send_buf = torch.zeros(largest.send, dtype=self.dtype, device=device)
        self.recv_buf = torch.zeros(largest.recv, dtype=self.dtype, device=device)
        self.inplace_buf = torch.zeros(
            max(largest.send, largest.recv), dtype=self.dtype, device=device
        )

    def geometry(self, size: int) -> Geometry:
        return self.coll.geometry(size // self.itemsize, self.nranks)

    def calls(self, g: Geometry) -> tuple[Call, Call]:
        """The out-of-place and the in-place call of one size."""
        op = _OPS[self.op_name] if self.op_name else None
        send_at, recv_at = self.rank * g.send_offset, self.rank * g.recv_offset
        buf = self.inplace_buf[: max(g.send, g.recv)]
        return (
            Call(
                self.send_buf[: g.send],
                self.recv_buf[: g.recv],
                op,
                self.opts.root,
                self.rank,
                self.nranks,
            ),
            Call(
                buf[send_at : send_at + g.send],
                buf[recv_at : recv_at + g.recv],
                op,
                self.opts.root,
                self.rank,
                self.nranks,
            ),
        )

    def warm_up(self) -> None:
        for size in self.opts.sizes():
            for call in self.calls(self.geometry(size)):
                for _ in range(self.opts.warmup_iters):
                    self.coll.run(call)
        self.sync()

    def measure(self, size: int) -> Row:
        g = self.geometry(size)
        nbytes = max(g.send, g.recv) * self.itemsize
        out_of_place, in_place = self.calls(g)
        return Row(
            size=nbytes,
            count=g.param,
            type=self.type_name,
            redop=self.op_name or "none",
            root=self.opts.root if self.coll.rooted else -1,
            out_of_place=self.half(out_of_place, g, nbytes, checked=True),
            in_place=self.half(in_place, g, nbytes, checked=self.coll.checks_in_place),
        )

    def half(self, call: Call, g: Geometry, nbytes: int, checked: bool) -> Half:
        self.fill(call, g)
        seconds = self.time(call)
        algbw = nbytes / 1e9 / seconds
        wrong = self.check(call, g) if checked and self.opts.check else None
        return Half(seconds * 1e6, algbw, algbw * self.coll.busbw_factor(self.nranks), wrong)

    def fill(self, call: Call, g: Geometry) -> None:
        # Zero first: in place, the send buffer lies inside the receive buffer.
        call.recv.zero_()
        call.send.copy_(self.data.values(self.rank, 0, g.send))

    def time(self, call: Call) -> float:
        """Seconds per call, combined over ranks as ``-a`` says."""
        self.barrier()
        start = time.perf_counter()
        for _ in range(self.opts.iters):
            self.coll.run(call)
            if self.opts.blocking:
                self.sync()
                self.barrier()
        self.sync()
        elapsed = torch.tensor(
            [(time.perf_counter() - start) / self.opts.iters],
            dtype=torch.float64,
            device=self.device,
        )
        if self.opts.average == 0:
            dist.broadcast(elapsed, src=0)
        else:
            op = {1: dist.ReduceOp.SUM, 2: dist.ReduceOp.MIN, 3: dist.ReduceOp.MAX}
            dist.all_reduce(elapsed, op=op[self.opts.average])
            if self.opts.average == 1:
                elapsed /= self.nranks
        return float(elapsed.item())

    def check(self, call: Call, g: Geometry) -> int:
        """Wrong elements, summed over ranks (stops at the first of ``-c`` runs with any)."""
        expected = self.coll.expected(self.data, g, self.rank, self.nranks, self.opts.root)
        wrong = torch.zeros(1, dtype=torch.int64, device=self.device)
        for _ in range(self.opts.check):
            self.fill(call, g)
            self.coll.run(call)
            self.sync()
            local = 0 if expected is None else self.data.count_wrong(call.recv, expected)
            wrong.fill_(local)
            dist.all_reduce(wrong)
            if wrong.item():
                break
        return int(wrong.item())

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def barrier(self) -> None:
        if self.device.type == "cuda":
            dist.barrier(device_ids=[self.device.index])
        else:
            dist.barrier()


def _gather_devices(device: torch.device) -> list[DeviceInfo]:
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        # Older torch builds lack the PCI fields; nccl-tests prints domain:bus:device.
        domain, bus, dev = (
            int(getattr(props, f"pci_{field}_id", 0)) for field in ("domain", "bus", "device")
        )
        bus_id = f"{domain:04x}:{bus:02x}:{dev:02x}"
        name, index, free = props.name, device.index, torch.cuda.mem_get_info(device)[0]
    else:
        bus_id, name, index = "cpu", f"CPU {platform.machine()}", 0
        free = psutil.virtual_memory().available
    mine = DeviceInfo(
        rank=dist.get_rank(),
        pid=os.getpid(),
        host=runtime.host(),
        device=index,
        bus_id=bus_id,
        name=name,
        machine=platform.node(),
        free_bytes=int(free),
    )
    everyone: list[DeviceInfo | None] = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, mine)
    return [d for d in everyone if d is not None]


def buffer_bytes(collective: Collective, opts: PerfOptions, nranks: int) -> int:
    """Memory one rank needs for the largest size: the send, receive and in-place buffers,
    plus (with ``-c``) the expected result and the scratch that computes it."""
    need = 0
    for type_name in opts.datatypes:
        itemsize = DTYPES[type_name].itemsize
        g = collective.geometry(opts.maxbytes // itemsize, nranks)
        largest = max(g.send, g.recv)
        total = itemsize * (g.send + g.recv + largest)
        if opts.check:
            total += 8 * (g.recv + 3 * largest)
        need = max(need, total)
    return need


def _check_memory(
    collective: Collective, opts: PerfOptions, devices: list[DeviceInfo], nranks: int
) -> None:
    """Fail on every rank alike, before allocating, when the buffers cannot fit."""
    per_rank = buffer_bytes(collective, opts, nranks)
    sharing: dict[tuple[str, int], list[DeviceInfo]] = defaultdict(list)
    for d in devices:
        sharing[(d.machine, d.device if d.bus_id != "cpu" else -1)].append(d)
    for group in sharing.values():
        need, free = per_rank * len(group), min(d.free_bytes for d in group)
        if need > free:
            raise PerfError(
                f"-e/--maxbytes {format_size(opts.maxbytes)} needs {_gib(need)} for "
                f"{len(group)} rank(s) on {group[0].host} ({_gib(per_rank)} each: send, "
                f"receive and in-place buffers{' and check data' if opts.check else ''}), "
                f"but only {_gib(free)} is free; lower -e/--maxbytes"
                + (" or pass -c 0" if opts.check else "")
            )


def _gib(nbytes: int) -> str:
    return f"{nbytes / (1 << 30):.2f} GiB"
