"""What differs between the torch versions ``tenter.runtime`` runs on: torch's flight
recorder (the last collectives of every process group, as the process group recorded them).

Kept in one place so that dropping an old version means deleting lines here.
"""

from __future__ import annotations

import torch._C._distributed_c10d as c10d
import torch.distributed as dist

FLIGHT_RECORDER_BUFFER_VARS = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")
"""How many collectives the recorder keeps: ``TORCH_FR_BUFFER_SIZE`` since the recorder
covers more than NCCL (torch 2.7; read by torch 2.13's C++), ``TORCH_NCCL_TRACE_BUFFER_SIZE``
before (still read as a fallback in 2.13)."""
NCCL_DUMP_VARS = {"TORCH_NCCL_DUMP_ON_TIMEOUT": "1"}
"""NCCL's watchdog dumps the recorder when a collective times out (torch 2.2 and later)."""
NCCL_DUMP_FILE_VARS = ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
"""The prefix of the files NCCL's watchdog dumps to (one per rank): the new name (torch 2.13
reads it first) and the old one."""


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
