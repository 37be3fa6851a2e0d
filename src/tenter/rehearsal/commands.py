"""The rehearsal's commands to its light ranks and agents: files in the job's control folder
(:func:`tenter.jobdir.control.control_dir`), beside tenter's own requests, so that a rank
reads them with the one ``stat`` a step it makes anyway (:mod:`tenter.rehearsal.rank`)."""

from __future__ import annotations

from pathlib import Path

from tenter.jobdir.control import control_dir, made_control_dir

HANG_FILE = "rehearsal-hang"
SLOW_PREFIX = "rehearsal-slow-"
FINISH_FILE = "rehearsal-finish"
LOSE_PREFIX = "rehearsal-lose-"


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def hang(job_dir: str, culprit: int) -> None:
    """Every rank but ``culprit`` enters an all-reduce it never leaves."""
    (made_control_dir(job_dir) / HANG_FILE).write_text(str(culprit))


def hang_culprit(job_dir: str) -> int | None:
    text = _read(control_dir(job_dir) / HANG_FILE)
    return int(text) if text else None


def slow(job_dir: str, rank: int, factor: float) -> None:
    """Rank ``rank`` steps ``factor`` times slower from its next step."""
    (made_control_dir(job_dir) / f"{SLOW_PREFIX}{rank}").write_text(str(factor))


def slow_factor(job_dir: str, rank: int) -> float:
    text = _read(control_dir(job_dir) / f"{SLOW_PREFIX}{rank}")
    return float(text) if text else 1.0


def finish(job_dir: str) -> None:
    """Every rank returns after its next step: the job succeeds."""
    (made_control_dir(job_dir) / FINISH_FILE).write_text("")


def finish_requested(job_dir: str) -> bool:
    return (control_dir(job_dir) / FINISH_FILE).exists()


def lose_host(job_dir: str, host: str) -> None:
    """The host dies: its agent and its ranks are gone at once (:mod:`tenter.rehearsal.pack`)."""
    (made_control_dir(job_dir) / f"{LOSE_PREFIX}{host}").write_text("")


def host_to_lose(job_dir: str, host: str) -> bool:
    return (control_dir(job_dir) / f"{LOSE_PREFIX}{host}").exists()
