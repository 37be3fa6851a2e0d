"""The job directory's shared line files, written by several processes at once.

``logs/index.jsonl`` lists every worker log opened (rank, host, attempt, file stem), for the
console and the failure report; ``events.jsonl`` the job's events (:mod:`.events`, which
writes and reads them with this module's line functions);
``metrics/rank-<N>.jsonl`` what rank N reported (``tenter.report``) and
``metrics/steps/rank-<N>.jsonl`` the DDP steps tenter counted on it. Kept free of torch so
that light processes (the mpirun shim) can write them too.
"""

from __future__ import annotations

import atexit
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

from tenter.jobdir.layout import INDEX_FILE

FLUSH_S = 0.5
FLUSH_RECORDS = 4096
"""Write early when this many records wait (a script reporting many thousand times a second)."""


class BufferedLines:
    """A rank's buffered writer of JSON lines (``tenter.report``'s records, the DDP steps
    tenter counts): an append costs about a microsecond; a background thread writes every
    FLUSH_S, and at exit."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = path
        self._records: list[dict[str, object]] = []
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def add(self, record: dict[str, object]) -> None:
        with self._lock:
            self._records.append(record)
            full = len(self._records) >= FLUSH_RECORDS
        if self._thread is None:
            # Started on first use: a script that never reports gets no thread.
            self._thread = threading.Thread(target=self._flush_forever, daemon=True)
            self._thread.name = f"tenter-lines-{os.path.basename(self.path)}"
            self._thread.start()
            atexit.register(self.flush)
        if full:
            self.flush()

    def flush(self) -> None:
        with self._lock:
            records, self._records = self._records, []
        if not records:
            return
        text = "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records)
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        # One O_APPEND write: a reader never sees half of a flush's lines interleaved with
        # another process's (a restarted rank appends to the same file).
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)

    def _flush_forever(self) -> None:
        while True:
            time.sleep(FLUSH_S)
            self.flush()


class JsonlFollower:
    """Reads the complete lines appended to a file since the previous call."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0

    def read_new(self) -> list[dict[str, Any]]:
        try:
            with open(self.path, "rb") as fp:
                fp.seek(self._offset)
                data = fp.read()
        except FileNotFoundError:
            return []
        # A writer may be half-way through its line: leave that for the next call.
        end = data.rfind(b"\n") + 1
        self._offset += end
        return parse_lines(data[:end])


def append_line(path: Path, record: dict[str, Any]) -> None:
    """One JSON line, appended with a single write: an O_APPEND write of one short line is
    never interleaved with another process's."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(record) + "\n").encode())
    finally:
        os.close(fd)


def record_worker_logs(
    logs_dir: Path, stem: str, rank: int, local_rank: int, host: str, attempt: int, world_size: int
) -> None:
    """List a worker's log files (``<stem>.stdout|.stderr|.error.json``) in the index, with
    the world it is a rank of (a rank beyond the newest listing's world is in no round)."""
    append_line(
        logs_dir / INDEX_FILE,
        {
            "stem": stem,
            "rank": rank,
            "local_rank": local_rank,
            "host": host,
            "attempt": attempt,
            "world_size": world_size,
        },
    )


def read_lines(path: Path) -> list[dict[str, Any]]:
    """Every complete line of a line file (none if it is not there yet)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    # A writer may be half-way through its last line: it is not there yet.
    return parse_lines(data[: data.rfind(b"\n") + 1])


def parse_lines(data: bytes) -> list[dict[str, Any]]:
    """The JSON lines in ``data`` (complete lines; blank ones skipped), parsed as one JSON
    array: one parser call for a whole chunk, not one per line, halves a job's history read."""
    lines = [line for line in data.splitlines() if line.strip()]
    if not lines:
        return []
    records: list[dict[str, Any]] = json.loads(b"[" + b",".join(lines) + b"]")
    return records
