"""What the hang report asks the ranks for, asked at once and awaited together: their stacks
(SIGUSR1, :func:`tenter.launch.diagnosis.hang.ask_for_stacks`) and their flight recorders' dumps
(:func:`tenter.launch.diagnosis.flight_recorder.request_dumps`).

The wait ends as soon as every rank that can answer has: a rank whose process is stopped
(SIGSTOP, a debugger) or gone cannot, nor can a rank without a flight recorder dump one (its
progress record says so). The culprit of a hang is often the stopped rank: waiting out its
stacks and then its dump held every hang report 5 s past its verdict. Every wait is bounded:
the stacks by :data:`tenter.launch.diagnosis.hang.STACKS_WAIT_S` (the report names a rank that did
not answer by then), the dumps by :data:`FLIGHT_RECORDER_WAIT_S` more.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from tenter.launch.diagnosis import flight_recorder, hang
from tenter.launch.diagnosis.rank_signals import RankSignals

FLIGHT_RECORDER_WAIT_S = 2.0
"""How much longer than the stacks the report may wait for the ranks' flight recorders."""
POLL_S = 0.05


@dataclass
class Replies:
    """The ranks' answers: stacks (whole or as far as written), process states (refreshed
    while a rank's answer is awaited) and flight-recorder dumps, by rank."""

    states: dict[int, str]
    stacks: dict[int, str] = field(default_factory=dict)
    dumps: dict[int, dict[str, Any]] = field(default_factory=dict)


def gather(progress: list[hang.RankProgress], job_dir: str, signals: RankSignals) -> Replies:
    """``signals``: how the ranks' processes are reached (on this machine or through their
    agents)."""
    since = flight_recorder.request_dumps(job_dir)
    asked = hang.ask_for_stacks(progress, signals.send)
    replies = Replies(signals.states(progress))
    complete: set[int] = set()
    deadline = time.monotonic() + hang.STACKS_WAIT_S
    while True:
        hang.read_stacks([p for p in asked if p.rank not in complete], replies.stacks, complete)
        recorders = {p.rank: p.stem for p in asked if p.recorder}
        flight_recorder.read_dumps(recorders, since, replies.dumps)
        late = time.monotonic() - deadline
        awaited = [
            p
            for p in asked
            if (p.rank not in complete and late < 0)
            or (p.recorder and p.rank not in replies.dumps and late < FLIGHT_RECORDER_WAIT_S)
        ]
        if not any(hang.can_answer(replies.states[p.rank]) for p in awaited):
            return replies
        time.sleep(POLL_S)
        replies.states.update(signals.states(awaited))
