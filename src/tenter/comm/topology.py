"""Which ranks of a process group share a host.

Ranks on one host exchange data through shared memory; ranks on different hosts go
through gloo (CPU) or NCCL (CUDA). "Host" is decided by a key every rank publishes in the
group's store, in this order:

1. ``TENTER_HOST_ADDR`` / ``TENTER_HOST``: set per simulated host by tenter's local launcher
   (``algo-1`` on ``127.100.0.1``, ``algo-2`` on ``127.101.0.1``, ...), so that hosts
   simulated on one machine are separate hosts here and the inter-host path runs.
2. ``TENTER_COMM_HOST_KEY``: an explicit override (tests, unusual clusters).
3. The machine's hostname plus its boot id: two containers with the same hostname on
   different machines differ by boot id, and ``LOCAL_WORLD_SIZE`` is not trusted, because
   it says how many ranks share a host but not which.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import Any

_BOOT_ID = "/proc/sys/kernel/random/boot_id"


def host_key() -> str:
    """This process's host identity (see the module docstring)."""
    addr = os.environ.get("TENTER_HOST_ADDR", "")
    name = os.environ.get("TENTER_HOST", "")
    if addr or name:
        return f"tenter:{name}@{addr}"
    explicit = os.environ.get("TENTER_COMM_HOST_KEY")
    if explicit:
        return f"key:{explicit}"
    try:
        with open(_BOOT_ID) as f:
            boot = f.read().strip()
    except OSError:
        boot = "no-boot-id"
    return f"host:{socket.gethostname()}/{boot}"


@dataclass(frozen=True)
class Topology:
    """The placement of a process group's ranks on hosts.

    Hosts are ordered by their lowest group rank, and ranks within a host by group rank,
    so every rank derives the same picture from the same keys.
    """

    rank: int
    """This process's rank in the group."""
    hosts: tuple[tuple[int, ...], ...]
    """Group ranks per host."""

    @classmethod
    def from_keys(cls, rank: int, keys: list[str]) -> Topology:
        by_key: dict[str, list[int]] = {}
        for r, key in enumerate(keys):
            by_key.setdefault(key, []).append(r)
        hosts = sorted((tuple(ranks) for ranks in by_key.values()), key=lambda rs: rs[0])
        return cls(rank=rank, hosts=tuple(hosts))

    @property
    def host_index(self) -> int:
        return next(i for i, ranks in enumerate(self.hosts) if self.rank in ranks)

    @property
    def local_ranks(self) -> tuple[int, ...]:
        """Group ranks on this process's host, in order."""
        return self.hosts[self.host_index]

    @property
    def local_index(self) -> int:
        return self.local_ranks.index(self.rank)

    @property
    def num_hosts(self) -> int:
        return len(self.hosts)

    @property
    def is_leader(self) -> bool:
        """The lowest group rank of each host speaks for it between hosts."""
        return self.local_index == 0

    @property
    def leaders(self) -> tuple[int, ...]:
        return tuple(ranks[0] for ranks in self.hosts)


def exchange(store: Any, rank: int, size: int) -> Topology:
    """Publish this rank's host key in ``store`` and read everyone's."""
    store.set(f"tenter/host/{rank}", host_key())
    keys = [store.get(f"tenter/host/{r}").decode() for r in range(size)]
    return Topology.from_keys(rank, keys)
