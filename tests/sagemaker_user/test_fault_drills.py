"""A SageMaker user's first day (issue 39, item 8): the fault drills the docs suggest. One
worker can be killed (`tenter fault JOB kill --rank N`), not only a whole host, and a
hyperparameter given again after `--` replaces the spec's instead of repeating it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tenter.errors import ExitCode
from tests.conftest import Background, assert_nothing_left, tenter

DDP = str(Path(__file__).parents[1] / "first_day" / "scripts" / "torchrun_ddp.py")


def test_a_hyperparameter_after_the_separator_replaces_the_specs(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("")
    (tmp_path / "job.yaml").write_text(
        "entry_point: train.py\nhyperparameters: {steps: 200, lr: 0.1}\n"
    )
    plan = tenter("plan", "--json", "job.yaml", "--", "--steps", "4000", "--seed=1", cwd=tmp_path)
    assert plan.returncode == 0, plan.stderr
    planned = json.loads(plan.stdout)
    command = planned["command"]
    given = command[command.index(str(tmp_path / "train.py")) + 1 :]
    assert given == ["--lr", "0.1", "--steps", "4000", "--seed=1"]
    env = planned["env"]
    assert env["SM_HP_STEPS"] == "4000" and json.loads(env["SM_HPS"]) == {"steps": 4000, "lr": 0.1}


@pytest.mark.slow
def test_fault_kill_rank_kills_one_worker_and_the_job_restarts(tenter_home: Path) -> None:
    job = Background(
        "run", "--hosts", "2", "--procs-per-host", "2", "--max-restarts", "1", DDP,
        "--", "--steps", "150", home=tenter_home,
    )  # fmt: skip
    job.wait_for("ready", count=4)
    killed = tenter("fault", job.job_dir.name, "kill", "--rank", "1")
    assert killed.returncode == 0, killed.stderr
    assert killed.stdout.startswith("killed rank 1 (pid ") and "on algo-1" in killed.stdout
    job.wait_for("ready", count=4)  # the restarted group steps again
    out = job.finish()
    assert job.proc.returncode == 0, out
    assert "restarting the workers (0 restarts left)" in out
    assert "host algo-1 lost" not in out  # one worker, not its host
    assert_nothing_left(job.job_dir)


def test_fault_kill_rank_refuses_what_no_job_has(tenter_home: Path) -> None:
    job = Background("run", "--hosts", "1", "--procs-per-host", "1", DDP, home=tenter_home)
    job.wait_for("ready")
    for args, message in (
        (["kill", "--rank", "7"], "has ranks 0 to 0, not 7"),
        (["partition", "--rank", "0"], "--rank: goes with `kill` and no HOST"),
        (["kill"], "HOST: kill needs a host"),
    ):
        refused = tenter("fault", job.job_dir.name, *args)
        assert refused.returncode == ExitCode.BAD_INPUT, (args, refused.stderr)
        assert message in refused.stderr and "Traceback" not in refused.stderr
    cancelled = tenter("cancel", job.job_dir.name)
    assert cancelled.returncode == 0, cancelled.stderr
    job.finish()
    assert_nothing_left(job.job_dir)
