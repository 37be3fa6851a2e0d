"""The job's events: one module writes and reads ``events.jsonl`` (issue 40)."""

from __future__ import annotations

import re
from pathlib import Path

import tenter
from tenter.jobdir import layout
from tenter.jobdir.events import (
    EventFollower,
    EventKind,
    hosts_in_rendezvous,
    is_kind,
    read_events,
    record_event,
    workers_store_ports,
)

SRC = Path(tenter.__file__).parent
OWNERS = {SRC / "jobdir" / "events.py", SRC / "jobdir" / "layout.py"}
"""The events' module, and the module that names every file of the job directory."""


def test_only_the_events_module_names_the_events_file() -> None:
    pattern = re.compile(r"\bEVENTS_FILE\b|[\"']events\.jsonl[\"']")
    elsewhere = [
        f"{path.relative_to(SRC)}:{number}"
        for path in sorted(SRC.rglob("*.py"))
        if path not in OWNERS
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert elsewhere == [], "write and read events.jsonl through tenter.jobdir.events"


def test_an_event_is_read_back_with_its_kind_fields_and_time(tmp_path: Path) -> None:
    record_event(tmp_path, EventKind.WORKERS_STORE, host="algo-1", attempt=0, port=29500)
    (event,) = read_events(tmp_path)
    assert (tmp_path / layout.EVENTS_FILE).is_file()
    assert {k: v for k, v in event.items() if k != "time"} == {
        "event": "workers_store",
        "host": "algo-1",
        "attempt": 0,
        "port": 29500,
    }
    assert isinstance(event["time"], float)
    assert is_kind(event, EventKind.RESTART, EventKind.WORKERS_STORE)
    assert not is_kind(event, EventKind.RESTART)
    assert workers_store_ports(tmp_path) == [29500]


def test_the_follower_reads_each_complete_event_once(tmp_path: Path) -> None:
    follower = EventFollower(tmp_path)
    assert follower.read_new() == []  # no file yet
    record_event(tmp_path, EventKind.HANG, host="")
    with open(tmp_path / layout.EVENTS_FILE, "a") as half:
        half.write('{"event": "restart"')  # a writer half-way through its line
    assert [e["event"] for e in follower.read_new()] == ["hang"]
    assert follower.read_new() == []


def test_hosts_in_rendezvous_are_those_without_a_round_since_their_last_restart(
    tmp_path: Path,
) -> None:
    record_event(tmp_path, EventKind.RENDEZVOUS, host="algo-1", attempt=0)
    record_event(tmp_path, EventKind.RENDEZVOUS, host="algo-2", attempt=0)
    record_event(tmp_path, EventKind.RESTART, host="algo-2")
    assert hosts_in_rendezvous(tmp_path, ["algo-1", "algo-2", "algo-3"]) == ["algo-2", "algo-3"]


def test_rank_of_reads_the_rank_from_any_rank_file_name() -> None:
    assert layout.rank_of(layout.rank_file("/job", 3)) == 3
    assert layout.rank_of(layout.rank_steps_file("/job", 12)) == 12
    stem = layout.rank_log_stem("/job/logs", 7, "algo-2", attempt=1)
    assert layout.rank_of(layout.stdout_file(stem)) == 7
    assert layout.rank_of("/job/logs/agent-algo-1.log") is None
    assert layout.rank_of("rank-x.jsonl") is None
