"""The ledger's inputs read from job directories: a preempted run and the run resuming it
(same job name, same checkpoint directory) make one ledger; other jobs beside them do not."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tenter.errors import ExitCode
from tenter.goodput.keeper import LedgerKeeper, record_checkpoint
from tenter.goodput.stragglers import StragglerRule, find_stragglers
from tenter.jobdir.layout import rank_file
from tenter.jobdir.results import JobResult, write_result
from tenter.launch import api
from tenter.launch.launcher.output import create_job_dir
from tenter.spec import load
from tests.monitor.helpers import launched_at

T0 = 1_000_000.0


def job(tmp_path: Path, job_id: str, checkpoints: Path, name: str = "train") -> Path:
    (tmp_path / "train.py").touch()
    spec, _ = load(
        {
            "name": name,
            "entry_point": "train.py",
            "output_dir": str(tmp_path / "jobs"),
            "checkpoint": {"dir": str(checkpoints)},
        },
        tmp_path,
    )
    plan = api.dryrun(spec, job_id)
    create_job_dir(plan)
    return Path(plan.job_dir)


def ran(job_dir: Path, launch: float, steps: range, every: float, end: float, code: int) -> None:
    """Launched at ``launch``; rank 0 reported ``steps`` from launch + 1, ``every`` seconds
    apart; ended at ``end``."""
    launched_at(job_dir, launch)
    path = rank_file(job_dir, 0)
    path.parent.mkdir(exist_ok=True)
    lines = [{"time": launch + 1 + every * i, "step": s} for i, s in enumerate(steps)]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    write_result(job_dir, JobResult(job_dir.name, str(job_dir), code, end - launch, 1, 1))
    os.utime(job_dir / "summary.json", (end, end))


def test_ledger_continues_across_preempted_run_and_its_resume(tmp_path: Path) -> None:
    checkpoints = tmp_path / "ckpt"
    first = job(tmp_path, "train-20260101-000000-aaaa", checkpoints)
    ran(first, T0, range(1, 11), 1.0, T0 + 12, ExitCode.PREEMPTED)  # steps 1-10 at T0+1..10
    other = job(tmp_path, "train-20260101-000001-bbbb", tmp_path / "elsewhere")
    ran(other, T0 + 13, range(1, 3), 1.0, T0 + 15, ExitCode.PREEMPTED)  # not this job's
    second = job(tmp_path, "train-20260101-000002-cccc", checkpoints)
    ran(second, T0 + 20, range(9, 21), 1.0, T0 + 33, 0)  # resumed from the checkpoint of 8
    ledger = LedgerKeeper(second).ledger()
    assert ledger.runs == [first.name, second.name]
    assert ledger.wall_s == pytest.approx(33.0)
    assert ledger.parts["preemption"] == pytest.approx(2.0 + 8.0)  # its end, then the wait
    assert ledger.lost_steps == 2  # steps 9 and 10 again
    assert ledger.productive_steps == 20
    assert sum(ledger.parts.values()) == pytest.approx(ledger.wall_s)


def test_ledger_starts_afresh_if_previous_run_succeeded(tmp_path: Path) -> None:
    checkpoints = tmp_path / "ckpt"
    first = job(tmp_path, "train-20260101-000000-aaaa", checkpoints)
    ran(first, T0, range(1, 11), 1.0, T0 + 12, 0)
    second = job(tmp_path, "train-20260101-000002-cccc", checkpoints)
    ran(second, T0 + 20, range(1, 5), 1.0, T0 + 26, 0)
    assert LedgerKeeper(second).ledger().runs == [second.name]


def test_checkpoint_records_become_the_checkpoint_part(tmp_path: Path) -> None:
    job_dir = job(tmp_path, "train-20260101-000000-aaaa", tmp_path / "ckpt")
    ran(job_dir, T0, range(1, 11), 1.0, T0 + 12, 0)
    record_checkpoint(str(job_dir), 0, "algo-1", 5, start=T0 + 5.2)  # ends now: clipped
    ledger = LedgerKeeper(job_dir).ledger()
    assert ledger.parts["checkpoint"] == pytest.approx(12 - 5.2)


def test_keeper_names_stragglers_from_the_lines_each_pass_adds(tmp_path: Path) -> None:
    job_dir = job(tmp_path, "train-20260101-000000-aaaa", tmp_path / "ckpt")
    launched_at(job_dir, T0)
    rule = StragglerRule(window=5, windows=3)
    keeper, named = LedgerKeeper(job_dir), []
    for first in range(1, 41, 10):  # four passes, each after ten more steps of every rank
        for rank in range(4):  # rank 2 computes 30 ms longer at every step
            path = rank_file(job_dir, rank)
            path.parent.mkdir(exist_ok=True)
            with path.open("a") as out:
                for step in range(first, first + 10):
                    t = T0 + 1 + 0.2 * step + (0.13 if rank == 2 else 0.1)
                    out.write(json.dumps({"time": t, "step": step}) + "\n")
        keeper.ledger(now=T0 + 20)
        named = keeper.stragglers(rule)
        assert named == find_stragglers(keeper.reader.arrivals, {}, rule)
    assert [(s.rank, s.step) for s in named] == [(2, 16)]
