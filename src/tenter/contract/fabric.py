"""The network fabric's variables: what an instance type's EFA and NCCL need, as data.

One table for every backend (mpirun's ``-x``, the plan's host environment, Kubernetes pods),
so that a p4d job gets the same libfabric and NCCL settings wherever it runs.
"""

from __future__ import annotations

from collections.abc import Callable

from tenter.spec.catalog import InstanceType

CLUSTER_NIC = "eth0"
"""The network interface of cluster hosts, as SageMaker names it in resourceconfig.json."""
LOOPBACK_NIC = "lo"
"""The interface of hosts simulated on this machine."""

EFA_ENV: tuple[tuple[str, str, Callable[[InstanceType], bool]], ...] = (
    # libfabric's EFA provider, not its TCP fallback.
    ("FI_PROVIDER", "efa", lambda t: t.efa > 0),
    # GPUDirect RDMA where the instance's EFA supports it (catalog field gpu_rdma).
    ("FI_EFA_USE_DEVICE_RDMA", "1", lambda t: t.gpu_rdma),
    # EFA registers memory; a fork() in a data loader must not corrupt it.
    ("RDMAV_FORK_SAFE", "1", lambda t: t.efa > 0),
    # aws-ofi-nccl before 1.7 needs NCCL's simple protocol on EFA (LL/LL128 assume ordering
    # EFA does not give); pass `-x NCCL_PROTO=...` in custom_mpi_options to change it.
    ("NCCL_PROTO", "simple", lambda t: t.efa > 0 and t.gpus > 0),
)
"""Variables of every rank: (name, value, whether the instance type needs it)."""


def fabric_env(itype: InstanceType, network_interface: str) -> dict[str, str]:
    """The EFA/NCCL variables of ``itype`` whose hosts talk over ``network_interface``."""
    env = {name: value for name, value, needed in EFA_ENV if needed(itype)}
    if itype.gpus > 0:
        # NCCL's bootstrap and socket transport on the hosts' interface, not a Docker bridge.
        env["NCCL_SOCKET_IFNAME"] = network_interface
    return env


def socket_env(network_interface: str) -> dict[str, str]:
    """gloo's and NCCL's sockets on ``network_interface``: where a host's name resolves to no
    address of its own, gloo would pick loopback and its peers on other hosts could not reach it."""
    return {"GLOO_SOCKET_IFNAME": network_interface, "NCCL_SOCKET_IFNAME": network_interface}
