"""Can every host reach every other on the interface the job uses? (The classic hang: gloo or
NCCL bound to an interface the other hosts cannot reach, or a host cut off.)

Each host listens on the address of the interface gloo picks there (a socket created inside
its network namespace, :func:`~tenter.launch.launcher.isolation.network.socket_in`); every other
host connects to it from its own such address. The kernel completes a TCP handshake on a listening
socket without an ``accept``, so a connection that opens proves the path both ways.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tenter.doctor.result import CheckResult
from tenter.launch.launcher.isolation.network import HostNetwork, socket_in

if TYPE_CHECKING:
    from tenter.doctor.across import HostFacts

NAME = "reachability"
DESCRIPTION = "every host of the job reaches every other on the interface gloo uses"
CONNECT_TIMEOUT_S = 2.0
"""On a healthy bridge a handshake takes microseconds; a cut-off host answers nothing."""
RETRY_S = 0.1
PROBE_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class HostPair:
    """One ordered pair: ``source`` connecting to ``target``."""

    source: str
    target: str
    interface: str
    """The source's interface (its address is the connection's source address)."""
    target_endpoint: str
    """``addr:port`` on the target's interface, or why there is none."""
    error: str = ""
    """Empty when the connection opened."""

    @property
    def ok(self) -> bool:
        return not self.error


@dataclass(frozen=True)
class Reachability:
    hosts: list[str]
    pairs: list[HostPair]

    def pair(self, source: str, target: str) -> HostPair:
        return next(p for p in self.pairs if (p.source, p.target) == (source, target))

    def verdict(self, host: str) -> CheckResult:
        """``host``'s view: whom it reaches, and every broken pair it is part of."""
        broken = [p for p in self.pairs if not p.ok and host in (p.source, p.target)]
        reached = [p.target for p in self.pairs if p.source == host and p.ok]
        if not broken:
            others = ", ".join(reached) or "no other host (a one-host job)"
            interface = next((p.interface for p in self.pairs if p.source == host), "")
            return CheckResult.ok(f"reaches {others}" + (f" on {interface}" if interface else ""))
        lines = [
            f"{p.source} cannot reach {p.target} at {p.target_endpoint} from {p.interface}: "
            f"{p.error}"
            for p in broken
        ]
        return CheckResult.fail(
            "; ".join(lines),
            "heal a partition (`tenter fault JOB heal HOST`); otherwise set GLOO_SOCKET_IFNAME "
            "and NCCL_SOCKET_IFNAME to the interface the hosts share",
        )


def probe_reachability(net: HostNetwork, facts: list[HostFacts]) -> Reachability:
    """Listen on every host's chosen address, connect from every other; every pair's result."""
    listeners: dict[str, socket.socket] = {}
    endpoints: dict[str, str] = {}
    try:
        for f in facts:
            addr = f.chosen_addr
            if addr is None:
                endpoints[f.host] = f"none: {f.chosen or 'no interface'} has no IPv4 address"
                continue
            listeners[f.host] = socket_in(net.enter(f.host), (addr, 0), len(facts) + 1)
            endpoints[f.host] = f"{addr}:{listeners[f.host].getsockname()[1]}"
        probes = {
            f.host: _start_probe(net, f, {h: e for h, e in endpoints.items() if h in listeners})
            for f in facts
        }
        pairs = []
        for f in facts:
            out, err = probes[f.host].communicate(timeout=PROBE_TIMEOUT_S)
            if probes[f.host].returncode:
                raise OSError(f"the reachability probe failed on {f.host}: {err.strip()}")
            errors: dict[str, str] = json.loads(out)
            for other in facts:
                if other.host == f.host:
                    continue
                error = errors.get(other.host, "it has no address to connect to")
                pairs.append(HostPair(f.host, other.host, f.chosen, endpoints[other.host], error))
    finally:
        for listener in listeners.values():
            listener.close()
    return Reachability([f.host for f in facts], pairs)


def _start_probe(
    net: HostNetwork, source: HostFacts, targets: dict[str, str]
) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "tenter.doctor.reach", source.chosen_addr or "", source.host]
    argv.append(json.dumps(targets))
    return subprocess.Popen(
        [*net.enter(source.host), *argv],
        env=os.environ,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def connect(source_addr: str, endpoint: str) -> str:
    """Open a TCP connection to ``endpoint`` from ``source_addr``; "" or why it failed.

    "No route to host" is asked again until the timeout: it is what the kernel answers for a
    while after a link came back (the neighbour entry of an ARP that failed during the cut),
    not a verdict on the path."""
    addr, port = endpoint.rsplit(":", 1)
    deadline = time.monotonic() + CONNECT_TIMEOUT_S
    while True:
        left = deadline - time.monotonic()
        try:
            socket.create_connection(
                (addr, int(port)),
                timeout=max(left, 0.01),
                source_address=(source_addr, 0) if source_addr else None,
            ).close()
        except TimeoutError:
            return f"no answer in {CONNECT_TIMEOUT_S:g} s"
        except OSError as e:
            if e.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH) and left > RETRY_S:
                time.sleep(RETRY_S)
                continue
            return e.strerror or str(e)
        return ""


def main(argv: list[str]) -> int:
    """In the source host: ``SOURCE_ADDR SOURCE_HOST TARGETS_JSON`` -> {target: error}."""
    source_addr, source_host, targets_json = argv
    targets: dict[str, str] = json.loads(targets_json)
    wanted = {host: endpoint for host, endpoint in targets.items() if host != source_host}
    # Concurrently: a cut-off target costs its timeout once, not once per target.
    with ThreadPoolExecutor(max_workers=max(1, len(wanted))) as pool:
        errors = dict(
            zip(wanted, pool.map(lambda e: connect(source_addr, e), wanted.values()), strict=True)
        )
    print(json.dumps(errors))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
