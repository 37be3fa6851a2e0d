"""Live output: every rank's lines on the launcher's console, tagged ``[host,rank]<stream>:``
like ``mpirun --tag-output``.

Workers write to their own files, so a slow console never blocks a worker. Agents list each
file they open in ``logs/index.jsonl``; one thread follows that index and every file in it,
including the files of restarted attempts, which appear while the job runs. (torch's
``TailLog`` follows a fixed set of files with a thread each, so it cannot do this.)
"""

from __future__ import annotations

import re
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from tenter.jobdir import layout
from tenter.jobdir.events import Event, EventFollower, EventKind, is_kind
from tenter.jobdir.line_files import read_lines
from tenter.spec.errors import counted

POLL_S = 0.1
"""How often the console tail reads the ranks' log files: a tenth of a second is live to a
reader and costs the ranks little CPU."""
PEER_ERROR = re.compile(
    r"Connection closed by peer|Connection reset by peer|Broken pipe|DistBackendError"
    r"|NCCL communicator was aborted|Socket Timeout|failed to recv|Timed out waiting"
)
"""An error that is the consequence of a peer's failure (a broken connection), not a cause."""
RANK_PREFIX = re.compile(r"^\[rank\d+\]: ", re.MULTILINE)
"""torch's prefix of an uncaught exception's lines in a rank's stderr."""
TRACEBACK_START = "Traceback (most recent call last):"
HELD_LINES = 500
"""A traceback longer than this is shown as it is, not held back to the end."""


@dataclass
class Header:
    """A line shown once, before the first of a set of files' lines."""

    text: str


@dataclass
class _Followed:
    path: Path
    prefix: str
    dst: TextIO
    header: Header
    """Printed before the first line of the attempt's two files (a restarted attempt's)."""
    fold_peer_errors: bool = False
    offset: int = 0
    partial: str = ""
    held: list[str] | None = None
    """A traceback's lines so far, until its exception line says whose failure it is."""

    def shown(self, lines: list[str]) -> list[str]:
        """``lines`` as the console shows them: a traceback that ends in a peer's error (the
        rank was collateral of another's failure, which the summary names) becomes one line
        saying where it is; the log file keeps it whole."""
        out: list[str] = []
        for line in lines:
            bare = RANK_PREFIX.sub("", line)
            if self.held is None:
                if self.fold_peer_errors and bare.startswith(TRACEBACK_START):
                    self.held = [line]
                else:
                    out.append(line)
                continue
            self.held.append(line)
            if bare.startswith(" ") and len(self.held) < HELD_LINES:
                continue  # a frame: the exception line comes last
            peer = PEER_ERROR.search(bare)
            if peer:
                kind = bare.partition(":")[0]
                out.append(
                    f"{kind} ({peer.group(0)}): a peer failed first; traceback in {self.path}"
                )
            else:
                out += self.held
            self.held = None
        return out

    def release(self) -> list[str]:
        """What is held back, as it is (the traceback's end never came)."""
        held, self.held = self.held or [], None
        return held


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
            attempt = int(str(entry["attempt"]))
            # Between a rank's attempts (tail's ``==> FILE <==``), once per attempt.
            header = Header(
                f"==> rank {rank} on {entry['host']}, attempt {attempt + 1} "
                f"({layout.LOGS_DIR}/{Path(str(entry['stem'])).name}.*) <=="
                if attempt
                else ""
            )
            for stream, dst in (("stdout", sys.stdout), ("stderr", sys.stderr)):
                tag = f"[{entry['host']},{rank}]<{stream}>: " if self._tag else ""
                path = Path(f"{entry['stem']}.{stream}")
                self._files.append(
                    _Followed(path, tag, dst, header, fold_peer_errors=stream == "stderr")
                )
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
            lines = f.shown(lines) + (f.release() if final else [])
            if lines and f.header.text:
                f.dst.write(f"{f.header.text}\n")
                f.header.text = ""
            for line in lines:
                f.dst.write(f"{f.prefix}{line}\n")
            if lines:
                f.dst.flush()


class EventFeed:
    """Prints membership changes as the agents report them (``events.jsonl``): one line per
    completed rendezvous round, one per worker-group restart (which every host reports; a
    restart for a joining host, which uses none of the job's, shows as its round)."""

    def __init__(self, job_dir: str) -> None:
        self._events = EventFollower(job_dir)
        self._round: dict[str, dict[str, object]] = {}
        self._hosts = 0
        """The hosts of the last round: how many report each restart of its."""
        self._restarting: dict[tuple[object, object], list[Event]] = {}
        """A restart's reports so far (run, count), until it is said."""
        self._restarts_said: set[tuple[object, object]] = set()
        self.restarted_at = 0.0
        """When an agent last began a group restart (stopping its workers), 0 before any."""
        self.rank_failed = False
        """Whether an agent told of a rank's failure of its own."""

    def print_new(self) -> None:
        for event in self._events.read_new():
            self._show(event)
        for restart, reports in list(self._restarting.items()):
            if time.time() - float(str(reports[0]["time"])) > RESTART_REPORTS_S:
                self._say_restart(restart)  # a host that never reports (lost) holds no line

    def _show(self, event: Event) -> None:
        self.rank_failed |= is_kind(event, EventKind.RANK_FAILED)
        if is_kind(event, EventKind.RESTART):
            self.restarted_at = max(self.restarted_at, float(str(event["time"])))
            restart = (event["run_id"], event["restart_count"])
            if event["used"] and restart not in self._restarts_said:
                self._restarting.setdefault(restart, []).append(event)
                if len(self._restarting[restart]) >= self._hosts:
                    self._say_restart(restart)
            return
        if not is_kind(event, EventKind.RENDEZVOUS):
            return  # the launcher's own events (faults): it said them when they happened
        for restart in list(self._restarting):
            self._say_restart(restart)  # a new round: every report of the restart is in
        self._hosts = int(str(event["hosts"]))
        self._round[str(event["host"])] = event  # a rendezvous event names its host
        hosts = int(str(event["hosts"]))
        same = [e for e in self._round.values() if e["hosts"] == hosts]
        if len(same) == hosts:
            names = ", ".join(sorted((str(e["host"]) for e in same), key=_host_order))
            say(f"rendezvous: {counted(hosts, 'host')} ({names}), world size {event['world_size']}")
            self._round.clear()

    def _say_restart(self, restart: tuple[object, object]) -> None:
        """Name the host whose worker failed first: the others' failures may be its echo
        (their ranks' collectives broke with it), and hosts asked to restart had none."""
        reports = self._restarting.pop(restart)
        self._restarts_said.add(restart)
        failed = [r for r in reports if r.get("failed_at") is not None] or reports
        first = min(failed, key=lambda r: (not r.get("killed"), float(r.get("failed_at") or 0)))
        left = counted(int(str(first["remaining"])), "restart")
        say(f"{first['host']}: a worker failed; restarting the workers ({left} left)")


RESTART_REPORTS_S = 2.0
"""How long a restart's line waits for the reports of the round's other hosts."""


def _host_order(name: str) -> int:
    return int(name.rsplit("-", 1)[-1])


def say(text: str) -> None:
    """A launcher message, on stderr, marked as tenter's own."""
    print("\n".join(f"tenter: {line}" for line in text.splitlines()), file=sys.stderr, flush=True)
