"""Who is in the job: ``membership.jsonl``, one line at launch and one per host that joined::

    {"event": "launch", "time": 1764270000.1, "hosts": ["algo-1", "algo-2"]}
    {"event": "join", "time": 1764270042.7, "host": "algo-3"}

``plan.json`` is the request as launched, written once and never again; the hosts that
``tenter join`` added since are here (the plan's spare hosts, in order), and every reader
that needs the hosts as they are now reads both (:func:`tenter.contract.plan.read_plan`).
The launch line is the ledger's start of the job (:mod:`tenter.goodput.keeper`).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from tenter.jobdir.layout import MEMBERSHIP_FILE, PLAN_FILE
from tenter.jobdir.line_files import append_line, read_lines

LAUNCH_EVENT = "launch"
JOIN_EVENT = "join"


def record_launch(job_dir: str | Path, hosts: list[str]) -> None:
    append_line(
        Path(job_dir) / MEMBERSHIP_FILE,
        {"event": LAUNCH_EVENT, "time": time.time(), "hosts": hosts},
    )


def record_join(job_dir: str | Path, host: str) -> None:
    append_line(
        Path(job_dir) / MEMBERSHIP_FILE, {"event": JOIN_EVENT, "time": time.time(), "host": host}
    )


def joined_hosts(job_dir: str | Path) -> list[str]:
    """The hosts that joined since the launch, in order."""
    lines = read_lines(Path(job_dir) / MEMBERSHIP_FILE)
    return [str(line["host"]) for line in lines if line["event"] == JOIN_EVENT]


def launch_time(job_dir: str | Path) -> float:
    """When the job was launched: its launch line; for a job directory written before there
    was one (or by a backend that writes none), when its plan was written."""
    for line in read_lines(Path(job_dir) / MEMBERSHIP_FILE):
        if line["event"] == LAUNCH_EVENT:
            return float(line["time"])
    return os.stat(Path(job_dir) / PLAN_FILE).st_mtime
