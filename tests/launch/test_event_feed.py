"""The launcher's console lines for the agents' events (tenter.launch.shared.console.EventFeed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tenter.jobdir.events import EventKind, record_event
from tenter.launch.shared.console import EventFeed


def rendezvous(job_dir: Path, host: str, attempt: int) -> None:
    record_event(job_dir, EventKind.RENDEZVOUS, host=host, hosts=2, world_size=4, attempt=attempt)


def restart(job_dir: Path, host: str, failed_at: float | None, killed: bool) -> None:
    record_event(
        job_dir, EventKind.RESTART, host=host, run_id="job", restart_count=1, used=True,
        remaining=1, failed_at=failed_at, killed=killed,
    )  # fmt: skip


@pytest.mark.parametrize("order", [("algo-1", "algo-2"), ("algo-2", "algo-1")])
def test_a_restart_names_the_host_whose_worker_failed_first_whichever_reports_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], order: tuple[str, str]
) -> None:
    # algo-2's worker was SIGKILLed at t=10; algo-1's ranks failed after it, their
    # all-reduce broken by its death: algo-1 may still report its restart first.
    feed = EventFeed(str(tmp_path))
    rendezvous(tmp_path, "algo-1", 0)
    rendezvous(tmp_path, "algo-2", 0)
    feed.print_new()
    failures = {"algo-1": (10.2, False), "algo-2": (10.0, True)}
    restart(tmp_path, order[0], *failures[order[0]])
    feed.print_new()
    assert "restarting" not in capsys.readouterr().err  # algo-x waits for its peer's report
    restart(tmp_path, order[1], *failures[order[1]])
    feed.print_new()
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["tenter: algo-2: a worker failed; restarting the workers (1 restart left)"]


def test_a_host_asked_to_restart_is_not_named_and_a_new_round_says_the_restart_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    feed = EventFeed(str(tmp_path))
    rendezvous(tmp_path, "algo-1", 0)
    rendezvous(tmp_path, "algo-2", 0)
    restart(tmp_path, "algo-1", None, False)  # asked by algo-2, whose report is not in yet
    rendezvous(tmp_path, "algo-1", 1)
    feed.print_new()
    err = capsys.readouterr().err
    assert err.splitlines()[-1].endswith("restarting the workers (1 restart left)")
    restart(tmp_path, "algo-2", 10.0, True)  # the same restart, said once
    feed.print_new()
    assert "restarting" not in capsys.readouterr().err


def test_an_event_of_no_host_is_passed_over_not_a_crash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A rank's own event (a skipped checkpoint) written without a host: the launcher's feed
    # raised KeyError on it and took the launcher down.
    feed = EventFeed(str(tmp_path))
    record_event(tmp_path, EventKind.CHECKPOINT_SKIPPED, step=16, rank=0)
    rendezvous(tmp_path, "algo-1", 0)
    rendezvous(tmp_path, "algo-2", 0)
    feed.print_new()
    assert capsys.readouterr().err.splitlines() == [
        "tenter: rendezvous: 2 hosts (algo-1, algo-2), world size 4"
    ]
