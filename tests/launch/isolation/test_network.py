"""The private host network: hostnames, addresses, one /dev/shm per host, partitions, and
nothing left in this machine's own namespace afterwards, however its creator ends."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tenter.launch.launcher.isolation.network import HostNetwork, host_addr, interfaces_in
from tests.conftest import WAIT_S, OutputReader


def namespaces() -> set[str]:
    """The network namespaces alive on this machine."""
    out = subprocess.run(
        ["lsns", "-n", "-t", "net", "-o", "NS"], capture_output=True, text=True, timeout=60
    )
    return set(out.stdout.split())


def links() -> str:
    return subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, timeout=60).stdout


CONNECT = """
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3])).close()
    print("reached")
except OSError:
    print("unreachable")
"""


def run_on(net: HostNetwork, host: str, *argv: str) -> str:
    done = subprocess.run(
        [*net.enter(host), *argv], capture_output=True, text=True, check=True, timeout=60
    )
    return done.stdout.strip()


@pytest.mark.parametrize("user_namespace", [False, True], ids=["root", "user-namespace"])
def test_hosts_have_their_own_name_address_and_shared_memory(user_namespace: bool) -> None:
    # In a user namespace of its own: as an unprivileged user's network is made.
    with HostNetwork(["algo-1", "algo-2"], user_namespace=user_namespace) as net:
        assert run_on(net, "algo-2", "hostname") == "algo-2"
        assert host_addr(1) in run_on(net, "algo-2", "ip", "-o", "-4", "addr", "show", "eth0")
        run_on(net, "algo-1", "touch", "/dev/shm/tenter-test-segment")
        assert "tenter-test-segment" in run_on(net, "algo-1", "ls", "/dev/shm")
        assert "tenter-test-segment" not in run_on(net, "algo-2", "ls", "/dev/shm")
    # The host's tmpfs went with its mount namespace, never into this machine's /dev/shm.
    assert not Path("/dev/shm/tenter-test-segment").exists()


@pytest.mark.parametrize("user_namespace", [False, True], ids=["root", "user-namespace"])
def test_a_partition_cuts_a_host_off_until_healed(user_namespace: bool) -> None:
    with HostNetwork(["algo-1", "algo-2"], user_namespace=user_namespace) as net:
        listener = net.listen()
        with listener:
            port = str(listener.getsockname()[1])
            # A host that can reach the switch does within 20 s (TCP resends a lost SYN); one
            # cut off never does: 1 s tells (a partition cannot let a connection through).
            reach = [sys.executable, "-c", CONNECT, "198.18.0.1", port, "20"]
            try_reach = [sys.executable, "-c", CONNECT, "198.18.0.1", port, "1"]
            assert run_on(net, "algo-1", *reach) == "reached"
            net.partition("algo-1")
            assert net.is_partitioned("algo-1")
            assert run_on(net, "algo-1", *try_reach) == "unreachable"
            assert run_on(net, "algo-2", *reach) == "reached"
            net.heal("algo-1")
            assert not net.is_partitioned("algo-1")
            assert run_on(net, "algo-1", *reach) == "reached"


HOLD_AND_DIE = """
import os, sys
sys.path[:0] = sys.argv[1:]
from tenter.launch.launcher.isolation.network import HostNetwork
net = HostNetwork(["algo-1", "algo-2", "algo-3"])
net.start()
print(" ".join(str(ns.pid) for ns in [net.switch, *net.hosts.values()]), flush=True)
sys.stdin.read()
"""


def test_namespaces_and_links_go_when_their_creator_is_killed() -> None:
    before_ns, before_links = namespaces(), links()
    creator = subprocess.Popen(
        [sys.executable, "-c", HOLD_AND_DIE, *sys.path],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert creator.stdout is not None
    try:
        line = OutputReader(creator.stdout).next_line(time.monotonic() + WAIT_S)
        assert line is not None
        holders = [psutil.Process(int(pid)) for pid in line.split()]
        created = namespaces() - before_ns
        assert len(created) == 4
    finally:
        creator.kill()  # what the test does; also when the wait failed
    creator.wait(timeout=WAIT_S)
    _, alive = psutil.wait_procs(holders, timeout=10)
    assert not alive
    # The creator's own: other work on a shared machine may make and end namespaces meanwhile.
    assert namespaces() & created == set()
    assert links() == before_links


def test_nothing_is_created_in_this_machines_namespace() -> None:
    before = links()
    with HostNetwork(["algo-1"]):
        assert links() == before
        assert interfaces_in() == []


def test_more_hosts_than_the_range_holds_are_refused() -> None:
    with pytest.raises(ValueError, match="at most 156"):
        HostNetwork([f"algo-{i}" for i in range(1, 158)])
