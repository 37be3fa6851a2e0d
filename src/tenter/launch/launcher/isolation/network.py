"""A private network of hosts on this machine, held by processes.

::

    with HostNetwork(["algo-1", "algo-2"]) as net:
        subprocess.run([*net.enter("algo-2"), "hostname"])     # -> algo-2
        net.partition("algo-2"); net.heal("algo-2")

Every namespace is held by one small process (``sleep infinity``) started with
``PR_SET_PDEATHSIG``: when the thread that created the network dies, however it dies, the
holders die, the kernel frees their namespaces, and with them every link and the bridge.
Nothing is created in the caller's own network namespace and nothing is named in the file
system (no ``ip netns add``), so there is nothing to leak and no name to clash with another
job: two jobs can use the same addresses at the same time.

Layout: a *switch* namespace holds the bridge (``br0``, :data:`SWITCH_ADDR`, where the
launcher's servers listen: :meth:`HostNetwork.listen`); each host namespace has its own
hostname, its own ``/dev/shm`` (a tmpfs in its own mount namespace) and one interface,
:data:`HOST_NIC`, a veth whose other end is a port of the bridge. A partition takes that port
down: the host's packets go nowhere, as when a cable or a top-of-rack switch fails.

Written on ``unshare``/``nsenter``/``ip`` (util-linux, iproute2) rather than on a library:
pyroute2 would add a dependency for the dozen commands this needs.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field

from tenter.contract.isolation import HOST_NIC, MAX_HOSTS, SUBNET, SWITCH_ADDR, host_addr
from tenter.launch.launcher.isolation.namespaces import Namespaces, hold, nsenter_argv

BRIDGE = "br0"
HEAL_WAIT_S = 30.0
"""How long :meth:`HostNetwork.heal` waits for the healed link to forward (it takes at most
about a second on an idle machine)."""
RUN_TIMEOUT_S = 60.0
"""The bound on one ``ip``/``nsenter`` command (each takes milliseconds)."""
__all__ = [
    "BRIDGE",
    "HOST_NIC",
    "MAX_HOSTS",
    "SUBNET",
    "SWITCH_ADDR",
    "HostNetwork",
    "Namespaces",
    "host_addr",
    "interfaces_in",
]


def _port_name(index: int) -> str:
    return f"port{index}"


@dataclass
class HostNetwork:
    """Hosts named ``hostnames`` (in order: host ``i`` gets :func:`host_addr` ``(i)``) on one
    bridge. ``user_namespace``: create the namespaces inside a user namespace of their own,
    for a caller without root (needs unprivileged user namespaces). ``owner``: this process
    created the network and :meth:`close` ends it; a network re-opened from its record
    (:func:`tenter.launch.launcher.isolation.record.attach`) can be entered, partitioned and healed,
    and its :meth:`close` only lets go of it."""

    hostnames: list[str]
    user_namespace: bool = False
    switch: Namespaces | None = None
    hosts: dict[str, Namespaces] = field(default_factory=dict)
    owner: bool = True
    etc: dict[str, str] = field(default_factory=dict)
    """Files each host sees in place of this machine's: path in ``/etc`` -> the file
    (bind-mounted in the host's mount namespace): its ``/etc/hosts``..."""
    opt_ml: dict[str, str] = field(default_factory=dict)
    """Host name -> the folder it sees at ``/opt/ml`` (SageMaker's container path), mounted
    in its own mount namespace only; a host not named here sees this machine's ``/opt``."""

    def __post_init__(self) -> None:
        if len(self.hostnames) > MAX_HOSTS:
            raise ValueError(f"{len(self.hostnames)} hosts: at most {MAX_HOSTS} fit")

    # ---- life cycle ----

    def __enter__(self) -> HostNetwork:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        try:
            self.switch = self._hold("switch", unshare=self._unshare_flags(switch=True))
            self._in_switch("ip", "link", "add", BRIDGE, "type", "bridge")
            self._in_switch("ip", "addr", "add", f"{SWITCH_ADDR}/{SUBNET.prefixlen}", "dev", BRIDGE)
            self._in_switch("ip", "link", "set", BRIDGE, "up")
            self._in_switch("ip", "link", "set", "lo", "up")
            for index, name in enumerate(self.hostnames):
                self.add_host(index, name)
        except BaseException:
            self.close()
            raise

    def add_host(self, index: int, name: str) -> None:
        """Start host ``name`` at address ``host_addr(index)`` and plug it into the bridge."""
        assert self.switch is not None
        if name not in self.hostnames:  # a host that joins a running job
            self.hostnames.append(name)
        # Created from inside the switch's user namespace (if any), so that the switch and
        # every host share one owner and the veth can join them.
        host = self._hold(name, unshare=self._unshare_flags(switch=False), hostname=name)
        self.hosts[name] = host
        port = _port_name(index)
        self._in_switch(
            "ip",
            "link",
            "add",
            port,
            "type",
            "veth",
            "peer",
            "name",
            HOST_NIC,
            "netns",
            str(host.pid),
        )
        self._in_switch("ip", "link", "set", port, "master", BRIDGE, "up")
        self._in_host(
            name, "ip", "addr", "add", f"{host_addr(index)}/{SUBNET.prefixlen}", "dev", HOST_NIC
        )
        self._in_host(name, "ip", "link", "set", HOST_NIC, "up")
        self._in_host(name, "ip", "link", "set", "lo", "up")

    def close(self) -> None:
        """Stop the holders; the kernel frees the namespaces once their last process is gone."""
        holders = [*self.hosts.values(), *([self.switch] if self.switch else [])]
        for ns in holders:
            if self.owner and ns.proc is not None:
                if ns.proc.poll() is None:
                    ns.proc.kill()
                ns.proc.wait()
        self.hosts.clear()
        self.switch = None

    # ---- using it ----

    def enter(self, host: str, cwd: str | None = None) -> list[str]:
        """The argv prefix that runs a command on ``host``: its network, hostname and
        ``/dev/shm``, in ``cwd`` (joining a mount namespace resets the working directory)."""
        return self._nsenter(self.hosts[host], mount=True, cwd=cwd)

    def enter_switch(self, cwd: str | None = None) -> list[str]:
        """The argv prefix that runs a command on the switch's network (a login node)."""
        assert self.switch is not None
        return self._nsenter(self.switch, mount=False, cwd=cwd)

    def partition(self, host: str) -> None:
        """Cut ``host`` off the network (its bridge port down)."""
        self._in_switch("ip", "link", "set", self._port_of(host), "down")

    def heal(self, host: str) -> None:
        """Plug ``host`` back in; returns once its packets cross the bridge again. The kernel
        brings links up asynchronously (its link events are batched up to a second apart,
        later on a busy machine): a connection tried at once could still be dropped."""
        self._in_switch("ip", "link", "set", self._port_of(host), "up")
        deadline = time.monotonic() + HEAL_WAIT_S
        while not self._forwarding(host):
            if time.monotonic() > deadline:
                raise OSError(f"{host}: its link still down {HEAL_WAIT_S:.0f} s after the heal")
            time.sleep(0.05)

    def drop_connections_to(self, host: str) -> None:
        """Close every TCP connection the other hosts have with ``host`` (``ss -K``, the
        kernel's socket destroy). For a host the job has given up after a partition: what
        waits on it, such as a collective blocked until its timeout, fails at once, as when
        the peer's machine is known to be dead. OSError where the kernel cannot (built
        without ``CONFIG_INET_DIAG_DESTROY``)."""
        addr = host_addr(self.hostnames.index(host))
        for other in self.hosts:
            if other != host:
                self._in_host(other, "ss", "-K", "dst", addr)

    def is_partitioned(self, host: str) -> bool:
        out = self._in_switch("ip", "-o", "link", "show", self._port_of(host))
        flags = out.partition("<")[2].partition(">")[0].split(",")
        return "UP" not in flags

    def listen(self, port: int = 0, backlog: int = 1024) -> socket.socket:
        """A listening TCP socket on :data:`SWITCH_ADDR`, in the switch's network: every host
        reaches it over the bridge."""
        assert self.switch is not None
        return socket_in(self.enter_switch(), (SWITCH_ADDR, port), backlog)

    # ---- internals ----

    def _port_of(self, host: str) -> str:
        return _port_name(self.hostnames.index(host))

    def _forwarding(self, host: str) -> bool:
        """Both ends of ``host``'s cable up, and its bridge port forwarding."""
        port = self._in_switch("ip", "-d", "-o", "link", "show", self._port_of(host))
        nic = self._in_host(host, "ip", "-o", "link", "show", HOST_NIC)
        return (
            " state UP " in port
            and "bridge_slave state forwarding" in port
            and (" state UP " in nic)
        )

    def _unshare_flags(self, switch: bool) -> list[str]:
        flags = ["--net", "--uts"]
        if not switch:
            flags += ["--mount", "--propagation", "private"]
        if self.user_namespace and switch:
            flags = ["--user", "--map-root-user", *flags]
        return flags

    def _hold(self, name: str, unshare: list[str], hostname: str | None = None) -> Namespaces:
        # Hosts live in the switch's user namespace, where this user is root.
        within = self.switch.pid if self.user_namespace and self.switch is not None else None
        opt_ml = self.opt_ml.get(name) if "--mount" in unshare else None
        return hold(name, unshare, hostname or name, self.etc, opt_ml, within)

    def _nsenter(self, ns: Namespaces, mount: bool, cwd: str | None) -> list[str]:
        return nsenter_argv(ns, self.user_namespace, mount, cwd)

    def _in_switch(self, *argv: str) -> str:
        return _run([*self.enter_switch(), *argv])

    def _in_host(self, host: str, *argv: str) -> str:
        return _run([*self.enter(host), *argv])


def _run(argv: list[str]) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=RUN_TIMEOUT_S)
    if done.returncode:
        raise OSError(f"{' '.join(argv)}: {done.stderr.strip() or f'exit {done.returncode}'}")
    return done.stdout


_MAKE_LISTENER = """
import socket, sys
channel = socket.socket(fileno=int(sys.argv[1]))
listener = socket.create_server((sys.argv[2], int(sys.argv[3])), backlog=int(sys.argv[4]))
socket.send_fds(channel, [b"fd"], [listener.fileno()])
"""


def socket_in(enter: list[str], addr: tuple[str, int], backlog: int) -> socket.socket:
    """A listening socket created in another network namespace (``enter``: the argv prefix
    that runs a command there).

    A socket stays in the namespace it was created in. A child in that namespace creates it
    and hands it over a Unix socket (SCM_RIGHTS): unlike ``setns`` in a thread of this
    process, this also works where the namespace belongs to a user namespace of its own."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with ours, theirs:
        argv = [*enter, sys.executable, "-c", _MAKE_LISTENER, str(theirs.fileno())]
        argv += [addr[0], str(addr[1]), str(backlog)]
        done = subprocess.run(argv, pass_fds=[theirs.fileno()], capture_output=True, text=True)
        if done.returncode:
            raise OSError(f"cannot listen on {addr[0]}:{addr[1]}: {done.stderr.strip()}")
        _, fds, _, _ = socket.recv_fds(ours, 16, 1)
    return socket.socket(fileno=fds[0])


def interfaces_in(subnet: ipaddress.IPv4Network = SUBNET) -> list[str]:
    """Interfaces of this network namespace with an address in ``subnet``."""
    out = _run(["ip", "-o", "-4", "addr", "show"])
    found = []
    for line in out.splitlines():
        parts = line.split()
        with contextlib.suppress(ValueError, IndexError):
            if ipaddress.ip_interface(parts[3]).network.overlaps(subnet):
                found.append(parts[1])
    return found
