"""How the hang watch reaches the ranks' processes: their stacks' signal (SIGUSR1), their
states (``/proc``) and, for ``on_hang: restart``, their SIGKILL.

:class:`LocalSignals`: every rank runs on this machine (a local or mpi job's launcher, whose
simulated hosts share its pids). :class:`RelayedSignals`: the ranks run on other machines (a
Slurm job's watch runs in its first node's agent), so the signal goes through their agents::

    <job_dir>/control/hang-<SIGNAL>.json   the request: {"id", "ranks": {host: [[rank, pid]]}}
    <host_dir>/hang-states.json            that host's agent's answer: {"id", "states"}

An agent looks for a request only when the control folder changed (the ``stat`` it makes on
every pass anyway: :class:`tenter.launch.agent.entries.ControlRequests`), signals the pids
listed for its own host and answers with their states (:class:`RelayAnswers`).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

from tenter.jobdir.control import control_dir, made_control_dir
from tenter.jobdir.layout import write_atomic
from tenter.launch.diagnosis.hang import RankProgress, process_state

REQUEST_PREFIX = "hang-"
STATES_FILE = "hang-states.json"
UNKNOWN = "unknown"
"""A rank's state before its agent answered."""
ANSWER_S = 10.0
"""How long an agent keeps its answer current: longer than the hang report waits (5 s)."""


class RankSignals(Protocol):
    def send(self, ranks: Sequence[RankProgress], sig: signal.Signals) -> None: ...

    def states(self, ranks: Sequence[RankProgress]) -> dict[int, str]:
        """Each rank's process state (:func:`tenter.launch.diagnosis.hang.process_state`)."""
        ...


def signal_pids(pids: Sequence[int], sig: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


class LocalSignals:
    def send(self, ranks: Sequence[RankProgress], sig: signal.Signals) -> None:
        signal_pids([p.pid for p in ranks], sig)

    def states(self, ranks: Sequence[RankProgress]) -> dict[int, str]:
        return {p.rank: process_state(p.pid) for p in ranks}


def request_path(job_dir: str, sig: signal.Signals) -> Path:
    return control_dir(job_dir) / f"{REQUEST_PREFIX}{sig.name}.json"


class RelayedSignals:
    """Through the agents of ``host_dirs`` (host name -> its directory); a rank's state is
    :data:`UNKNOWN` until its agent answered the last request."""

    def __init__(self, job_dir: str, host_dirs: Mapping[str, str]) -> None:
        self._job_dir, self._host_dirs = job_dir, host_dirs
        self._asked = ""
        """The id of the last request."""

    def send(self, ranks: Sequence[RankProgress], sig: signal.Signals) -> None:
        by_host: dict[str, list[tuple[int, int]]] = {}
        for p in ranks:
            by_host.setdefault(p.host, []).append((p.rank, p.pid))
        self._asked = uuid.uuid4().hex
        made_control_dir(self._job_dir)
        request = {"id": self._asked, "ranks": by_host}
        write_atomic(request_path(self._job_dir, sig), json.dumps(request))

    def states(self, ranks: Sequence[RankProgress]) -> dict[int, str]:
        answers: dict[str, dict[str, str]] = {}
        for host in {p.host for p in ranks}:
            try:
                answer = json.loads((Path(self._host_dirs[host]) / STATES_FILE).read_bytes())
            except (OSError, ValueError, KeyError):
                continue
            if answer["id"] == self._asked:
                answers[host] = answer["states"]
        return {p.rank: answers.get(p.host, {}).get(str(p.rank), UNKNOWN) for p in ranks}


class RelayAnswers:
    """An agent's side of :class:`RelayedSignals`: each request's signal sent once; its
    answer kept current for :data:`ANSWER_S` (a stopped process shows as stopped only once
    the kernel delivered the signal; a rank may end while the report waits)."""

    def __init__(self, job_dir: str, host: str, host_dir: str) -> None:
        self._job_dir, self._host, self._host_dir = job_dir, host, host_dir
        self._answered: dict[str, str] = {}
        """The id of each request file's request this agent answered."""
        self._current: tuple[str, list[tuple[int, int]]] = ("", [])
        """The last request's id and this host's (rank, pid) in it."""
        self._until = 0.0
        self._written: dict[str, str] | None = None

    def answer(self) -> None:
        """Take the requests not taken yet (when the control folder changed)."""
        for path in control_dir(self._job_dir).glob(f"{REQUEST_PREFIX}SIG*.json"):
            try:
                request = json.loads(path.read_bytes())
            except (OSError, ValueError):
                continue  # a request is written whole (atomically); a gone one is done
            if self._answered.get(path.name) == request["id"]:
                continue
            self._answered[path.name] = request["id"]
            mine = [(int(rank), int(pid)) for rank, pid in request["ranks"].get(self._host, [])]
            signal_pids([pid for _, pid in mine], signal.Signals[path.stem[len(REQUEST_PREFIX) :]])
            self._current, self._until = (request["id"], mine), time.monotonic() + ANSWER_S
            self._written = None
            self.refresh()

    def refresh(self) -> None:
        """The last request's answer, rewritten if its states changed (every pass of the
        agent's for :data:`ANSWER_S` after the request; nothing after)."""
        if time.monotonic() >= self._until:
            return
        request_id, mine = self._current
        states = {str(rank): process_state(pid) for rank, pid in mine}
        if states != self._written:
            answer = {"id": request_id, "states": states}
            write_atomic(Path(self._host_dir) / STATES_FILE, json.dumps(answer))
            self._written = states
