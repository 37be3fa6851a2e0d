"""The rehearsal's commands to its light ranks and agents: files in the job's control folder
(:func:`tenter.jobdir.control.control_dir`), beside tenter's own requests, so that a rank
reads them with the one ``stat`` a step it makes anyway (:mod:`tenter.rehearsal.rank`); and
the rehearsal's own folder in the job directory (:data:`FOLDER`): each round's first step,
the store's counts (:mod:`tenter.rehearsal.store_count`)."""

from __future__ import annotations

import os
from pathlib import Path

from tenter.jobdir.control import control_dir, made_control_dir

HANG_FILE = "rehearsal-hang"
SLOW_PREFIX = "rehearsal-slow-"
FINISH_FILE = "rehearsal-finish"
LOSE_PREFIX = "rehearsal-lose-"
FOLDER = "rehearsal"


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def hang(job_dir: str, culprit: int, culprit_step: int) -> None:
    """Every rank but ``culprit``, stopped after its step ``culprit_step``, enters the
    all-reduce of the next step, which it never leaves."""
    (made_control_dir(job_dir) / HANG_FILE).write_text(f"{culprit} {culprit_step}")


def hang_culprit(job_dir: str) -> tuple[int, int] | None:
    """The culprit of a hang and its last step, if one was asked."""
    text = _read(control_dir(job_dir) / HANG_FILE)
    if not text:
        return None
    rank, step = text.split()
    return int(rank), int(step)


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


def round_start(job_dir: str, round_key: str, proposed: int) -> int:
    """The clock tick at which the round ``round_key`` started: the first of its ranks to
    ask sets it to ``proposed``, the others read it."""
    path = Path(job_dir) / FOLDER / f"round-{round_key}"
    if (text := _read(path)) is not None:
        return int(text)
    path.parent.mkdir(exist_ok=True)
    mine = path.with_name(f".{path.name}.{os.getpid()}")
    mine.write_text(str(proposed))
    try:
        os.link(mine, path)  # whole, and only if no other rank set it first
    except FileExistsError:
        pass
    finally:
        mine.unlink()
    return int(path.read_text())
