"""Counting the store requests each host's agent makes, in a pack of agents
(:mod:`tenter.rehearsal.pack`): every public request method of torch's ``Store`` is wrapped
(:func:`tenter.rehearsal.compat.wrap_store_requests`) to add one to the calling thread's
host, and its polls apart: the requests its agent makes while it looks at the other hosts
(:class:`~tenter.launch.agent.peer_looks.PeerLooks`: whether another host restarts, each
pass; whether a host waits to join, torch's rendezvous state read once a second) and every
``check`` (a look whether a key is set: the agents' are in loops that wait for one, as for
group rank 0 of the planned round, but the deciding host's one look at the hosts' keys in an
in-round restart). Their count grows with a phase's length, not with what its event asks of
the store. Saved as
``rehearsal/store-<first host>.json`` in the job directory: host index to requests so far, and
to polls so far (:func:`requests_by_host` sums the packs')."""

from __future__ import annotations

import functools
import json
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tenter.jobdir.layout import write_atomic
from tenter.launch.agent.peer_looks import PeerLooks
from tenter.rehearsal import compat
from tenter.rehearsal.commands import FOLDER

POLL = "check"
LOOKS = ("restart_asked", "hosts_waiting")
"""The agent's looks at the other hosts (:class:`PeerLooks`): their requests are polls."""
_counts: Counter[int] = Counter()
_polls: Counter[int] = Counter()
_this = threading.local()
_file: Path | None = None


def this_thread_is(host_index: int) -> None:
    _this.host = host_index


def _counted(method: Callable[..., Any]) -> Callable[..., Any]:
    polls = method.__name__ == POLL

    @functools.wraps(method)
    def counted(*args: Any, **kwargs: Any) -> Any:
        host = getattr(_this, "host", -1)
        _counts[host] += 1
        if polls or getattr(_this, "looking", False):
            _polls[host] += 1
        return method(*args, **kwargs)

    return counted


def _looking(look: Callable[..., bool]) -> Callable[..., bool]:
    @functools.wraps(look)
    def looking(*args: Any, **kwargs: Any) -> bool:
        _this.looking = True
        try:
            return look(*args, **kwargs)
        finally:
            _this.looking = False

    return looking


def install(job_dir: str, first_host: int) -> None:
    global _file
    compat.wrap_store_requests(_counted)
    for name in LOOKS:  # tenter's own class, in this rehearsal's process only
        setattr(PeerLooks, name, _looking(getattr(PeerLooks, name)))
    _file = Path(job_dir) / FOLDER / f"store-{first_host}.json"
    _file.parent.mkdir(exist_ok=True)


def save() -> None:
    if _file is not None:
        requests = {str(k): v for k, v in _counts.items() if k >= 0}
        polls = {str(k): v for k, v in _polls.items() if k >= 0}
        write_atomic(_file, json.dumps({"requests": requests, "polls": polls}))


def saved_since(job_dir: str, packs: int, since: float) -> bool:
    """Whether each of the ``packs`` packs saved its counts since the time ``since``
    (each saves them every half second)."""
    try:
        times = [p.stat().st_mtime for p in (Path(job_dir) / FOLDER).glob("store-*.json")]
    except OSError:  # replaced meanwhile: look again
        return False
    return len(times) >= packs and min(times) >= since


def requests_by_host(job_dir: str) -> tuple[dict[int, int], dict[int, int]]:
    """Every pack's counts so far: host index to store requests, and to its polls among
    them."""
    requests: dict[int, int] = {}
    polls: dict[int, int] = {}
    for path in (Path(job_dir) / FOLDER).glob("store-*.json"):
        try:
            saved = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # a pack replaced it meanwhile: the next look reads it
        requests.update({int(k): v for k, v in saved["requests"].items()})
        polls.update({int(k): v for k, v in saved["polls"].items()})
    return requests, polls
