"""A host's summary of its ranks (``ranks.json`` in the host directory), written by its agent
and read by the launcher: the newest progress its current ranks recorded, so that the
launcher's hang watch reads one small file a host, and only a changed one, instead of every
rank's progress record (a launcher on Kubernetes cannot even reach those).

The agent folds its ranks' progress records (:mod:`tenter.runtime.watchdog`: ``time`` and
``state`` of the first line) into a :class:`RanksSummary`; the launcher takes the newest over
its hosts (:meth:`RanksSummary.newest`), which is what the hang verdict needs."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from tenter.jobdir.layout import write_atomic

RANKS_FILE = "ranks.json"
STARTED, EXITING = "started", "exiting"
"""A rank's state before its first progress, and once it leaves (tenter.runtime.watchdog)."""


@dataclass(frozen=True)
class RanksSummary:
    moved: float = 0.0
    """The newest record of a rank past its start and not leaving: its last collective or
    step (wall clock; 0 for none)."""
    current: float = 0.0
    """The newest record of a rank not leaving, started or moved (0 for none)."""

    @classmethod
    def of(cls, records: Iterable[tuple[float, str]]) -> RanksSummary:
        """The summary of ranks' records, each (time, state)."""
        moved = current = 0.0
        for time, state in records:
            if state == EXITING:
                continue  # a slow teardown is no hang, nor progress
            current = max(current, time)
            if state != STARTED:
                moved = max(moved, time)
        return cls(moved, current)

    @staticmethod
    def newest(summaries: Iterable[RanksSummary]) -> RanksSummary:
        """The summary of every rank of ``summaries``'s hosts."""
        moved = current = 0.0
        for s in summaries:
            moved, current = max(moved, s.moved), max(current, s.current)
        return RanksSummary(moved, current)


def ranks_path(host_dir: str | os.PathLike[str]) -> Path:
    return Path(host_dir) / RANKS_FILE


def write_summary(host_dir: str | os.PathLike[str], summary: RanksSummary) -> None:
    write_atomic(ranks_path(host_dir), json.dumps(asdict(summary)))


class SummaryReader:
    """The hosts' summaries, each file read again only once it changed (one ``stat`` a host
    a look)."""

    def __init__(self) -> None:
        self._seen: dict[Path, tuple[tuple[int, int], RanksSummary]] = {}

    def read(self, host_dirs: Iterable[str]) -> list[RanksSummary]:
        out = []
        for host_dir in host_dirs:
            path = ranks_path(host_dir)
            try:
                st = os.stat(path)
            except FileNotFoundError:
                continue
            key = (st.st_ino, st.st_mtime_ns)
            seen = self._seen.get(path)
            if seen is None or seen[0] != key:
                try:
                    seen = (key, RanksSummary(**json.loads(path.read_bytes())))
                except (OSError, ValueError, TypeError):
                    continue
                self._seen[path] = seen
            out.append(seen[1])
        return out
