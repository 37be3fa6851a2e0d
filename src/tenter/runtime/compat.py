"""What differs between the torch versions ``tenter.runtime`` runs on: torch's flight
recorder (the last collectives of every process group, as the process group recorded them),
and the private names through which torchft's checkpoint transport is mended and its
servers are bound to the host's address.

Kept in one place so that dropping an old version means deleting lines here.
"""

from __future__ import annotations

import functools
import io
import socket
import urllib.request
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
import torch._C._distributed_c10d as c10d
import torch.distributed as dist

_FR_NAMES = torch.__version__ >= "2.8"
"""torch 2.8 renamed the recorder's variables TORCH_FR_* (it covers more than NCCL) and warns
on every rank, once per process, when one is set under its former name; torch 2.7 reads only
the former (TORCH_NCCL_*). Read from the headers and libraries of the 2.7.1, 2.8.0 and 2.13.0
wheels."""
FLIGHT_RECORDER_BUFFER_VARS = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")
"""How many collectives the recorder keeps, under either name: a job that sets one sets it."""
FLIGHT_RECORDER_BUFFER_VAR = FLIGHT_RECORDER_BUFFER_VARS[0 if _FR_NAMES else 1]
"""The name this torch reads without a warning."""
NCCL_DUMP_VARS = {"TORCH_NCCL_DUMP_ON_TIMEOUT": "1"}
"""NCCL's watchdog dumps the recorder when a collective times out (torch 2.2 and later)."""
NCCL_DUMP_FILE_VARS = ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
"""The prefix of the files NCCL's watchdog dumps to (one per rank), under either name."""
NCCL_DUMP_FILE_VAR = NCCL_DUMP_FILE_VARS[0 if _FR_NAMES else 1]
"""The name this torch reads without a warning."""


def _dump_function() -> Callable[[], bytes] | None:
    """``_dump_fr_trace`` covers gloo and NCCL (torch 2.13; older versions had
    ``_dump_nccl_trace``, NCCL only); None where this torch has no recorder API."""
    dump = getattr(c10d, "_dump_fr_trace", None)  # [torch 2.8+] gloo and NCCL
    return dump or getattr(c10d, "_dump_nccl_trace", None)  # [torch 2.7] NCCL only


def has_flight_recorder_api() -> bool:
    return _dump_function() is not None


def dump_flight_recorder() -> bytes | None:
    """Every process group's recorded collectives (a pickle), or None where this torch has no
    recorder API (:func:`_dump_function`) or no process group."""
    dump = _dump_function()
    if dump is None:
        return None
    if not (dist.is_available() and dist.is_initialized()):
        return None
    data: bytes = dump()
    return data


class _WritableReads(io.BufferedIOBase):
    """An HTTP response whose ``read`` returns a ``bytearray``. torch's ``_streaming_load``
    wraps each storage it reads in ``torch.frombuffer``, which warns once per process of a
    read-only buffer (the ``bytes`` a plain response returns); a writable one is read into
    once, no copy."""

    def __init__(self, response: io.BufferedIOBase) -> None:
        super().__init__()
        self._response = response

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> bytearray:  # type: ignore[override]
        if size is None or size < 0:
            return bytearray(self._response.read())
        buffer = bytearray(size)
        filled = 0
        with memoryview(buffer) as view:
            while filled < size and (got := self._response.readinto(view[filled:])):
                filled += got
        del buffer[filled:]  # the response ended early: _streaming_load then fails as before
        return buffer

    def readline(self, size: int | None = -1) -> bytes:
        return self._response.readline(-1 if size is None else size)


def _url_host(host: str) -> str:
    """``host`` as a URL (or a Rust socket address) writes it: an IPv6 address in brackets."""
    return f"[{host}]" if ":" in host else host


def bind_manager_server(host: str) -> None:
    """The ManagerServer that torchft's ``Manager`` starts on a group's rank 0 listens on
    ``host`` (from now on, in this process), not on every interface."""
    import torchft.manager  # type: ignore[import-untyped]

    server = torchft.manager.ManagerServer
    original = getattr(server, "__wrapped__", server)  # torchft's own, if bound before

    @functools.wraps(original)
    def on_host(*, bind: str, **options: Any) -> Any:
        return original(bind=f"{_url_host(host)}:{bind.rpartition(':')[2]}", **options)

    torchft.manager.ManagerServer = on_host  # [torchft 0.2] Manager binds f"[::]:{port}"


def _http_server_on(host: str, base: type) -> type:
    """``base`` (torchft's HTTP server class) listening on ``host``, whatever it is given."""
    family = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)[0][0]

    class HostServer(base):  # type: ignore[misc]
        address_family = family

        def __init__(self, address: tuple[str, int], handler: Any) -> None:
            super().__init__((host, address[1]), handler)

    return HostServer


def http_checkpoint_transport(timeout: timedelta, host: str | None) -> Any:
    """torchft's ``HTTPTransport`` as its ``Manager`` builds by default (one request per
    checkpoint), whose loads hand torch writable buffers (see :class:`_WritableReads`), and
    which serves on ``host`` (this host's address; None: every interface, as torchft's)."""
    from torch.distributed._serialization import _streaming_load  # [torch 2.7+]
    from torchft.checkpointing import HTTPTransport, http_transport  # type: ignore[import-untyped]

    class WritableHTTPTransport(HTTPTransport):  # type: ignore[misc]
        def __init__(self) -> None:
            if host is None:
                super().__init__(timeout=timeout, num_chunks=0)
                return
            # The server class torchft's __init__ binds to ("", 0), swapped for this call only:
            # another HTTPTransport (whose address names the hostname) keeps torchft's.
            everywhere = http_transport._IPv6HTTPServer  # [torchft 0.2]
            http_transport._IPv6HTTPServer = _http_server_on(host, everywhere)
            try:
                super().__init__(timeout=timeout, num_chunks=0)
            finally:
                http_transport._IPv6HTTPServer = everywhere

        def address(self) -> str:  # [torchft 0.2] names socket.gethostname(), any interface
            if host is None:
                return str(super().address())
            port = self._server.socket.getsockname()[1]  # [torchft 0.2]
            return f"http://{_url_host(host)}:{port}/checkpoint/"

        @classmethod
        def _load_from_address(cls, address: str, timeout: timedelta) -> object:  # [torchft 0.2]
            with urllib.request.urlopen(address, timeout=timeout.total_seconds()) as response:
                # weights_only=False as torchft's own: the state holds non-tensor values.
                return _streaming_load(_WritableReads(response), weights_only=False)

    return WritableHTTPTransport()
