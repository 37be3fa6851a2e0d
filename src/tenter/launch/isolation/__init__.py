"""Isolated hosts on one machine: each simulated host in network, UTS and mount namespaces of
its own, joined by a bridge, so that what crosses hosts really crosses a network."""
