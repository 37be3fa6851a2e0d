"""Issue 38, item 6: the smaller things a torchrun user met on the first day, each run as they
ran it, with a plain torchrun script (no tenter imports)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import job_dirs, tenter

SCRIPT = """
import os, sys
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
print("argv", sys.argv[1:], "buffer", os.environ.get("TORCH_FR_BUFFER_SIZE"), flush=True)
t = torch.ones(1)
if os.environ.get("FAIL_RANK") == str(dist.get_rank()):
    raise ValueError("boom")
dist.all_reduce(t)  # the other rank: its peer is gone, gloo says "Connection closed by peer"
dist.destroy_process_group()
"""
SMALL = ("--nnodes", "1", "--nproc-per-node", "1")


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "train.py"
    path.write_text(SCRIPT)
    return path


def jobs(home: Path) -> list[Path]:
    return job_dirs(home / "jobs")


def test_run_options_after_the_script_are_tenters(script: Path, tenter_home: Path) -> None:
    started = tenter("run", *SMALL, script.name, "--epochs", "3", "--detach", cwd=script.parent)
    assert started.returncode == 0, started.stderr
    assert "note: --detach after the script is tenter's" in started.stderr
    job = started.stdout.strip()
    logs = tenter("logs", job, "--follow", cwd=script.parent)  # returns once the job ended
    assert "argv ['--epochs', '3']" in logs.stdout, logs.stdout
    # After --, the script's.
    passed = tenter("run", *SMALL, script.name, "--", "--detach", cwd=script.parent)
    assert passed.returncode == 0, passed.stderr
    assert "argv ['--detach']" in passed.stdout


def test_run_of_a_job_directory_runs_that_job_again(script: Path, tenter_home: Path) -> None:
    first = tenter("run", *SMALL, script.name, "--", "--seed", "5", cwd=script.parent)
    assert first.returncode == 0, first.stderr
    # "1 hosts", "1 hosts x 1 processes = 1 ranks" no more
    assert "rendezvous: 1 host (algo-1)" in first.stderr
    assert "(1 host x 1 process = 1 rank)" in first.stderr
    (job_dir,) = jobs(tenter_home)
    again = tenter("run", str(job_dir), cwd=script.parent.parent)
    assert again.returncode == 0, again.stderr
    assert "argv ['--seed', '5']" in again.stdout
    second = next(d for d in jobs(tenter_home) if d != job_dir)
    plan = json.loads((second / "plan.json").read_text())
    first_plan = json.loads((job_dir / "plan.json").read_text())
    assert plan["checkpoint_dir"] == first_plan["checkpoint_dir"]  # it resumes from there


def test_a_directory_that_is_no_job_is_not_said_missing(tmp_path: Path) -> None:
    done = tenter("run", str(tmp_path))
    assert done.returncode == 2
    assert "is a directory, not a script. Fix: " in done.stderr
    assert "does not exist" not in done.stderr


def test_no_rank_warns_of_the_flight_recorder_variable(script: Path) -> None:
    # A hang timeout turns the flight recorder on in every rank.
    spec = script.parent / "job.yaml"
    spec.write_text("entry_point: train.py\ninstance_count: 2\nelastic: {hang_timeout: 120}\n")
    done = tenter("run", str(spec), cwd=script.parent)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("buffer 2000") == 2  # the recorder is on, under the name read
    assert "deprecated" not in done.stderr


def test_collateral_ranks_and_attempts(script: Path, tenter_home: Path) -> None:
    spec = script.parent / "job.yaml"
    spec.write_text(
        "entry_point: train.py\ninstance_count: 2\nelastic: {max_restarts: 2}\n"
        "environment: {FAIL_RANK: '1'}\n"
    )
    done = tenter("run", str(spec), cwd=script.parent)
    assert done.returncode == 1, done.stderr
    (job_dir,) = jobs(tenter_home)
    logs = job_dir / "logs"
    # Rank 0 met its peer's failure each time; its log keeps the traceback, the console one line.
    collateral = [logs / "rank-0.stderr", *logs.glob("rank-0.algo-1.attempt-*.stderr")]
    assert len(collateral) == 3
    for path in collateral:
        assert "Connection closed by peer" in path.read_text()
        folded = (
            f"RuntimeError (Connection closed by peer): a peer failed first; traceback in {path}"
        )
        assert folded in done.stderr
    rank0 = [line for line in done.stderr.splitlines() if line.startswith("[algo-1,0]")]
    assert not [line for line in rank0 if "Traceback" in line or "File " in line], rank0
    assert "ValueError: boom" in done.stderr.split("root cause:")[1]  # the real failure
    assert "(1 restart left)" in done.stderr and "1 restarts" not in done.stderr
    # tenter logs: a line between a rank's attempts.
    shown = tenter("logs", job_dir.name)
    text = shown.stdout + shown.stderr
    for attempt in (2, 3):
        header = f"==> rank 0 on algo-1, attempt {attempt} (logs/rank-0.algo-1.attempt-"
        assert header in text, text
    out = shown.stdout.splitlines()
    starts = [i for i, line in enumerate(out) if line.startswith("==> rank 0 on algo-1")]
    firsts = [i for i, line in enumerate(out) if line.startswith("[algo-1,0]<stdout>: argv")]
    assert len(starts) == 2 and len(firsts) == 3
    assert firsts[0] < starts[0] < firsts[1] < starts[1] < firsts[2]


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("instance_count: true\nentry_point: train.py", "instance_count: True is not a valid"),
        ("processes_per_hst: 2\nentry_point: train.py", "processes_per_hst: unknown field"),
        ("instance_count: 1", "entry_point: is required"),
        ("entry_point: nope.py", "entry_point: 'nope.py' does not exist"),
    ],
)
def test_spec_errors_say_how_to_fix(script: Path, spec: str, expected: str) -> None:
    path = script.parent / "job.yaml"
    path.write_text(spec)
    done = tenter("run", str(path), cwd=script.parent)
    assert done.returncode == 2
    assert re.fullmatch(rf"error: {re.escape(expected)}[^\n]*\. Fix: \S[^\n]*\n", done.stderr), (
        done.stderr
    )
