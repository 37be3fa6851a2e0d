"""torch's flight recorder in a tenter job with a hang timeout: on, and dumped on request.

The recorder keeps each process group's last collectives as the process group itself issued
them, including those no Python code calls (DDP's gradient all-reduce from C++, FSDP2, NCCL's
own work), each with its sequence number: what the hang report needs to name the rank that is
behind. :func:`enable` (the watchdog, before the script creates its process group) turns it on
(:data:`BUFFER_ENTRIES` collectives) unless the job's environment already sets it, and points
NCCL's own dump on a timeout at the rank's log stem. A daemon thread waits for the launcher's
request (``control/flight-recorder``, newer than the last dump) and writes the recorder to
``<stem>.fr.pkl``; a thread, since the main thread is then blocked in a collective. Checking
costs a ``stat`` every :data:`POLL_S`. A rank without a recorder (this torch has none, or the
job sets its buffer to 0) serves none, and its progress record says so: the launcher does not
wait for its dump.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from tenter.jobdir.control import FLIGHT_RECORDER_REQUEST, control_dir, flight_recorder_dump
from tenter.jobdir.layout import write_atomic_bytes
from tenter.runtime.compat import (
    FLIGHT_RECORDER_BUFFER_VAR,
    FLIGHT_RECORDER_BUFFER_VARS,
    NCCL_DUMP_FILE_VAR,
    NCCL_DUMP_FILE_VARS,
    NCCL_DUMP_VARS,
    dump_flight_recorder,
    has_flight_recorder_api,
)

BUFFER_ENTRIES = 2000
POLL_S = 0.5


def enable(stem: str, job_dir: str) -> bool:
    """Whether the rank records (and so answers the launcher's request): not where this torch
    has no recorder, nor where the job's environment sets its buffer to 0 entries."""
    # One name each, the one this torch reads: setting both makes every rank warn.
    if not any(name in os.environ for name in FLIGHT_RECORDER_BUFFER_VARS):
        os.environ[FLIGHT_RECORDER_BUFFER_VAR] = str(BUFFER_ENTRIES)
    if not (has_flight_recorder_api() and _buffer_entries() > 0):
        return False
    for name, value in NCCL_DUMP_VARS.items():
        os.environ.setdefault(name, value)
    if not any(name in os.environ for name in NCCL_DUMP_FILE_VARS):
        os.environ[NCCL_DUMP_FILE_VAR] = f"{stem}.nccl-fr-"
    request = control_dir(job_dir) / FLIGHT_RECORDER_REQUEST
    thread = threading.Thread(
        target=_serve, args=(request, flight_recorder_dump(stem)), daemon=True
    )
    thread.name = "tenter-flight-recorder"
    thread.start()
    return True


def _buffer_entries() -> int:
    value = next(os.environ[name] for name in FLIGHT_RECORDER_BUFFER_VARS if name in os.environ)
    try:
        return int(value)
    except ValueError:
        return BUFFER_ENTRIES  # not known to be off: the launcher waits for it, within a bound


def _serve(request: Path, dump: Path) -> None:
    served = 0.0
    stop = threading.Event()
    while not stop.wait(POLL_S):
        try:
            asked = request.stat().st_mtime
        except OSError:
            continue
        if asked <= served:
            continue
        served = asked
        data = dump_flight_recorder()
        if data is not None:
            write_atomic_bytes(dump, data)
