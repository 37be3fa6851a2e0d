"""What differs between the torch versions ``tenter.runtime`` runs on: torch's flight
recorder (the last collectives of every process group, as the process group recorded them).

Kept in one place so that dropping an old version means deleting lines here.
"""

from __future__ import annotations

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


def dump_flight_recorder() -> bytes | None:
    """Every process group's recorded collectives (a pickle), or None where this torch has no
    recorder API. ``_dump_fr_trace`` covers gloo and NCCL (torch 2.13; older versions had
    ``_dump_nccl_trace``, NCCL only)."""
    dump = getattr(c10d, "_dump_fr_trace", None)  # [torch 2.8+] gloo and NCCL
    dump = dump or getattr(c10d, "_dump_nccl_trace", None)  # [torch 2.7] NCCL only
    if dump is None:
        return None
    if not (dist.is_available() and dist.is_initialized()):
        return None
    data: bytes = dump()
    return data
