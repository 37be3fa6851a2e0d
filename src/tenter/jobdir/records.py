"""The job directory's shared line files, written by several processes at once.

``logs/index.jsonl`` lists every worker log opened (rank, host, attempt, file stem), for the
console and the failure report; ``events.jsonl`` the rendezvous rounds and restarts. Kept
free of torch so that light processes (the mpirun shim) can write them too.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

INDEX_FILE = "index.jsonl"
EVENTS_FILE = "events.jsonl"


def append_line(path: Path, record: dict[str, Any]) -> None:
    """One JSON line, appended with a single write: an O_APPEND write of one short line is
    never interleaved with another process's."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(record) + "\n").encode())
    finally:
        os.close(fd)


def record_worker_logs(
    logs_dir: Path, stem: str, rank: int, local_rank: int, host: str, attempt: int
) -> None:
    """List a worker's log files (``<stem>.stdout|.stderr|.error.json``) in the index."""
    append_line(
        logs_dir / INDEX_FILE,
        {"stem": stem, "rank": rank, "local_rank": local_rank, "host": host, "attempt": attempt},
    )
