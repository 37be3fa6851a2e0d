"""Where a job's hosts are (their addresses, the interface that carries them), and the
addresses that follow: torchft's lighthouse and the job's store."""

from __future__ import annotations

from dataclasses import dataclass

from tenter.contract import isolation
from tenter.contract.placeholders import (
    LIGHTHOUSE_PORT,
    RDZV_PORT,
)
from tenter.spec import JobSpec
from tenter.spec.limits import MAX_SIMULATED_HOSTS


def simulated_host_addr(index: int) -> str:
    """Loopback address of simulated host ``index`` (0-based): 127.100.0.1, 127.101.0.1, ...

    torch elastic's c10d rendezvous ranks nodes by sorting their address strings; three-digit
    second octets make string order equal host order, for up to 156 hosts (the spec's limit,
    :data:`tenter.spec.limits.MAX_SIMULATED_HOSTS`, refuses more before anything is planned).
    """
    assert index >= 0
    if index < MAX_SIMULATED_HOSTS:
        return f"127.{100 + index}.0.1"
    # Beyond the spec's limit only in a rehearsal (tenter.rehearsal.plan), whose membership
    # is fixed: its rounds are planned, not ordered by torch's rendezvous.
    return f"127.{100 + index % MAX_SIMULATED_HOSTS}.{index // MAX_SIMULATED_HOSTS}.1"


@dataclass(frozen=True)
class Addresses:
    """Where a job's hosts are: their addresses and the interface that carries them."""

    addrs: list[str]
    network_interface: str
    simulated: bool
    """The hosts are simulated on this machine (no cluster gave their addresses)."""
    isolated: bool
    """Simulated hosts in network namespaces of their own (``isolation: network``)."""


def host_addresses(spec: JobSpec, addrs: list[str] | None, network_interface: str) -> Addresses:
    """A cluster's hosts keep the ``addrs`` it gives; simulated ones get this machine's
    loopback addresses, or with ``isolation: network`` the private network's."""
    count = spec.instance_count
    if addrs is not None:
        return Addresses(list(addrs), network_interface, simulated=False, isolated=False)
    if spec.isolation == "network":
        own = [isolation.host_addr(i) for i in range(count)]
        return Addresses(own, isolation.HOST_NIC, simulated=True, isolated=True)
    loopback = [simulated_host_addr(i) for i in range(count)]
    return Addresses(loopback, network_interface, simulated=True, isolated=False)


def lighthouse_url(spec: JobSpec, where: Addresses) -> str:
    """torchft's lighthouse (``fault_tolerance``; else ""), where the launcher is: this
    machine's loopback for simulated hosts, the isolated hosts' switch, the first host on a
    cluster."""
    if not spec.fault_tolerance:
        return ""
    simulated = "127.0.0.1" if where.simulated else where.addrs[0]
    addr = isolation.SWITCH_ADDR if where.isolated else simulated
    return f"http://{addr}:{LIGHTHOUSE_PORT}"


def store_policy(spec: JobSpec, where: Addresses, per_group: int) -> tuple[str, bool]:
    """The rendezvous endpoint, and whether the first host's agent serves the job's store
    there (:func:`_store_on_first_host`); the spec's own endpoint (etcd's) stands."""
    on_first_host = _store_on_first_host(spec, where.isolated, per_group)
    store_addr = isolation.SWITCH_ADDR if where.isolated else "127.0.0.1"
    addr = where.addrs[0] if on_first_host else store_addr
    return spec.elastic.rendezvous.endpoint or f"{addr}:{RDZV_PORT}", on_first_host


def _store_on_first_host(spec: JobSpec, isolated: bool, per_group: int) -> bool:
    """:attr:`Plan.store_on_first_host` for a local job: one of fixed membership on c10d,
    on this machine's network (isolated hosts reach the launcher's store on their switch),
    without replica groups (a group may end while the others go on)."""
    elastic = spec.elastic
    fixed = (elastic.min_hosts or per_group) == (elastic.max_hosts or per_group)
    c10d = elastic.rendezvous.backend != "etcd"
    return spec.backend == "local" and fixed and c10d and not isolated and not spec.fault_tolerance
