"""A torchrun user's first day (issue 38, items 1 and 2): the same command run again resumes a
preempted job, the checkpoint directory can be named on the command line, and SIGTERM reaches
every rank as soon as tenter gets it, as torchrun passes it on, whatever the script does with
it; the job ends as preempted (exit 75) only when a final checkpoint was made."""

from __future__ import annotations

import json
import re
import signal
import time
from pathlib import Path

import pytest

from tenter.errors import ExitCode
from tests.conftest import (
    REPO,
    WAIT_S,
    Background,
    assert_nothing_left,
    job_checkpoints,
    job_dirs,
    tenter,
)

pytestmark = pytest.mark.slow

TRAIN = str(REPO / "examples" / "elastic" / "train.py")
DDP = str(Path(__file__).parent / "scripts" / "torchrun_ddp.py")
SIGTERM_DELIVERY_S = 5.0
"""At most this from tenter's SIGTERM to every rank's (it was the 30 s grace period)."""


def test_the_same_command_run_again_resumes_a_preempted_job(tenter_home: Path) -> None:
    command = ("run", "--hosts", "2", "--procs-per-host", "1", TRAIN, "--", "--epochs", "20")
    job = Background(*command, home=tenter_home)
    job.wait_for("saved checkpoint at step")
    job.proc.send_signal(signal.SIGTERM)
    out = job.finish()
    assert job.proc.returncode == ExitCode.PREEMPTED, out
    final = re.search(r"^preempted: final checkpoint at step (\d+) in \d+\.\d s$", out, re.M)
    assert final, out
    first = job.job_dir
    checkpoints = job_checkpoints(first)
    assert not checkpoints.is_relative_to(first)  # the job's, not the run's
    assert f"to resume from {checkpoints}, run the same command again: cd {REPO} && " in out
    assert out.rstrip().endswith(" ".join(["tenter", *command]))
    assert_nothing_left(first)

    again = tenter(*command)
    assert again.returncode == 0, again.stderr
    assert f"resumed at step {final[1]} " in again.stdout, again.stdout
    # Both runs are one job to the goodput ledger: the second continues the first's.
    (second,) = [d for d in job_dirs(tenter_home / "jobs") if d != first]
    summary = json.loads((second / "summary.json").read_text())
    assert len(summary["goodput"]["runs"]) == 2


def test_checkpoint_dir_flag_and_tenter_variables_in_env_are_refused(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    plan = tenter("plan", "--json", "--hosts", "2", "--checkpoint-dir", str(ckpt), DDP)
    assert plan.returncode == 0, plan.stderr
    assert json.loads(plan.stdout)["checkpoint_dir"] == str(ckpt)
    refused = tenter("run", "--env", f"TENTER_CHECKPOINT_DIR={ckpt}", DDP)
    assert refused.returncode == ExitCode.BAD_INPUT
    assert "environment.TENTER_CHECKPOINT_DIR: is set by tenter" in refused.stderr
    assert "--checkpoint-dir" in refused.stderr and "Traceback" not in refused.stderr
    assert not ckpt.exists() and not (Path(tmp_path) / "tenter-home" / "jobs").exists()


def sigterm_when_ready(home: Path, *script_args: str) -> tuple[Background, float, str]:
    """``tenter run`` of the plain DDP script on 2 hosts x 2, SIGTERMed once every rank steps;
    the time of the SIGTERM and all of the output."""
    job = Background("run", "--hosts", "2", "--procs-per-host", "2", DDP, *script_args, home=home)
    job.wait_for("ready", count=4)
    # Once the steps tenter counts (flushed every second) are on disk: what will be lost.
    counted = job.job_dir / "metrics" / "steps" / "rank-0.jsonl"
    deadline = time.monotonic() + WAIT_S
    while not (counted.exists() and counted.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    sent = time.time()
    job.proc.send_signal(signal.SIGTERM)
    return job, sent, job.finish()


def test_sigterm_reaches_a_plain_scripts_own_handler_at_once(tmp_path: Path) -> None:
    saved = tmp_path / "saved"
    job, sent, out = sigterm_when_ready(
        Path(tmp_path / "tenter-home"), "--on-sigterm", "save", str(saved)
    )
    got = [float(t) for t in re.findall(r"rank \d got SIGTERM at (\d+\.\d+)", out)]
    assert len(got) == 4, out
    assert max(got) - sent < SIGTERM_DELIVERY_S, out
    assert (saved / "model.pt").exists()
    # The handler saved outside the job's checkpoint directory: tenter cannot tell a final
    # checkpoint was made, so it says what was lost (exit 75 only with one, below).
    assert job.proc.returncode == ExitCode.INTERRUPTED, out
    assert "preempted without a final checkpoint" in out
    assert_nothing_left(job.job_dir)


def test_a_handler_that_saves_in_the_jobs_checkpoint_dir_ends_the_job_as_preempted(
    tmp_path: Path,
) -> None:
    ckpt = tmp_path / "ckpt"
    home = tmp_path / "tenter-home"
    job = Background(
        "run", "--hosts", "2", "--procs-per-host", "2", "--checkpoint-dir", str(ckpt), DDP,
        "--on-sigterm", "save", str(ckpt), home=home,
    )  # fmt: skip
    job.wait_for("ready", count=4)
    job.proc.send_signal(signal.SIGTERM)
    out = job.finish()
    assert job.proc.returncode == ExitCode.PREEMPTED, out
    assert f"preempted: the script's SIGTERM handler wrote to {ckpt}" in out
    assert f"to resume from {ckpt}, run the same command again" in out
    assert_nothing_left(job.job_dir)


def test_a_plain_script_without_a_handler_is_stopped_and_its_work_counted_lost(
    tmp_path: Path,
) -> None:
    job, sent, out = sigterm_when_ready(tmp_path / "tenter-home")
    ended = time.time()
    assert ended - sent < SIGTERM_DELIVERY_S + 5, out  # not the 30 s grace period
    assert job.proc.returncode == ExitCode.INTERRUPTED, out
    assert "rank 0 done" not in out  # stopped, not trained on to the end
    assert "preempted without a final checkpoint" in out
    assert "so the job lost all of its work" in out
    summary = json.loads((job.job_dir / "summary.json").read_text())
    assert summary["state"] == "interrupted" and summary["failures"] == []
    ledger = summary["goodput"]
    assert ledger["productive_steps"] == 0 and ledger["lost_steps"] >= 5, ledger
    assert ledger["parts"]["productive"] == 0 and ledger["parts"]["lost"] > 0, ledger
    assert_nothing_left(job.job_dir)
