"""Building what a ``tenter`` process group runs on, once, when the group is created: the
host topology, the shared-memory channel of this host, the gloo groups, NCCL, and the CPU
route (:mod:`tenter.comm.routing`) that its collectives take."""

from __future__ import annotations

import contextlib
import datetime
import functools
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed import ProcessGroupGloo

from tenter.comm.algorithms import ShmCollectives
from tenter.comm.compat import gloo_options, set_nccl_timeout
from tenter.comm.fences import Fences, this_machine_fences
from tenter.comm.hosts import HostsCollectives
from tenter.comm.routing import CpuCollectives
from tenter.comm.shm import SHM_DIR, Channel, Segment, layout, segment_name
from tenter.comm.solo import SoloCollectives
from tenter.comm.topology import Topology, exchange
from tenter.comm.worker import Worker

MIN_CHUNK_BYTES = 1 << 20
ROUND_WORKING_SET_BYTES = 8 << 20
"""What one round of a collective should touch per rank, so that a peer reads the staged
data from the shared last-level cache rather than from memory."""
DEFAULT_SMALL_BYTES = 256 << 10


def env_bytes(name: str, default: int, minimum: int) -> int:
    value = os.environ.get(name)
    if not value:
        return default
    try:
        parsed = int(value)
    except ValueError as e:
        raise ValueError(f"{name}={value!r} is not a byte count; set an integer.") from e
    if parsed < minimum:
        raise ValueError(f"{name}={parsed} is below the minimum of {minimum} bytes.")
    return parsed


def chunk_bytes(local_size: int) -> int:
    """Bytes per rank per round: ``TENTER_COMM_CHUNK_BYTES``, else
    ``ROUND_WORKING_SET_BYTES / local ranks`` between 1 and 4 MiB, less if /dev/shm is short
    (at most 1/8 of its free space). Rounds whose buffers stay in cache beat large rounds
    with fewer barriers: on the 2-core test machine a 16 MB all_reduce of 2 ranks took
    3.8 ms with 4 MiB chunks and 6.0 ms with 16 MiB ones."""
    if os.environ.get("TENTER_COMM_CHUNK_BYTES"):
        return env_bytes("TENTER_COMM_CHUNK_BYTES", MIN_CHUNK_BYTES, 4096) // 64 * 64
    try:
        stats = os.statvfs(SHM_DIR)
        budget = stats.f_bavail * stats.f_frsize // 8 // (2 * (local_size + 1))
    except OSError:
        budget = 0
    chunk = min(4 * MIN_CHUNK_BYTES, ROUND_WORKING_SET_BYTES // local_size, budget)
    return max(MIN_CHUNK_BYTES, chunk) // 4096 * 4096


def describe_local_rank(
    global_ranks: Sequence[int], local_ranks: Sequence[int], local_index: int
) -> str:
    """How errors name a local rank: its group rank, and its global rank if different."""
    group_rank = local_ranks[local_index]
    global_rank = global_ranks[group_rank]
    if global_rank == group_rank:
        return str(group_rank)
    return f"{group_rank} (global rank {global_rank})"


def _gloo_options(timeout: datetime.timedelta) -> Any:
    """Gloo options binding to this simulated host's loopback address when tenter's
    launcher gave one, so the inter-host hop really crosses "hosts"."""
    addr = os.environ.get("TENTER_HOST_ADDR")
    if not addr:
        return timeout
    return gloo_options(timeout, addr)


@dataclass
class GroupParts:
    """What one process group runs on. Holds no reference to the group itself, so the
    group's finalizer (which stops the worker and closes the channel) can run."""

    topology: Topology
    cpu: CpuCollectives
    """The CPU route: one host (shared memory, or solo) or several hosts."""
    shm: ShmCollectives | None
    """This host's shared-memory collectives (the latency path uses them directly)."""
    channel: Channel | None
    gloo: Any
    """gloo over the whole group: send/recv, and collectives across hosts."""
    nccl: Any
    """ProcessGroupNCCL for CUDA tensors, or ``None`` without CUDA."""


def build_group(
    store: Any,
    rank: int,
    size: int,
    timeout: datetime.timedelta,
    label: str,
    global_ranks: Sequence[int],
) -> GroupParts:
    """Everything a group needs, created collectively: every rank of the group calls this
    at the same time (the store exchanges and gloo's rendezvous wait for all)."""
    fences = this_machine_fences()  # before anything is created: refuse unsafe machines
    topo = exchange(store, rank, size)
    # A function of plain data, not a bound method of the group: the channel and the
    # collectives keep it, and a reference back to the group would make it a cycle that
    # only the garbage collector frees, perhaps at interpreter exit, when destroying the
    # inner gloo groups aborts the process.
    describe = functools.partial(describe_local_rank, tuple(global_ranks), topo.local_ranks)
    channel: Channel | None = None
    shm: ShmCollectives | None = None
    if len(topo.local_ranks) > 1:
        channel = _open_channel(store, topo, timeout, label, describe, fences)
        small = env_bytes("TENTER_COMM_SMALL_BYTES", DEFAULT_SMALL_BYTES, 0)
        shm = ShmCollectives(channel, small, describe)
    # gloo must be created now, by every rank together.
    gloo = ProcessGroupGloo(
        dist.PrefixStore("tenter/gloo", store), rank, size, _gloo_options(timeout)
    )
    cpu: CpuCollectives
    if topo.num_hosts > 1:
        leaders = None
        if topo.is_leader:
            leaders = ProcessGroupGloo(
                dist.PrefixStore("tenter/leaders", store),
                topo.host_index,
                topo.num_hosts,
                _gloo_options(timeout),
            )
        cpu = HostsCollectives(rank, size, shm, leaders, gloo)
    else:
        cpu = shm if shm is not None else SoloCollectives()
    nccl = None
    if torch.cuda.is_available() and dist.is_nccl_available():
        # Communicators are created lazily by NCCL, so this costs nothing for CPU jobs.
        nccl_opts = dist.ProcessGroupNCCL.Options()
        set_nccl_timeout(nccl_opts, timeout)
        nccl = dist.ProcessGroupNCCL(dist.PrefixStore("tenter/nccl", store), rank, size, nccl_opts)
    return GroupParts(topo, cpu, shm, channel, gloo, nccl)


def _open_channel(
    store: Any,
    topo: Topology,
    timeout: datetime.timedelta,
    label: str,
    describe: Callable[[int], str],
    fences: Fences,
) -> Channel:
    local_size = len(topo.local_ranks)
    key = f"tenter/shm/{topo.host_index}"
    job = os.environ.get("TENTER_JOB_ID") or os.environ.get("TORCHELASTIC_RUN_ID") or "job"
    if topo.is_leader:
        chunk = chunk_bytes(local_size)
        segment = Segment.create(segment_name(job), layout(local_size, chunk)[1])
        store.set(key, f"{segment.name}:{chunk}")
    else:
        name, chunk_text = store.get(key).decode().rsplit(":", 1)
        chunk = int(chunk_text)
        segment = Segment.attach(name, layout(local_size, chunk)[1])
    try:
        if store.add(f"{key}/attached", 1) == local_size:
            store.set(f"{key}/ready", "1")
        store.wait([f"{key}/ready"])
        return Channel(
            segment,
            local_size,
            topo.local_index,
            chunk,
            timeout.total_seconds(),
            describe,
            label,
            fences,
        )
    finally:
        # Everyone has it mapped (or init failed): drop the name so nothing is left in
        # /dev/shm however this job ends.
        segment.unlink()


def shutdown(worker: Worker, channel: Channel | None) -> None:
    """Stop the group's worker thread and unmap its segment."""
    worker.stop()
    if channel is not None:
        with contextlib.suppress(Exception):
            channel.close()
