"""The rendezvous store a launcher serves to its hosts' agents (and mpirun's ranks)."""

from __future__ import annotations

import socket
from datetime import timedelta
from typing import Any


def listener_on(addr: str) -> socket.socket:
    """A listening socket on ``addr`` (IPv4 or IPv6) and a port the kernel picks: the store
    takes it over (:func:`serve_store`), so no window opens for another process to take it."""
    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    return socket.create_server((addr, 0), family=family, backlog=1024)


def serve_store(host: str, listener: socket.socket) -> Any:
    """The rendezvous store, serving on ``listener``'s socket: the kernel picked the port
    and the store takes the socket over, so no other process can take the port between
    choosing and binding it; the store listens on the socket's address only."""
    import torch.distributed as dist

    from tenter.launch import compat

    return dist.TCPStore(
        host,
        listener.getsockname()[1],
        is_master=True,
        master_listen_fd=listener.detach(),
        wait_for_workers=False,
        timeout=timedelta(seconds=300),
        use_libuv=compat.TCPSTORE_LIBUV_TAKES_LISTEN_FD,
    )


def main(argv: list[str]) -> None:
    """``python -m tenter.launch.shared.store HOST FD``: serve the store on the listening socket
    ``FD`` (inherited) until killed.

    For isolated hosts: the store must run in the switch's network namespace, because
    torch's store also connects to itself as a client, and the launcher's own network does
    not reach the hosts' bridge."""
    import signal

    host, fd = argv
    _store = serve_store(host, socket.socket(fileno=int(fd)))
    print("serving", flush=True)
    while True:  # until the launcher kills this process
        signal.pause()


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
