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
    """An agent's side of :class:`RelayedSignals`: each request answered once."""

    def __init__(self, job_dir: str, host: str, host_dir: str) -> None:
        self._job_dir, self._host, self._host_dir = job_dir, host, host_dir
        self._answered: dict[str, str] = {}
        """The id of each request file's request this agent answered."""

    def answer(self) -> None:
        for path in control_dir(self._job_dir).glob(f"{REQUEST_PREFIX}SIG*.json"):
            try:
                request = json.loads(path.read_bytes())
            except (OSError, ValueError):
                continue  # a request is written whole (atomically); a gone one is done
            if self._answered.get(path.name) == request["id"]:
                continue
            self._answered[path.name] = request["id"]
            mine = request["ranks"].get(self._host, [])
            signal_pids([pid for _, pid in mine], signal.Signals[path.stem[len(REQUEST_PREFIX) :]])
            states = {str(rank): process_state(pid) for rank, pid in mine}
            answer = {"id": request["id"], "states": states}
            write_atomic(Path(self._host_dir) / STATES_FILE, json.dumps(answer))
