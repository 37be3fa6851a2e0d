"""Preemption as the ranks see it: the job directory's request or a SIGTERM makes
``Checkpointer.maybe_save`` save a final checkpoint at that step, off its interval, agreed by
every rank, and record the rank as preempted; a SIGTERM while the rank's agent stops it is
still a stop. (The whole path, launcher to resume, is tests/launch/test_preemption.py.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from preempt_workers import ignore_preempted, sigterm_one_rank
from torch import nn

from tenter.checkpoint import Checkpointer
from tenter.errors import ExitCode
from tenter.jobdir import control
from tenter.runtime import preemption
from tests.conftest import OutputReader
from tests.world import run_world


@pytest.fixture
def job_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A rank's environment under `tenter run` (grace 30 s); pytest's SIGTERM handler and the
    module's state are restored after."""
    job = tmp_path / "job"
    job.mkdir()
    monkeypatch.setenv("TENTER_JOB_DIR", str(job))
    monkeypatch.setenv("TENTER_HOST", "algo-1")
    monkeypatch.setenv(preemption.GRACE_ENV, "30")
    handler = signal.getsignal(signal.SIGTERM)
    yield job
    signal.signal(signal.SIGTERM, handler)
    monkeypatch.setattr(preemption, "_signalled", False)


def latest_step(ckpt_dir: Path) -> int:
    manifest = json.loads((ckpt_dir / "manifest.json").read_text())
    return int(manifest["checkpoints"][-1]["step"])


def test_a_request_makes_maybe_save_save_off_its_interval_and_say_preempted(
    job_dir: Path, tmp_path: Path
) -> None:
    ckpt = Checkpointer(nn.Linear(2, 2), dir=tmp_path / "ckpt", every=10)
    assert ckpt.maybe_save(2) is False and not ckpt.preempted
    control.request_preemption(job_dir, 30, by="test")
    assert ckpt.maybe_save(3) is True and ckpt.preempted
    assert latest_step(tmp_path / "ckpt") == 3
    (record,) = control.preempted_ranks(job_dir)
    assert (record["rank"], record["step"]) == (0, 3)
    assert record["checkpoint"] == str(tmp_path / "ckpt" / "step-00000003")


def test_a_sigterm_is_a_request_where_preemption_is_on(job_dir: Path, tmp_path: Path) -> None:
    ckpt = Checkpointer(nn.Linear(2, 2), dir=tmp_path / "ckpt", every=10)
    signal.raise_signal(signal.SIGTERM)  # the handler runs before this returns
    assert ckpt.maybe_save(4) is True and ckpt.preempted
    assert latest_step(tmp_path / "ckpt") == 4


def test_nothing_is_checked_if_the_grace_period_is_0(
    job_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(preemption.GRACE_ENV, "0")
    control.request_preemption(job_dir, 0, by="test")
    ckpt = Checkpointer(nn.Linear(2, 2), dir=tmp_path / "ckpt", every=10)
    assert ckpt.maybe_save(3) is False and not ckpt.preempted
    assert signal.getsignal(signal.SIGTERM) is not preemption._on_sigterm


def test_every_rank_stops_at_the_step_after_one_rank_was_signalled(tmp_path: Path) -> None:
    env = {"TENTER_JOB_DIR": str(tmp_path), "TENTER_HOST": "algo-1", preemption.GRACE_ENV: "30"}
    world = run_world(sigterm_one_rank, 2, args=(tmp_path, 5), env=env)
    # The flags all-reduced at step 5 decide at step 6 (the all-reduce runs during the step).
    assert world.values() == [{"step": 6, "preempted": True}] * 2
    assert latest_step(tmp_path / "ckpt") == 6
    assert [(r["rank"], r["step"]) for r in control.preempted_ranks(tmp_path)] == [(0, 6), (1, 6)]


def test_a_loop_that_ignores_preempted_is_stopped_at_its_next_maybe_save(tmp_path: Path) -> None:
    env = {"TENTER_JOB_DIR": str(tmp_path), "TENTER_HOST": "algo-1", preemption.GRACE_ENV: "30"}
    world = run_world(ignore_preempted, 2, args=(tmp_path, 5), env=env)
    # The final checkpoint at step 6; the next maybe_save (step 7) ends the rank with 75.
    assert world.values() == [{"step": 7, "code": ExitCode.PREEMPTED, "preempted": True}] * 2
    manifest = json.loads((tmp_path / "ckpt" / "manifest.json").read_text())
    assert [c["step"] for c in manifest["checkpoints"]] == [6]


RANK = """
import os, sys
from tenter.jobdir import control
from tenter.runtime import preemption
checker = preemption.Preemption()
if os.environ.get("AGENT_STOPPING"):
    control.stopping_marker(os.environ["TENTER_JOB_DIR"], "algo-1").parent.mkdir()
    control.stopping_marker(os.environ["TENTER_JOB_DIR"], "algo-1").touch()
print("ready", flush=True)
sys.stdin.read()  # until the test has signalled and closed stdin: the handler ran before
print("preempted" if checker.agreed() else "not preempted", flush=True)
"""


@pytest.mark.parametrize(
    ("agent_stopping", "outcome"), [("", (0, "preempted")), ("1", (-signal.SIGTERM, ""))]
)
def test_a_sigterm_while_the_agent_stops_the_rank_ends_it(
    job_dir: Path, agent_stopping: str, outcome: tuple[int, str]
) -> None:
    rank = subprocess.Popen(
        [sys.executable, "-c", RANK],
        env={**os.environ, "AGENT_STOPPING": agent_stopping},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert rank.stdin is not None and rank.stdout is not None
    output = OutputReader(rank.stdout)
    try:
        output.wait_for("ready")
        rank.send_signal(signal.SIGTERM)
        rank.stdin.close()
        out = output.read_all().removeprefix("ready\n").strip()
    except (TimeoutError, EOFError):
        rank.kill()  # only then: the rank's own status is what the test checks
        raise
    assert (rank.wait(timeout=30), out) == outcome
