"""Hang diagnosis: which ranks wait in which collective, and which one never arrived.

Each rank keeps a progress record (:mod:`tenter.runtime.watchdog`). When no rank has made
progress for the job's ``hang_timeout``, the launcher asks every rank for its Python stacks
(SIGUSR1: faulthandler writes them from C, even while the rank is blocked in C++) and
writes a report like::

    ranks 0-2: waiting in all_reduce #183 (entered 12.0 s ago)
    rank 3 on algo-2: last completed all_reduce #182, 12.1 s ago; now at:
        File "train.py", line 40, in <module>
    suspect: rank 3 on algo-2 (pid 4242, sleeping): behind the others: all_reduce #182 ...

A suspect is a rank that is behind the others (in collectives or in DDP steps), whose process
is stopped, or which did not answer the stack request.

The hang clock starts at a rank's first progress (a collective or a step): start-up (importing
torch, loading data) is timed by the longer :func:`startup_timeout` instead, at launch and after
every group restart (from the moment an agent began it).
"""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from dataclasses import dataclass
from itertools import groupby
from pathlib import Path

import psutil

from tenter.contract.plan import Plan
from tenter.jobdir import layout
from tenter.jobdir.control import lost_hosts
from tenter.jobdir.host_ranks import EXITING, RanksSummary
from tenter.launch.shared.console import read_index

STACKS_WAIT_S = 3.0
STARTUP_MIN_S = 300.0


def startup_timeout(hang_timeout: float) -> float:
    """How long ranks may take from their start to their first collective or step before
    the job counts as hung: start-up (imports, data loading, a checkpoint load) is slower
    than a step and no sign of a hang."""
    return max(STARTUP_MIN_S, 10 * hang_timeout)


def hang_verdict(
    progress: list[RankProgress], now: float, hang_timeout: float, restarted_at: float = 0.0
) -> str | None:
    """:func:`summary_verdict` of the ranks' records."""
    summary = RanksSummary.of((p.time, p.state) for p in progress)
    return summary_verdict(summary, now, hang_timeout, restarted_at)


def summary_verdict(
    ranks: RanksSummary, now: float, hang_timeout: float, restarted_at: float = 0.0
) -> str | None:
    """Why the job counts as hung, or None. Once a rank made progress, no progress on any rank
    for ``hang_timeout``; before that, no rank's first progress within the start-up timeout
    of the ranks' start (their records' creation, so a restarted attempt starts afresh).

    ``restarted_at`` is when an agent last began a group restart: the records older than it
    are the stopped attempt's (a host not yet restarted still shows them), and from then on
    the ranks' start-up is timed as at launch, however long the restart takes."""
    if ranks.moved and ranks.moved >= restarted_at:
        if now - ranks.moved >= hang_timeout:
            return f"no rank made progress for {hang_timeout} s"
        return None
    started = max(ranks.current if ranks.current >= restarted_at else 0.0, restarted_at)
    limit = startup_timeout(hang_timeout)
    if started and now - started >= limit:
        return f"no rank reached its first collective or step within {limit:.0f} s of its start"
    return None


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
    recorder: bool = False
    """Whether it has a flight recorder to dump (:mod:`tenter.runtime.flight_recorder`)."""


def current_entries(entries: list[dict[str, object]], lost: set[str]) -> list[dict[str, object]]:
    """The log index's entries of the ranks in the current round: each rank's newest listing
    (a host's restarted attempt, or the host that took the rank over in a new round), less
    those of hosts declared lost and of ranks beyond the newest listing's world size (a host
    a smaller round went on without)."""
    newest = {int(str(e["rank"])): e for e in entries}
    world = entries[-1].get("world_size") if entries else None
    return [
        e
        for r, e in sorted(newest.items())
        if e["host"] not in lost and (world is None or r < int(str(world)))
    ]


def read_progress(plan: Plan) -> list[RankProgress]:
    """The latest progress record of every rank in the current round (:func:`current_entries`)."""
    out = []
    for e in current_entries(read_index(plan.job_dir), lost_hosts(plan.job_dir)):
        try:
            raw = Path(layout.watch_file(str(e["stem"]))).read_bytes().split(b"\n", 1)[0]
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
                recorder=bool(data.get("recorder")),
            )
        )
    return out


def _ranges(ranks: list[int]) -> str:
    """[0, 1, 2, 5] -> '0-2, 5'."""
    parts = []
    for _, run in groupby(enumerate(ranks), key=lambda t: t[1] - t[0]):
        values = [r for _, r in run]
        parts.append(str(values[0]) if len(values) == 1 else f"{values[0]}-{values[-1]}")
    return ", ".join(parts)


OUTERMOST_FRAME = "in _run_module_as_main"
"""The last line of a worker's main-thread stack: every worker runs ``python -m`` (tenter's
bootstrap, fresh or warm). faulthandler writes the main thread, the oldest, last."""


def _main_thread(stacks: str) -> str:
    """The main thread's block of a faulthandler dump: the one that ends in the interpreter's
    outermost frame (the thread that took the signal, "Current thread", is usually the main
    one, but the kernel may hand a process's signal to any of its threads); else the current
    thread's, else the first."""
    blocks = [b for b in stacks.split("\n\n") if "most recent call first" in b]
    for pick in (lambda b: b.rstrip().endswith(OUTERMOST_FRAME), lambda b: "Current thread" in b):
        found = next((b for b in blocks if pick(b)), None)
        if found is not None:
            return found
    return blocks[0] if blocks else ""


def is_complete(stacks: str) -> bool:
    """Whether a dump has been written to the end of its main thread: faulthandler writes it
    in pieces from the rank's signal handler, so a reader can find half of it."""
    return _main_thread(stacks).rstrip().endswith(OUTERMOST_FRAME)


def _innermost_frames(stacks: str, count: int = 3) -> list[str]:
    """The main thread's innermost frames from a faulthandler dump."""
    frames = [
        line.strip()
        for line in _main_thread(stacks).splitlines()
        if line.strip().startswith("File ")
    ]
    # The user's own code says more than the stdlib, torch or import-machinery frames it is
    # blocked in.
    own = [f for f in frames if "/lib/python3" not in f and not f.startswith('File "<frozen')]
    return (own or frames)[:count]


def ask_for_stacks(
    progress: list[RankProgress], send: Callable[[list[RankProgress], signal.Signals], None]
) -> list[RankProgress]:
    """SIGUSR1 (by ``send``: :mod:`tenter.launch.diagnosis.rank_signals`) to every rank with a
    stack dump left to answer (not one exiting); those asked."""
    asked = [p for p in progress if p.state != EXITING]
    send(asked, signal.SIGUSR1)
    return asked


def read_stacks(ranks: list[RankProgress], stacks: dict[int, str], complete: set[int]) -> None:
    """One pass over the ranks' stacks files: what each wrote into ``stacks``, and the ranks
    that have written theirs whole into ``complete``."""
    for p in ranks:
        path = Path(layout.stacks_file(p.stem))
        if p.rank not in complete and path.exists() and path.stat().st_size:
            stacks[p.rank] = path.read_text(errors="replace")
            if is_complete(stacks[p.rank]):
                complete.add(p.rank)


def process_state(pid: int) -> str:
    """``running``, ``sleeping``, ``stopped``, ``disk-sleep``..., or ``gone``."""
    try:
        return str(psutil.Process(pid).status())
    except psutil.Error:
        return "gone"


STOPPED = (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP)
"""The states of a process that cannot run at all (SIGSTOP or a debugger)."""


def can_answer(state: str) -> bool:
    """Whether a process in ``state`` (:func:`process_state`) can still answer a request."""
    return state not in (*STOPPED, "gone")


@dataclass(frozen=True)
class _Front:
    """Where the furthest ranks are, reckoned once for a report (not once per rank: a
    report of N ranks stays O(N))."""

    seq: int
    seq_ranks: str
    step: int
    step_ranks: str

    @staticmethod
    def of(progress: list[RankProgress]) -> _Front:
        seq = max((q.seq for q in progress), default=0)
        step = max((q.step for q in progress), default=0)
        return _Front(
            seq,
            _ranges([q.rank for q in progress if q.seq == seq]),
            step,
            _ranges([q.rank for q in progress if q.step == step]),
        )


def _suspicions(p: RankProgress, front: _Front, state: str, answered: bool) -> list[str]:
    """Why rank ``p`` may be what the others wait for."""
    why: list[str] = []
    if p.state == EXITING:
        return why
    if state in STOPPED:
        why.append("its process is stopped (SIGSTOP or a debugger): it cannot run at all")
    elif not answered:
        why.append(f"it did not answer the stack request within {STACKS_WAIT_S:.0f} s")
    if p.seq < front.seq:
        why.append(
            f"behind: {p.op or 'no collective'} #{p.seq}, ranks {front.seq_ranks} at #{front.seq}"
        )
    if p.step < front.step:
        why.append(f"behind: step {p.step}, ranks {front.step_ranks} at step {front.step}")
    return why


def report(
    progress: list[RankProgress], stacks: dict[int, str], now: float, states: dict[int, str]
) -> str:
    """Group the ranks by where they are; name the suspects (see the module docstring)."""
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
    suspects = 0
    front = _Front.of(progress)
    for p in progress:
        state = states.get(p.rank, "unknown")
        why = _suspicions(p, front, state, p.rank in stacks)
        if why:
            suspects += 1
            lines.append(
                f"suspect: rank {p.rank} on {p.host} (pid {p.pid}, {state}): " + "; ".join(why)
            )
    if not suspects:
        lines.append("no suspect: every rank answered and all are at the same collective and step")
    # One line whatever the ranks: a glob, not every file's name (8,192 names at scale).
    dirs = sorted({str(Path(layout.stacks_file(p.stem)).parent) for p in progress})
    lines.append(f"every rank's stacks: {', '.join(dirs)}/*.stacks ({len(progress)} ranks)")
    return "\n".join(lines)
