"""Live output: every rank's lines on the launcher's console, tagged ``[host,rank]<stream>:``
like ``mpirun --tag-output``. Workers write to their own files; torch elastic's ``TailLog``
follows them, so a slow console never blocks a worker."""

from __future__ import annotations

import sys

from torch.distributed.elastic.multiprocessing.tail_log import TailLog

from tenter.launch.plan import Plan


class ConsoleTail:
    def __init__(self, plan: Plan) -> None:
        shown = set(plan.console_ranks) if plan.console_ranks is not None else None
        ranks = [
            (host.name, r)
            for host in plan.hosts
            for r in host.ranks
            if shown is None or r.rank in shown
        ]
        self._tails = []
        for stream, dst in (("stdout", sys.stdout), ("stderr", sys.stderr)):
            files = {r.rank: getattr(r, stream) for _, r in ranks}
            prefixes = {
                r.rank: f"[{name},{r.rank}]<{stream}>: " if plan.tag_output else ""
                for name, r in ranks
            }
            self._tails.append(TailLog(stream, files, dst, prefixes, interval_sec=0.05))

    def start(self) -> ConsoleTail:
        for tail in self._tails:
            tail.start()
        return self

    def stop(self) -> None:
        """Print what is left in the files, then stop following them."""
        for tail in self._tails:
            tail.stop()
        sys.stdout.flush()
        sys.stderr.flush()
