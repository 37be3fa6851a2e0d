"""Isolated hosts on one machine: each simulated host in network, UTS and mount namespaces of
its own, joined by a bridge, so that what crosses hosts really crosses a network.

:class:`~tenter.launch.launcher.isolation.network.HostNetwork` makes such a network;
:func:`attach` re-opens a running job's (to enter, partition or heal its hosts)."""

from tenter.launch.launcher.isolation.record import attach

__all__ = ["attach"]
