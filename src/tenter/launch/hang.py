"""Hang diagnosis: which ranks wait in which collective, and which one never arrived.

Each rank keeps a progress record (:mod:`tenter.runtime.watchdog`). When no rank has made
progress for the job's ``hang_timeout``, the launcher asks every rank for its Python stacks
(SIGUSR1: faulthandler writes them from C, even while the rank is blocked in C++) and
writes a report like::

    ranks 0-2: waiting in all_reduce #183 (entered 12.0 s ago)
    rank 3: last completed all_reduce #182 12.1 s ago, now at:
        File "train.py", line 40, in <module>
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from dataclasses import dataclass
from itertools import groupby
from pathlib import Path

from tenter.contract.plan import Plan
from tenter.launch.console import read_index

STACKS_WAIT_S = 3.0


@dataclass(frozen=True)
class RankProgress:
    rank: int
    host: str
    stem: str
    pid: int
    time: float
    state: str
    op: str
    seq: int
    step: int


def read_progress(plan: Plan) -> list[RankProgress]:
    """The latest progress record of every rank in each host's current attempt."""
    entries = read_index(plan.job_dir)
    last: dict[object, object] = {e["host"]: e["attempt"] for e in entries}
    out = []
    for e in entries:
        if e["attempt"] != last[e["host"]]:
            continue
        try:
            raw = Path(f"{e['stem']}.watch").read_bytes().split(b"\n", 1)[0]
            data = json.loads(raw)
        except (OSError, ValueError):
            continue
        out.append(
            RankProgress(
                rank=int(str(e["rank"])),
                host=str(e["host"]),
                stem=str(e["stem"]),
                pid=data["pid"],
                time=data["time"],
                state=data["state"],
                op=data["op"],
                seq=data["seq"],
                step=data["step"],
            )
        )
    return sorted(out, key=lambda p: p.rank)


def _ranges(ranks: list[int]) -> str:
    """[0, 1, 2, 5] -> '0-2, 5'."""
    parts = []
    for _, run in groupby(enumerate(ranks), key=lambda t: t[1] - t[0]):
        values = [r for _, r in run]
        parts.append(str(values[0]) if len(values) == 1 else f"{values[0]}-{values[-1]}")
    return ", ".join(parts)


def _innermost_frames(stacks: str, count: int = 3) -> list[str]:
    """The main thread's innermost frames from a faulthandler dump."""
    blocks = stacks.split("\n\n")
    main = next(
        (b for b in blocks if "most recent call first" in b and "Current thread" in b),
        blocks[0] if blocks else "",
    )
    frames = [line.strip() for line in main.splitlines() if line.strip().startswith("File ")]
    # The user's own code says more than the stdlib or torch frames it is blocked in.
    own = [f for f in frames if "/lib/python3" not in f]
    return (own or frames)[:count]


def collect_stacks(progress: list[RankProgress]) -> dict[int, str]:
    """Ask every rank for its stacks and wait (briefly) for them to be written."""
    for p in progress:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p.pid, signal.SIGUSR1)
    deadline = time.monotonic() + STACKS_WAIT_S
    stacks: dict[int, str] = {}
    while time.monotonic() < deadline and len(stacks) < len(progress):
        for p in progress:
            path = Path(f"{p.stem}.stacks")
            if p.rank not in stacks and path.exists() and path.stat().st_size:
                stacks[p.rank] = path.read_text(errors="replace")
        time.sleep(0.05)
    return stacks


def report(progress: list[RankProgress], stacks: dict[int, str], now: float) -> str:
    """Group the ranks by where they are; the ones behind the others are the suspects."""
    lines = []
    waiting = [p for p in progress if p.state == "entered"]
    latest_seq = max((p.seq for p in progress), default=0)
    for (op, seq), group in groupby(
        sorted(waiting, key=lambda p: (p.seq, p.op)), key=lambda p: (p.op, p.seq)
    ):
        members = list(group)
        ago = now - max(p.time for p in members)
        lines.append(
            f"ranks {_ranges([p.rank for p in members])}: waiting in {op} #{seq} "
            f"(entered {ago:.1f} s ago)"
        )
    for p in progress:
        if p.state == "entered" and p.seq == latest_seq:
            continue
        where = (f"last completed {p.op} #{p.seq}" if p.op else "no collective yet") + (
            f", step {p.step}" if p.step else ""
        )
        lines.append(f"rank {p.rank} on {p.host}: {where}, {now - p.time:.1f} s ago; now at:")
        lines += [f"    {frame}" for frame in _innermost_frames(stacks.get(p.rank, ""))]
    lines.append(
        "every rank's stacks: "
        + ", ".join(sorted({f"{Path(p.stem).name}.stacks" for p in progress}))
    )
    return "\n".join(lines)
