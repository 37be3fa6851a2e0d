"""What differs between the torch versions ``tenter.runtime`` runs on: torch's flight
recorder (the last collectives of every process group, as the process group recorded them),
and the private names torchft's checkpoint transport is mended through.

Kept in one place so that dropping an old version means deleting lines here.
"""

from __future__ import annotations

import io
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


def http_checkpoint_transport(timeout: timedelta) -> Any:
    """torchft's ``HTTPTransport`` as its ``Manager`` builds by default (one request per
    checkpoint), whose loads hand torch writable buffers (see :class:`_WritableReads`)."""
    from torch.distributed._serialization import _streaming_load  # [torch 2.7+]
    from torchft.checkpointing import HTTPTransport  # type: ignore[import-untyped]

    class WritableHTTPTransport(HTTPTransport):  # type: ignore[misc]
        @classmethod
        def _load_from_address(cls, address: str, timeout: timedelta) -> object:  # [torchft 0.2]
            with urllib.request.urlopen(address, timeout=timeout.total_seconds()) as response:
                # weights_only=False as torchft's own: the state holds non-tensor values.
                return _streaming_load(_WritableReads(response), weights_only=False)

    return WritableHTTPTransport(timeout=timeout, num_chunks=0)
