"""End to end on the local backend: real processes, real gloo, real rendezvous."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tenter.contract.plan import Plan
from tenter.jobdir.events import EventKind, is_kind, read_events
from tests.conftest import REPO, SCRIPTS, Background, assert_nothing_left, job_dirs, tenter

pytestmark = pytest.mark.slow

HOSTILE = "a b 'c' \"d\"; $(touch /tmp/tenter-pwned) `id` \\n*"


def test_run_gives_every_rank_its_host_and_hostile_values_arrive_verbatim() -> None:
    """(The whole planned environment of every rank: test_plan_is_what_runs.py.)"""
    done = tenter(
        "run",
        "--hosts",
        "2",
        "--procs-per-host",
        "2",
        "--hp",
        f"note={HOSTILE}",
        "--hp",
        "lr=0.1",
        "--channel",
        f"training={SCRIPTS}",
        str(SCRIPTS / "contract.py"),
        "--",
        "--extra",
        HOSTILE,
    )
    assert done.returncode == 0, done.stderr
    job_dir = done.job_dir
    plan = Plan.from_json((job_dir / "plan.json").read_text())
    for host in plan.hosts:
        for rank in host.ranks:
            seen = json.loads(
                (Path(host.dir) / "output/data" / f"rank-{rank.rank}.json").read_text()
            )
            assert seen["argv"] == ["--lr", "0.1", "--note", HOSTILE, "--extra", HOSTILE]
            assert seen["env"]["SM_HP_NOTE"] == HOSTILE
            assert seen["cwd"] == str(REPO)  # the caller's (tenter()'s), as under torchrun
            assert seen["env"]["SM_CURRENT_HOST"] == host.name
            assert seen["env"]["MASTER_ADDR"] == "127.100.0.1"
            assert os.readlink(Path(host.dir) / "input/data/training") == str(SCRIPTS)
    assert not Path("/tmp/tenter-pwned").exists()
    assert "[algo-2,3]<stdout>: rank 3 of 4 on algo-2: all_reduce ok" in done.stdout
    config = json.loads((job_dir / "hosts/algo-2/input/config/resourceconfig.json").read_text())
    assert config["current_host"] == "algo-2"
    assert config["hosts"] == ["algo-1", "algo-2"]
    assert (job_dir / "hosts/algo-1/output/success").exists()
    assert "succeeded" in done.stderr
    assert_nothing_left(job_dir)


def test_run_reports_the_failing_rank_as_root_cause_with_its_traceback() -> None:
    """(A rank killed by a signal or exiting with a status: see test_faults.py.)"""
    done = tenter(
        "run",
        "--hosts",
        "2",
        "--procs-per-host",
        "2",
        "--env",
        "FAIL_MODE=raise",
        str(SCRIPTS / "fail.py"),
    )
    assert done.returncode == 1  # a failed job; the root cause's own status is in the summary
    (root,) = [f for f in done.summary["failures"] if not f["secondary"]]  # type: ignore[attr-defined]
    assert root["exit_code"] == 1
    summary = done.stderr[done.stderr.index("FAILED after") :]
    assert "root cause: rank 3 on host algo-2 (local rank 1" in summary
    assert "ValueError: boom at step 3" in summary
    assert 'File "' + str(SCRIPTS / "fail.py") in summary
    # The bootstrap's own frames are not the user's concern.
    assert "bootstrap.py" not in summary
    failure = (done.job_dir / "hosts/algo-2/output/failure").read_text()
    assert failure.startswith("rank 3 on algo-2 failed")
    # Its agent told the launcher (which reads no rank's error file while the job runs).
    told = [e for e in read_events(done.job_dir) if is_kind(e, EventKind.RANK_FAILED)]
    assert [(e["host"], e["rank"]) for e in told][:1] == [("algo-2", 3)]
    assert_nothing_left(done.job_dir)


def test_ctrl_c_stops_every_rank_and_leaves_nothing() -> None:
    job = Background("run", "--hosts", "2", "--procs-per-host", "2", str(SCRIPTS / "block.py"))
    job.wait_for("ready", count=4)  # every rank past its barrier: the job is fully up
    job.proc.send_signal(signal.SIGINT)
    out = job.finish(timeout=60)
    assert job.proc.returncode == 130
    assert "was interrupted" in out
    assert_nothing_left(job.job_dir)


def test_two_jobs_at_once_do_not_clash(tenter_home: Path) -> None:
    cmd = [
        sys.executable,
        "-m",
        "tenter",
        "run",
        "--hosts",
        "2",
        "--procs-per-host",
        "1",
        str(SCRIPTS / "contract.py"),
    ]
    jobs = [
        subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for _ in range(2)
    ]
    for job in jobs:
        job.communicate(timeout=180)
        assert job.returncode == 0
    finished = job_dirs(tenter_home / "jobs")
    assert len(finished) == 2
    ports = {json.loads((d / "summary.json").read_text())["rdzv_endpoint"] for d in finished}
    assert len(ports) == 2
    for job_dir in finished:
        assert_nothing_left(job_dir)


def test_digits_example_reaches_the_accuracy_target_on_2x2() -> None:
    done = tenter("run", str(REPO / "examples/digits/job.yaml"), "--hp", "epochs=12")
    assert done.returncode == 0, done.stderr
    metrics = json.loads((done.job_dir / "hosts/algo-1/model/metrics.json").read_text())
    assert metrics["test_accuracy"] >= 0.95
    assert (done.job_dir / "hosts/algo-1/model/model.pt").exists()
    assert "[algo-1,0]<stdout>: epoch  12" in done.stdout
    assert "[algo-2," not in done.stdout  # logs.ranks: [0]
    assert (done.job_dir / "logs/rank-3.stdout").exists()
    assert_nothing_left(done.job_dir)


def test_a_job_whose_ranks_crashed_after_finishing_their_script_succeeds() -> None:
    done = tenter("run", "--hosts", "1", "--procs-per-host", "2", str(SCRIPTS / "crash_at_exit.py"))
    assert done.returncode == 0, done.stderr
    assert "succeeded in" in done.stderr
    assert "finished its script, then ended with signal 6 (SIGABRT" in done.stderr
    assert_nothing_left(done.job_dir)
