"""Live output: every rank's lines on the launcher's console, tagged ``[host,rank]<stream>:``
like ``mpirun --tag-output``.

Workers write to their own files, so a slow console never blocks a worker. Agents list each
file they open in ``logs/index.jsonl``; one thread follows that index and every file in it,
including the files of restarted attempts, which appear while the job runs. (torch's
``TailLog`` follows a fixed set of files with a thread each, so it cannot do this.)
"""

from __future__ import annotations

import json
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from tenter.jobdir import layout
from tenter.jobdir.records import read_lines

POLL_S = 0.1
"""How often the console tail reads the ranks' log files: a tenth of a second is live to a
reader and costs the ranks little CPU."""


@dataclass
class _Followed:
    path: Path
    prefix: str
    dst: TextIO
    offset: int = 0
    partial: str = ""


def read_index(job_dir: str) -> list[dict[str, object]]:
    """The worker log files opened so far, as the agents listed them."""
    return read_lines(layout.logs_dir(job_dir) / layout.INDEX_FILE)


class ConsoleTail:
    """Follows the job directory's rank logs (``ranks`` None: all of them)."""

    def __init__(self, job_dir: str, ranks: list[int] | None, tag: bool) -> None:
        self._job_dir = job_dir
        self._tag = tag
        self._shown = set(ranks) if ranks is not None else None
        self._files: list[_Followed] = []
        self._index_seen = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tenter-console", daemon=True)

    def start(self) -> ConsoleTail:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Print what is left in the files (a last unterminated line too), then stop."""
        self._stop.set()
        self._thread.join()
        self._poll(final=True)
        sys.stdout.flush()
        sys.stderr.flush()

    def _run(self) -> None:
        while not self._stop.wait(POLL_S):
            self._poll(final=False)

    def _add_new_files(self) -> None:
        entries = read_index(self._job_dir)
        for entry in entries[self._index_seen :]:
            rank = int(str(entry["rank"]))
            if self._shown is not None and rank not in self._shown:
                continue
            for stream, dst in (("stdout", sys.stdout), ("stderr", sys.stderr)):
                tag = f"[{entry['host']},{rank}]<{stream}>: " if self._tag else ""
                self._files.append(_Followed(Path(f"{entry['stem']}.{stream}"), tag, dst))
        self._index_seen = len(entries)

    def _poll(self, final: bool) -> None:
        self._add_new_files()
        for f in self._files:
            try:
                with open(f.path, errors="replace") as fp:
                    fp.seek(f.offset)
                    text = fp.read()
                    f.offset = fp.tell()
            except FileNotFoundError:
                continue
            lines = (f.partial + text).split("\n")
            f.partial = lines.pop()
            if final and f.partial:
                lines.append(f.partial)
                f.partial = ""
            for line in lines:
                f.dst.write(f"{f.prefix}{line}\n")
            if lines:
                f.dst.flush()


class EventFeed:
    """Prints membership changes as the agents report them (``events.jsonl``): one line per
    completed rendezvous round, one per worker-group restart."""

    def __init__(self, job_dir: str) -> None:
        self._path = Path(job_dir) / layout.EVENTS_FILE
        self._offset = 0
        self._round: dict[str, dict[str, object]] = {}

    def print_new(self) -> None:
        try:
            with open(self._path) as fp:
                fp.seek(self._offset)
                lines = fp.readlines()
        except FileNotFoundError:
            return
        for line in lines:
            if not line.endswith("\n"):
                break  # an agent is still writing it
            self._offset += len(line.encode())
            self._show(json.loads(line))

    def _show(self, event: dict[str, object]) -> None:
        host = str(event["host"])
        if event["event"] == "restart":
            say(f"{host}: restarting its workers ({event['remaining']} restarts left)")
            return
        if event["event"] != "rendezvous":
            return  # the launcher's own events (faults): it said them when they happened
        self._round[host] = event
        hosts = int(str(event["hosts"]))
        same = [e for e in self._round.values() if e["hosts"] == hosts]
        if len(same) == hosts:
            names = ", ".join(sorted((str(e["host"]) for e in same), key=_host_order))
            say(f"rendezvous: {hosts} hosts ({names}), world size {event['world_size']}")
            self._round.clear()


def _host_order(name: str) -> int:
    return int(name.rsplit("-", 1)[-1])


def say(text: str) -> None:
    """A launcher message, on stderr, marked as tenter's own."""
    print("\n".join(f"tenter: {line}" for line in text.splitlines()), file=sys.stderr, flush=True)
