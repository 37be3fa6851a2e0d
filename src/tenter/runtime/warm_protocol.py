"""The messages between a host's agent and its warm template, on their ``SOCK_SEQPACKET``
socket (one message a packet): the agent's requests (:data:`FORK`, which carries the read end
of the spare's handoff pipe, and :data:`PRELOAD`) and the template's reports (:class:`Forked`,
:class:`Exited`). The template's side is :mod:`tenter.runtime.warm`, the agent's
:mod:`tenter.launch.agent.template`; both speak through this module only."""

from __future__ import annotations

from dataclasses import dataclass

FORK = b"fork"
"""Fork a spare (the message carries the read end of its handoff pipe)."""
PRELOAD = b"preload"
"""Import the preload modules, for the spares forked from then on."""
MAX_MESSAGE = 64
"""The longest message either side sends (``exit PID CODE``)."""


@dataclass(frozen=True)
class Forked:
    """The template forked the spare asked for first among those not yet forked."""

    pid: int


@dataclass(frozen=True)
class Exited:
    """A spare ended: its status as ``subprocess`` gives it (-N: killed by signal N)."""

    pid: int
    code: int


def encode(report: Forked | Exited) -> bytes:
    if isinstance(report, Forked):
        return b"pid %d" % report.pid
    return b"exit %d %d" % (report.pid, report.code)


def decode(message: bytes) -> Forked | Exited:
    kind, *numbers = message.split()
    if kind == b"pid":
        return Forked(int(numbers[0]))
    if kind == b"exit":
        pid, code = (int(n) for n in numbers)
        return Exited(pid, code)
    raise ValueError(f"not a warm template's report: {message!r}")
