"""What a run needs and uses: the ranks' devices (``# Using devices``), the memory check
made before allocating, and the ``-M`` memory report."""

from __future__ import annotations

import os
import platform
from collections import defaultdict

import psutil
import torch
import torch.distributed as dist

from tenter.perf.collectives import Collective
from tenter.perf.options import PerfOptions, format_size
from tenter.perf.report import DeviceInfo, MemoryUse
from tenter.perf.verifiable import DTYPES
from tenter.runtime import api as runtime


class PerfError(Exception):
    """A flag that cannot work in this job (a root outside it, buffers that cannot fit)."""


def memory_in_use(device: torch.device) -> int:
    """Bytes in use for ``-M``: on the GPU (all processes, as nccl-tests measures it from
    cudaMemGetInfo), or this process's resident memory on the CPU."""
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        return int(total - free)
    return int(psutil.Process().memory_info().rss)


class MemoryProbe:
    """``-M``: what initialisation, the buffers and the collectives each added."""

    def __init__(self, device: torch.device, before_init: int | None) -> None:
        self.device = device
        self.mark = memory_in_use(device)
        self.init = max(0, self.mark - before_init) if before_init is not None else 0
        self.user = self.coll = 0

    def start(self) -> None:
        self.mark = memory_in_use(self.device)

    def allocated(self) -> None:
        now = memory_in_use(self.device)
        self.user, self.mark = max(self.user, now - self.mark), now

    def ran(self) -> None:
        self.coll = max(self.coll, memory_in_use(self.device) - self.mark)

    def result(self) -> MemoryUse:
        """The largest over ranks (a collective call: every rank calls it)."""
        values = torch.tensor([self.init, self.user, self.coll], dtype=torch.int64)
        values = values.to(self.device)
        dist.all_reduce(values, op=dist.ReduceOp.MAX)
        init, user, coll = (int(v) for v in values.tolist())
        return MemoryUse(initialization=init, user_allocated=user, collective=coll)


def gather_devices(device: torch.device) -> list[DeviceInfo]:
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
        total = itemsize * (g.send + g.recv + largest + 3 * opts.unalign)
        if opts.check:
            total += 8 * (g.recv + 3 * largest)
        need = max(need, total)
    return need


def check_memory(
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
