"""The address plan of isolated hosts (``isolation: network``): pure data, shared by the plan
(what the workers are told) and :mod:`tenter.launch.launcher.isolation.network` (what is created).

Each host is in network namespaces of its own, on a bridge in a *switch* namespace that has
:data:`SWITCH_ADDR`, where the launcher's rendezvous store listens. Host ``i`` has
:func:`host_addr` ``(i)`` on its interface :data:`HOST_NIC`.
"""

from __future__ import annotations

import ipaddress

from tenter.spec.limits import MAX_ISOLATED_HOSTS

ISOLATION_MODES = ("none", "network")
"""``none``: simulated hosts share this machine's network (loopback addresses);
``network``: each host in namespaces of its own (network, hostname, ``/dev/shm``)."""
SUBNET = ipaddress.IPv4Network("198.18.0.0/15")
"""RFC 2544's range for benchmarking networks: neither private nor public, never routed."""
SWITCH_ADDR = "198.18.0.1"
HOST_NIC = "eth0"
"""The hosts' interface: SageMaker's name for a cluster host's (resourceconfig.json)."""
MAX_HOSTS = MAX_ISOLATED_HOSTS
"""Host ``i`` is 198.18.(100 + i).1: string order is host order (torch elastic's rendezvous
ranks hosts by sorting addresses) while the third octet stays below 256."""


def host_addr(index: int) -> str:
    """The address of host ``index`` (0-based)."""
    if not 0 <= index < MAX_HOSTS:
        raise ValueError(f"host index {index} outside 0..{MAX_HOSTS - 1}")
    return f"198.18.{100 + index}.1"


def etc_hosts(hostnames: list[str]) -> str:
    """The ``/etc/hosts`` of every isolated host: each host's name at its address (host ``i``
    is ``hostnames[i]``), as a cluster's DNS or SageMaker's ``/etc/hosts`` has it. Scripts
    can then connect to ``algo-2``, and torch's reverse lookups of peers find names rather
    than wait on a DNS server no host can reach."""
    lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
    lines.append(f"{SWITCH_ADDR}\tswitch")
    lines += [f"{host_addr(i)}\t{name}" for i, name in enumerate(hostnames)]
    return "\n".join(lines) + "\n"
